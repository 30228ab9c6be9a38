"""ExecuTorch triage through ETDump: small torch modules lowered to XNNPACK here, run by the real runtime."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.backends import Intermediates, get_backend
from pytest_edge.backends.intermediates import EtdumpEvent
from pytest_edge.accuracy.compare import Tolerance
from pytest_edge.triage import etdump_divergence

pytestmark = [
    pytest.mark.skipif(get_backend("executorch").unavailable_reason() is not None,
                       reason="executorch is not installed in this environment"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"),
]

X = np.array([[0.5, -1.0, 2.0, 0.25], [-0.75, 1.5, -2.0, 1.0]], np.float32)


def _lower(module, example: tuple, path: Path) -> Path:
    """torch.export -> XNNPACK partitions -> .pte, as fixtures/make_models.py writes them."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner,
    )
    from executorch.exir import to_edge_transform_and_lower

    lowered = to_edge_transform_and_lower(torch.export.export(module, example), partitioner=[XnnpackPartitioner()])
    path.write_bytes(lowered.to_executorch().buffer)
    return path


def _mixed_module():
    """x * 2 and + 1 go to XNNPACK; atan2 (with a weight) and cumsum stay on ExecuTorch's CPU kernels."""
    import torch

    class Mixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(-1, 1, 8).reshape(2, 4))

        def forward(self, x):
            return torch.cumsum(torch.atan2(x * 2, self.w), 1) + 1

    return Mixed()


@pytest.fixture(scope="module")
def mixed_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    return _lower(_mixed_module(), (torch.from_numpy(X),), tmp_path_factory.mktemp("et") / "mixed.pte")


@pytest.fixture(scope="module")
def mixed_found(mixed_pte: Path) -> Intermediates:
    return get_backend("executorch").load(mixed_pte, threads=1, shapes={}).intermediates([X])


def _event(found: Intermediates, text: str) -> EtdumpEvent:
    (event,) = [e for e in found.details.events if text in e.label]
    return event


def test_intermediates_hold_kernel_outputs_and_partition_boundaries(mixed_pte: Path, mixed_found: Intermediates) -> None:
    found = mixed_found
    assert found.unavailable is None and found.delegated and found.details.partitions == 2
    labels = [e.label for e in found.details.events]
    # Execution order: the x * 2 partition, atan2 and cumsum on the CPU kernels, the + 1 partition.
    mul, atan2, cumsum, add = (labels.index(next(label for label in labels if text in label))
                               for text in ("(Multiply (ND))", "aten::atan2.out", "aten::cumsum.out", "(Add (ND))"))
    assert mul < atan2 < cumsum < add
    assert labels[mul].startswith("XNNPACK partition at instruction ")
    assert labels[atan2].endswith("(ExecuTorch's CPU kernel)")
    # A delegate call logs its inputs too: the program input arrives unchanged.
    assert any(np.array_equal(v, X) for v in _event(found, "(Multiply (ND))").inputs.values())
    (doubled,) = _event(found, "(Multiply (ND))").outputs.values()
    assert np.array_equal(doubled, X * 2)
    # The runtime's own record of the output is what run() returns.
    model = get_backend("executorch").load(mixed_pte, threads=1, shapes={})
    (output,) = model.run([X])
    assert np.array_equal(found.details.program_outputs[0], output)
    assert found.order[-1] in _event(found, "(Add (ND))").outputs
    # Non-delegated kernels were re-run by PyTorch on the inputs they received (atan2's weight
    # read from the .pte's constant segment): the same values.
    for text in ("aten::atan2.out", "aten::cumsum.out"):
        event = _event(found, text)
        assert event.reference_note is None and event.reference.keys() == event.outputs.keys()
        for key, value in event.outputs.items():
            np.testing.assert_allclose(event.reference[key], value, rtol=1e-6, atol=1e-6)


def test_triage_line_says_what_it_can_and_cannot_name(mixed_found: Intermediates) -> None:
    output = mixed_found.details.program_outputs[0]
    golden = output + np.float32(0.5)
    message = etdump_divergence(mixed_found, [("y", golden, 0, Tolerance(atol=1e-5, rtol=0.0))], 1e-5, 0.0, [X])
    assert "operator calls recorded (2 XNNPACK partition calls, " in message
    assert ("the runtime's own record of its outputs already differs from the golden (y, max |Δ| 0.5): the divergence "
            "is inside the runtime") in message
    assert "non-delegated kernel calls agree with PyTorch's kernels re-run on the same inputs" in message
    assert ("the 2 XNNPACK partition calls log only the tensors at their boundary, and there are no reference "
            "tensors to match them with") in message
    assert "first divergence" not in message and "non-finite" not in message
    # Output statistics of the first calls, in execution order, scalar-constant copies left out.
    assert "; recorded: XNNPACK partition at instruction" in message and "(Multiply (ND)) -> [2, 4] float32 in [-4, 4]" in message
    # The runtime's record matching the golden points away from the runtime.
    same = etdump_divergence(mixed_found, [("y", output, 0, Tolerance(atol=1e-5, rtol=0.0))], 1e-5, 0.0, [X])
    assert "the runtime's own record of its outputs matches the golden" in same


