"""Shared by the test modules (imported by name: tests/ is on sys.path under pytest's rootdir mode)."""

from __future__ import annotations

import ast
import functools
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_edge.backends import TensorSpec, get_backend, tensor_backends
from pytest_edge.golden.layout import GoldenMeta, GoldenReference, GoldenSignature
from pytest_edge.files import sha256_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Tests that count on every runtime; the tflite-runtime lane (NumPy < 2) has no ExecuTorch.
needs_executorch = pytest.mark.skipif(get_backend("executorch").unavailable_reason() is not None,
                                      reason="ExecuTorch is not installed in this environment")
LIGHT = "--edge-backends=onnxruntime-cpu,litert,litert-ref"  # executorch costs ~4 s per process


def installed(backend: str) -> bool:
    """The backend's runtime imports here (a test that counts outcomes counts what is installed)."""
    return get_backend(backend).unavailable_reason() is None


def onnx_only_outcomes() -> dict[str, int]:
    """A model with only a .onnx, on every registered backend: ONNX Runtime and, where installed,
    OpenVINO (which reads .onnx) run it; every other backend is skipped with its reason."""
    runs = 1 + installed("openvino")
    return {"passed": runs, "skipped": len(tensor_backends()) - runs}


# Third-party pytest plugins installed in the main environment beside the runtimes (labgrid's,
# Hydra's, kgb's, anyio's, and hypothesis', which the suite's own tests use in this process) are
# imported by every pytest process: most of a bare session's start here (2.6 s against 0.35 s on
# a quiet machine; hypothesis' plugin alone 0.75 s: it imports hypothesis whole), paid by each
# pytest the suite starts, none of which uses them. Those runs block them (PYTEST_ADDOPTS); a
# user's session with them loaded is still run by the walkthrough, the labgrid sessions and the demo.
UNUSED_PLUGINS = "-p no:labgrid -p no:hydra_pytest -p no:kgb -p no:anyio -p no:hypothesispytest"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``pytest-edge ARGS`` in a fresh interpreter, in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "pytest_edge.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def golden_meta(artifact: Path) -> GoldenMeta:
    """The meta.json of a golden for model 'm' (one float32 input x, one output y of 4 values)
    recorded from ``artifact`` on onnxruntime-cpu."""
    return GoldenMeta(model="m", artifacts={artifact.name: sha256_file(artifact)},
                      reference=GoldenReference("onnxruntime-cpu", artifact.name),
                      signature=GoldenSignature((TensorSpec("x", (4,), "float32"),), (TensorSpec("y", (4,), "float32"),)))


def record(model: str, backend: str, verdict: str = "passed", /, *, p50: float | None = 1.0,
           **extra: Any) -> dict[str, Any]:
    """A report record as the plugin writes it, measured (``p50=None``: not measured); ``extra``
    fields replace or add to it."""
    base: dict[str, Any] = {"test": f"tests/test_m.py::test_m[{model}-{backend}]",
                            "model": {"name": model, "artifact": f"models/{model}.onnx", "sha256": "0"},
                            "backend": backend, "verdict": verdict, "violations": []}
    if verdict == "skipped":
        return {**base, **extra}
    measured = p50 is not None
    base.update({
        "coverage": {"total_ops": 8, "delegated_ops": 6, "fallback_ops": 2, "fallback": 0.25, "partitions": 2,
                     "fallback_op_names": {"CUMSUM": 2}},
        "load_ms": 3.0 if measured else None, "first_inference_ms": 1.5 if measured else None,
        "latency_ms": {"p50": p50, "p90": p50 * 1.2, "p99": p50 * 2, "mean": p50 * 1.1, "min": p50 * 0.9}
        if measured else None,
        "latency_quantiles_ms": [p50 * (0.9 + 1.1 * i / 100) for i in range(101)] if measured else None,
        "peak_memory_mb": 10.0 if measured else None,
        "accuracy": {"reference": "onnxruntime-cpu", "max_abs_err": 1e-6, "max_rel_err": 1e-5, "cosine": 0.9999,
                     "snr_db": 120.0}})
    return {**base, **extra}


