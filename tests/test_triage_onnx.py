"""Per-node triage for ONNX Runtime: real ORT sessions on small graphs built here with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_edge.backends import Intermediates, get_backend
from pytest_edge.triage import node_divergence

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper

pytestmark = [
    pytest.mark.skipif(get_backend("onnxruntime-cpu").unavailable_reason() is not None,
                       reason="onnxruntime is not installed in this environment"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TIGHT = 1e-6  # atol and rtol: far above float32 rounding of the unfused graph, below the folding error


def _save(path: Path, nodes: list, inputs: list, outputs: list, initializers: list, opset: tuple = (("", 17),)) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opset])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_bn_model(path: Path) -> tuple[Path, np.ndarray]:
    """Conv -> BatchNormalization -> Relu on small integers: the Conv's sums are exact in any order,
    so ORT_DISABLE_ALL and onnx.reference agree to the last bits, while ORT_ENABLE_ALL folds the BN
    into the Conv's weights (w * scale / sqrt(var + eps), not representable): where an output
    cancels to about zero, the folded sums leave a residue far above TIGHT."""
    rng = np.random.default_rng(0)
    channels = 8
    initializers = [
        numpy_helper.from_array(rng.integers(-3, 4, (channels, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(0.5, 2, channels).astype(np.float32), "scale"),
        numpy_helper.from_array(np.zeros(channels, np.float32), "bias"),
        numpy_helper.from_array(rng.integers(-3, 4, channels).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(1e-3, 2e-3, channels).astype(np.float32), "var"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["y"], name="relu")]
    _save(path, nodes, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, channels, 16, 16])], initializers)
    return path, rng.integers(-3, 4, (1, 3, 16, 16)).astype(np.float32)


def integer_mlp_model(path: Path) -> tuple[Path, np.ndarray]:
    """MatMul + Add (ORT fuses them into Gemm) -> Relu -> Mul on small integers: every run is exact."""
    rng = np.random.default_rng(1)
    initializers = [numpy_helper.from_array(rng.integers(-3, 4, (6, 5)).astype(np.float32), "w"),
                    numpy_helper.from_array(rng.integers(-3, 4, 5).astype(np.float32), "b"),
                    numpy_helper.from_array(np.array(2, np.float32), "two")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
             helper.make_node("Add", ["mm", "b"], ["h"], name="add"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "two"], ["y"], name="double")]
    _save(path, nodes, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6])],
          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5])], initializers)
    return path, rng.integers(-3, 4, (2, 6)).astype(np.float32)


def _plain_run(path: Path, x: np.ndarray, level_name: str) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level_name)
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _intermediates(path: Path, x: np.ndarray) -> Intermediates:
    return get_backend("onnxruntime-cpu").load(path, threads=1, shapes={}).intermediates([x])


def test_folded_batchnorm_is_named_as_the_first_divergence(tmp_path: Path) -> None:
    path, x = conv_bn_model(tmp_path / "convbn.onnx")
    optimized, unoptimized = _plain_run(path, x, "ORT_ENABLE_ALL"), _plain_run(path, x, "ORT_DISABLE_ALL")
    # The premise, checked on ORT itself: the fold really changes the model's output.
    assert not np.allclose(optimized, unoptimized, atol=TIGHT, rtol=TIGHT)

    found = _intermediates(path, x)
    assert found.order == ["c", "bn", "y"]
    # Exposing 'c' keeps ORT from folding the BN, so each tensor was exposed alone.
    assert found.details.exposure == "one at a time" and found.details.exposure_delta > TIGHT
    assert np.array_equal(found.tensors["y"], optimized)
    assert np.array_equal(found.tensors["c"], found.details.runs["ORT_DISABLE_ALL"]["c"])
    assert "bn" in found.details.removed and "onnx.reference" in found.details.runs

    message = node_divergence(found, TIGHT, TIGHT)
    assert message.startswith("; first divergence: tensor 'bn', the output of BatchNormalization 'bn' (node 1) "
                              "(max |Δ| "), message
    assert "ORT_ENABLE_ALL against ORT_DISABLE_ALL)" in message
    assert "ORT_ENABLE_ALL's graph has no node 'bn' (fused or folded into another)" in message
    assert "ORT_DISABLE_ALL and onnx.reference agree on every node" in message
    # A tolerance wide enough for the fold names nothing.
    assert "first divergence" not in node_divergence(found, 1e-2, 1e-2)


def test_exact_graph_names_nothing_even_with_zero_tolerance(tmp_path: Path) -> None:
    path, x = integer_mlp_model(tmp_path / "mlp.onnx")
    found = _intermediates(path, x)
    # The fields every runtime's intermediates have (first_divergence reads them), keyed by tensor name here.
    assert found.order == ["mm", "h", "r", "y"] and found.delegated is False
    assert found.producers["h"] == "Add 'add' (node 1)" and found.names["h"] == "h"
    assert found.details.exposure == "all at once" and found.details.exposure_delta == 0.0
    assert set(found.details.runs) == {"ORT_DISABLE_ALL", "onnx.reference"} and not found.details.skipped
    message = node_divergence(found, 0.0, 0.0, "litert-ref")
    assert message.startswith("; no node differs beyond atol=0, rtol=0 between ORT_ENABLE_ALL, ORT_DISABLE_ALL "
                              "and onnx.reference: the golden's values come from elsewhere (its reference "
                              "litert-ref"), message
    assert "first divergence" not in message


def test_reference_evaluator_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """A com.microsoft operator runs on ORT but not on onnx.reference: ORT's two runs are still compared."""
    path = _save(tmp_path / "fused.onnx",
                 [helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
                  helper.make_node("Neg", ["g"], ["y"], name="neg")],
                 [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
                 [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [],
                 opset=(("", 17), ("com.microsoft", 1)))
    found = _intermediates(path, np.array([-1, 0, 1, 2], np.float32))
    assert found.details.skipped == {"onnx.reference": "it has operators of domain com.microsoft, which "
                                                  "onnx.reference does not implement"}
    message = node_divergence(found, 0.0, 0.0)
    assert "between ORT_ENABLE_ALL, ORT_DISABLE_ALL:" in message
    assert message.endswith("; onnx.reference skipped: it has operators of domain com.microsoft, which "
                            "onnx.reference does not implement")


def test_failure_message_names_the_folded_node(pytester: pytest.Pytester, models: Path,
                                               noopt_backend: str) -> None:
    """Goldens recorded by ORT without graph optimizations (a third-party backend, as in
    test_plugin); onnxruntime-cpu with a tight tolerance fails and its triage names the BN."""
    _, x = conv_bn_model(models / "convbn.onnx")
    pytester.makepyfile(f"""
        import numpy as np, pytest
        X = np.array({x.tolist()}, np.float32)

        @pytest.mark.edge(model="convbn", inputs={{"x": X}}, atol={TIGHT}, rtol={TIGHT},
                          backends=["onnxruntime-cpu", "onnxruntime-noopt"])
        def test_convbn(edge_model):
            pass
    """)
    result = pytester.runpytest_subprocess("--edge-update-golden", "--edge-reference-backend=onnxruntime-noopt")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        ("*triage: onnxruntime-cpu has no delegate-free sibling, so its convbn.onnx was run node by node with "
         "ORT_ENABLE_ALL, ORT_DISABLE_ALL and onnx.reference; first divergence: tensor 'bn', the output of "
         "BatchNormalization 'bn' (node 1) (max |Δ| *, ORT_ENABLE_ALL against ORT_DISABLE_ALL)*"),
    ])
