"""whisper.cpp through pywhispercpp: a backend that recognizes speech only (edge_asr, docs/speech.md);
its recognizer is speech.py."""

from __future__ import annotations

from pathlib import Path

from ..base import Backend
from ..speech import Recognizer, SpeechRuntime
from . import MODEL_FILE  # the manifest's



class WhisperCppSpeech(SpeechRuntime):
    files = (MODEL_FILE,)

    def open(self, folder: Path, threads: int) -> Recognizer:
        from .speech import WhisperCppRecognizer

        return WhisperCppRecognizer(folder, threads)

    def file_figures(self, folder: Path) -> tuple[tuple[str, int], ...]:
        from dataclasses import astuple, fields

        from .speech import GgmlHeader

        header = GgmlHeader.read(folder / MODEL_FILE)
        return tuple(zip((f.name for f in fields(header)), astuple(header)))


class WhisperCppBackend(Backend):
    """whisper.cpp recognizes speech only: no tensor models, no delegate."""

    name = "whisper-cpp"
    # An export folder's file, by its whole name (no other format's file ends with it).
    suffix = MODEL_FILE
    runtime_module = "_pywhispercpp"
    distribution = "pywhispercpp"
    has_delegate = False
    device_why_not = "the emulated device installs no pywhispercpp"
    speech = WhisperCppSpeech()

    def unavailable_reason(self) -> str | None:
        if super().unavailable_reason() is not None:
            return ("pywhispercpp is not installed; it has no wheel for this platform: scripts/bootstrap.sh builds "
                    "it from its sdist")
        return None


def backends() -> list[Backend]:
    return [WhisperCppBackend()]
