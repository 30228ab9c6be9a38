"""Shared by the test modules (imported by name: tests/ is on sys.path under pytest's rootdir mode)."""

from __future__ import annotations

import pytest

from pytest_edge.backends import get_backend

# Tests that count on every runtime; the tflite-runtime lane (NumPy < 2) has no ExecuTorch.
needs_executorch = pytest.mark.skipif(get_backend("executorch").unavailable_reason() is not None,
                                      reason="ExecuTorch is not installed in this environment")
LIGHT = "--edge-backends=onnxruntime-cpu,litert,litert-ref"  # executorch costs ~4 s per process
