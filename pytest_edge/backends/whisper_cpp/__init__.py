"""whisper.cpp through pywhispercpp: GGML Whisper files (speech only, edge_asr; docs/speech.md).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared

MODEL_FILE = "ggml-model.bin"  # what whisper.cpp's converter writes, beside the export's config.json


def manifest() -> list[Declared]:
    return [Declared("whisper-cpp", "pytest_edge.backends.whisper_cpp.backend:backends", MODEL_FILE, runs_tensors=False)]