def write_mlp(path: Path, hidden: int) -> None:
    """An ONNX MLP, x[16, 128] -> MatMul -> Relu -> MatMul -> y[16, 10]; compute grows with ``hidden``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((128, hidden)) / 12).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((hidden, 10)) / 12).astype(np.float32), "w2")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 10])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


# Timing tests stage their effects on a model sized on the machine that runs them, as ratios of what
# was just measured: an absolute figure holds only at the speed of the machine it was written on
# (tiny_mlp runs 5 us on an AMD EPYC, where a "100x" regression of it is 4.95 us, under the gate's
# 0.005 ms floor; docs/gate.md). At 0.5 ms or more a staged change is far from the floor however
# fast the machine, and a 2x or 10x effect is far from the noise however slow.
CALIBRATED_P50_MS = 0.5
CHAIN_WIDTH = 256  # x[16, 256] @ W[256, 256]: about a million multiply-adds per layer


def write_chain(path: Path, layers: int) -> Path:
    """An ONNX chain x[16, 256] -> (MatMul W -> Add b -> Tanh) x ``layers`` -> y[16, 256], the layers as
    the iterations of one Loop whose trip count is a constant. The work grows with ``layers`` while the
    file and the memory do not: ONNX Runtime prepacks a MatMul's weight per node (256 KiB here), so a
    chain unrolled into 2x the nodes also held 2x the packed weights, and on a machine fast enough to
    need many layers the slower twin's peak memory rose past the gate's +10 % (it read +10.3 % in CI),
    failing it on memory as well as time. In a Loop the body's one MatMul is packed once. Tanh keeps
    the values bounded at any depth."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((CHAIN_WIDTH, CHAIN_WIDTH)) / CHAIN_WIDTH ** 0.5)
                                     .astype(np.float32), "w")
    bias = numpy_helper.from_array((rng.standard_normal(CHAIN_WIDTH) / 10).astype(np.float32), "b")
    trips = numpy_helper.from_array(np.array(layers, np.int64), "trips")
    keep_going = numpy_helper.from_array(np.array(True), "keep_going")
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["t_in", "w"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Tanh", ["a"], ["t_out"])], "layer",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("t_in", TensorProto.FLOAT, [16, CHAIN_WIDTH])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [16, CHAIN_WIDTH])])
    graph = helper.make_graph([helper.make_node("Loop", ["trips", "keep_going", "x"], ["y"], body=body)], "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, CHAIN_WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, CHAIN_WIDTH])],
                              [weight, bias, trips, keep_going])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def chain_p50_ms(path: Path, min_time_s: float = 0.05) -> float:
    """The chain's median run on ONNX Runtime here, as the plugin runs it (one intra-op thread), in
    this process: 5 warm-up runs, then runs for ``min_time_s`` and at least 21 runs."""
    import time

    import numpy as np

    from pytest_edge.backends.onnxruntime.session import new_session

    session = new_session(str(path), "CPUExecutionProvider", 1)
    feeds = {"x": np.ones((16, CHAIN_WIDTH), np.float32)}
    for _ in range(5):
        session.run(None, feeds)
    samples: list[int] = []
    deadline = time.perf_counter_ns() + int(min_time_s * 1e9)
    while len(samples) < 21 or time.perf_counter_ns() < deadline:
        start = time.perf_counter_ns()
        session.run(None, feeds)
        samples.append(time.perf_counter_ns() - start)
    return float(np.median(samples)) / 1e6


@dataclass(frozen=True)
class CalibratedChain:
    """A chain (:func:`write_chain`) grown on this machine until its P50 is at least the target:
    ``layers`` and the ``p50_ms`` measured for it while calibrating."""

    layers: int
    p50_ms: float

    def write(self, path: Path, work: float = 1.0) -> Path:
        """The chain at ``work`` times the calibrated work (``work=2``: twice the Loop's iterations)."""
        return write_chain(path, max(1, round(self.layers * work)))


@functools.cache
def calibrated_chain(target_ms: float = CALIBRATED_P50_MS) -> CalibratedChain:
    """The chain's layers grown until its P50 is at least ``target_ms`` here (measured, once per
    process): each step scales the layers by what the last measurement lacked, 20 % beyond it, so it
    ends in two or three steps with a P50 between the target and about 1.5x it."""
    with tempfile.TemporaryDirectory() as folder:
        layers = 1
        for _ in range(12):
            p50 = chain_p50_ms(write_chain(Path(folder) / f"chain{layers}.onnx", layers))
            if p50 >= target_ms:
                return CalibratedChain(layers, p50)
            layers = max(layers + 1, math.ceil(layers * min(1.2 * target_ms / p50, 8.0)))
    raise AssertionError(f"a chain of {layers} layers still ran faster than {target_ms} ms here: P50 {p50:.4f} ms")


def install_backend(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    """A third-party backend installed the way a distribution is: a dist-info ``edge_NAME`` with an
    entry point in the pytest_edge.backends group naming the module ``source``'s ``backends``."""
    plugins = pytester.path / "plugins"
    info = plugins / f"edge_{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: edge-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[pytest_edge.backends]\n{name} = edge_{name}:backends\n")
    (plugins / f"edge_{name}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(plugins))


def docstring_ids(tree: ast.AST) -> set[int]:
    """The ``id`` of every docstring constant in ``tree`` (a module's, a class's, a function's): what
    the source scans of the suite read as documentation, not as code."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found
