"""CTranslate2 (faster-whisper's engine): Whisper exports by its own converter (speech only,
edge_asr; docs/speech.md).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared

FOLDER = "ctranslate2"  # the converter's output folder inside the export's


def manifest() -> list[Declared]:
    return [Declared("ctranslate2", "pytest_edge.backends.ctranslate2.backend:backends", f"{FOLDER}/model.bin", runs_tensors=False)]
