"""LiteRT (ai-edge-litert or tflite-runtime): .tflite with and without the XNNPACK delegate.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    """litert (with the XNNPACK delegate) and litert-ref (without), as backend.py's ``backends``."""
    load = "pytest_edge.backends.litert.backend:backends"
    return [Declared("litert", load, ".tflite", reference_priority=30, decodes=True),
            Declared("litert-ref", load, ".tflite", reference_priority=10)]
