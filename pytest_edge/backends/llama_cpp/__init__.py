"""llama.cpp through llama-cpp-python: GGUF decoders (decoders only).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("llama.cpp", "pytest_edge.backends.llama_cpp.backend:backends",
                     ".gguf", decodes=True, runs_tensors=False)]
