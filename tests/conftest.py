from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
from pytest_edge.backends import get_backend

# Tests that count on every runtime; the tflite-runtime lane (NumPy < 2) has no ExecuTorch.
needs_executorch = pytest.mark.skipif(get_backend("executorch").unavailable_reason() is not None,
                                      reason="ExecuTorch is not installed in this environment")
LIGHT = "--edge-backends=onnxruntime-cpu,litert,litert-ref"  # executorch costs ~4 s per process


@pytest.fixture
def models(pytester: pytest.Pytester) -> Path:
    """A fresh project with copies of the fixture models in ./models and pytest-edge configured."""
    folder = pytester.path / "models"
    folder.mkdir()
    for path in FIXTURES.iterdir():
        if path.suffix in {".onnx", ".tflite", ".pte"}:
            shutil.copy(path, folder / path.name)
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    return folder
