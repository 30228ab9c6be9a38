"""ExecuTorch: .pte programs, their delegate coverage, ETDump intermediates, its LLM export, and
optimum-executorch's Whisper export (speech).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared

# A Whisper export for ExecuTorch: optimum-executorch's program (encoder, text_decoder, its
# metadata methods) in an export folder's ``executorch/``, beside its config.json and
# generation_config.json (speech.py).
SPEECH_FOLDER = "executorch"
SPEECH_FILE = f"{SPEECH_FOLDER}/model.pte"
SPEECH_FILES = (SPEECH_FILE,)


def manifest() -> list[Declared]:
    return [Declared("executorch", "pytest_edge.backends.executorch.backend:backends",
                     ".pte", reference_priority=20, decodes=True)]