def test_a_kernel_that_disagrees_with_pytorch_is_named_first(mixed_found: Intermediates) -> None:
    """The recorded cumsum output shifted, as a faulty kernel would leave it (the rest is the real record)."""
    cumsum = _event(mixed_found, "aten::cumsum.out")
    (key,) = cumsum.outputs
    broken = replace(mixed_found, details=replace(mixed_found.details, events=[
        replace(e, outputs={key: e.outputs[key] + np.float32(0.25)}) if e is cumsum else e
        for e in mixed_found.details.events]))
    message = etdump_divergence(broken, [], 1e-5, 0.0, [X])
    assert (f"first divergence: {cumsum.label}: its output value {key[1:]} differs from PyTorch's kernel on the "
            "same inputs (max |Δ| 0.25)") in message
    assert "partition calls log only" not in message


def test_first_non_finite_output_names_the_partition(tmp_path: Path) -> None:
    """x * 2 overflows to Inf inside XNNPACK; cumsum over Inf and -Inf then makes NaN on the CPU kernel."""
    torch = pytest.importorskip("torch")

    class Overflow(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x * 2, 1)

    huge = np.array([[3e38, -3e38, 1.0]], np.float32)
    path = _lower(Overflow(), (torch.from_numpy(huge),), tmp_path / "overflow.pte")
    found = get_backend("executorch").load(path, threads=1, shapes={}).intermediates([huge])
    (partition,) = [e for e in found.details.events if e.kind == "delegate"]
    (doubled,) = partition.outputs.values()
    assert np.isinf(doubled).sum() == 2
    message = etdump_divergence(found, [("y", np.zeros((1, 3), np.float32), 0, Tolerance(atol=1e-3))], 1e-3, 0.0, [huge])
    key = next(iter(partition.outputs))
    assert (f"first non-finite output: value {key[1:]} of {partition.label} (0 NaN, 2 Inf of 3)") in message
    assert "first magnitude jump" not in message  # the input was already huge
    assert "with 0 NaN, 2 Inf" in message  # the listed statistics


ADD_HUNDRED = """\
import onnx
from onnx import helper, numpy_helper
import numpy as np
graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "mixed",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
                          [numpy_helper.from_array(np.float32(100) * np.ones(4, np.float32), "c")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, "models/mixed.onnx")
"""


def test_failure_message_carries_the_etdump_triage(pytester: pytest.Pytester, models: Path, mixed_pte: Path) -> None:
    """The golden comes from an .onnx of the same name that computes something else (x + 100):
    executorch fails, and its message says what the ETDump run found."""
    pytest.importorskip("onnx")
    if get_backend("onnxruntime-cpu").unavailable_reason() is not None:
        pytest.skip("onnxruntime is not installed in this environment")
    (models / "mixed.pte").write_bytes(mixed_pte.read_bytes())
    pytester.makepyfile(make_onnx=ADD_HUNDRED)
    pytester.runpython(pytester.path / "make_onnx.py")
    pytester.makepyfile(f"""
        import numpy as np, pytest
        X = np.array({X.tolist()}, np.float32)

        @pytest.mark.edge(model="mixed", inputs={{"x": X}}, atol=1e-4, rtol=1e-4,
                          backends=["onnxruntime-cpu", "executorch"])
        def test_mixed(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-reference-backend=onnxruntime-cpu")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        ("*triage: executorch has no delegate-free sibling, so its mixed.pte was re-run with ETDump: * operator calls "
         "recorded (2 XNNPACK partition calls, * non-delegated kernel calls); the runtime's own record of its outputs "
         "already differs from the golden (y, max |Δ| *): the divergence is inside the runtime, not in pytest-edge's "
         "reading of the outputs; * non-delegated kernel calls agree with PyTorch's kernels re-run on the same inputs; "
         "the 2 XNNPACK partition calls log only the tensors at their boundary*"),
    ])
