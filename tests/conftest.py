from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


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
