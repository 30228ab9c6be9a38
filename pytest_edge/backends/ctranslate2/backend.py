"""CTranslate2 (faster-whisper's engine): a backend that recognizes speech only (edge_asr,
docs/speech.md), Whisper exports by its own converter; its recognizer is speech.py."""

from __future__ import annotations

from pathlib import Path

from ..base import Backend
from ..speech import Recognizer, SpeechRuntime
from . import FOLDER  # the manifest's



class Ct2Speech(SpeechRuntime):
    files = (f"{FOLDER}/model.bin", f"{FOLDER}/config.json", f"{FOLDER}/vocabulary.json")

    def open(self, folder: Path, threads: int) -> Recognizer:
        from .speech import Ct2Recognizer

        return Ct2Recognizer(folder, threads)


class Ct2Backend(Backend):
    """CTranslate2 recognizes speech only here: no tensor models, no delegate."""

    name = "ctranslate2"
    # An export folder's file, by its path in the folder (no file name matches it as a suffix).
    suffix = f"{FOLDER}/model.bin"
    runtime_module = "ctranslate2"
    distribution = "ctranslate2"
    has_delegate = False
    device_why_not = "the emulated device installs no ctranslate2"
    speech = Ct2Speech()

    def unavailable_reason(self) -> str | None:
        if super().unavailable_reason() is not None:
            return "ctranslate2 is not installed: pip install 'pytest-edge[speech]'"
        return None


def backends() -> list[Backend]:
    return [Ct2Backend()]
