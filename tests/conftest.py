from __future__ import annotations

import shutil
from pathlib import Path

import pytest

try:
    # Imported once, before any pytester test: pytester restores sys.modules after each test, and a
    # second import of onnx's C extension in the same process aborts it (protobuf descriptors).
    import onnx  # noqa: F401
except ImportError:  # the tflite-runtime lane may lack it
    pass

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def models(pytester: pytest.Pytester) -> Path:
    """A fresh project with copies of the fixture models in ./models and pytest-edge configured."""
    folder = pytester.path / "models"
    folder.mkdir()
    for path in FIXTURES.iterdir():
        if path.suffix in {".onnx", ".tflite", ".pte"}:
            shutil.copy(path, folder / path.name)
    # One measuring process and no minimum time keep the suite fast; the tests of the measurement
    # protocol and of the merge gate set --edge-processes / --edge-min-time themselves.
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n")
    return folder
