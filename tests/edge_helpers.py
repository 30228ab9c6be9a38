"""Shared by the test modules (imported by name: tests/ is on sys.path under pytest's rootdir mode)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_edge.backends import get_backend, tensor_backends
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


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``pytest-edge ARGS`` in a fresh interpreter, in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "pytest_edge.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def golden_meta(artifact: Path) -> dict[str, Any]:
    """The meta.json fields of a golden for model 'm' (one float32 input x, one output y of 4 values)
    recorded from ``artifact`` on onnxruntime-cpu."""
    return {"model": "m", "artifacts": {artifact.name: sha256_file(artifact)},
            "reference": {"backend": "onnxruntime-cpu", "artifact": artifact.name},
            "signature": {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
                          "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}]}}


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
