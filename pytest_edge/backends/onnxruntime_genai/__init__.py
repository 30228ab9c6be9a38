"""ONNX Runtime GenAI: model builder folders run by its own generator (decoders only).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("onnxruntime-genai", "pytest_edge.backends.onnxruntime_genai.backend:backends",
                     ".onnx", decodes=True, runs_tensors=False)]
