"""sherpa-onnx: a backend that recognizes speech only (edge_asr, docs/speech.md), Whisper exports by
its own exporter; its recognizer is speech.py."""

from __future__ import annotations

from pathlib import Path

from ..base import Backend
from ..speech import Recognizer, SpeechRuntime
from . import DECODER, ENCODER, TOKENS  # the manifest's


class SherpaOnnxSpeech(SpeechRuntime):
    files = (ENCODER, DECODER, TOKENS)

    def open(self, folder: Path, threads: int) -> Recognizer:
        from .speech import SherpaRecognizer

        return SherpaRecognizer(folder, threads)

    def file_figures(self, folder: Path) -> tuple[tuple[str, int], ...]:
        from .speech import SherpaMetadata

        return SherpaMetadata.read(folder / ENCODER).figures()


class SherpaOnnxBackend(Backend):
    """sherpa-onnx recognizes speech only here: no tensor models, no delegate."""

    name = "sherpa-onnx"
    # An export folder's file, by its path in the folder: longer than ".onnx", so the file is sherpa-onnx's.
    suffix = ENCODER
    runtime_module = "sherpa_onnx"
    distribution = "sherpa-onnx"
    has_delegate = False
    device_why_not = "the emulated device installs no sherpa-onnx"
    speech = SherpaOnnxSpeech()

    def unavailable_reason(self) -> str | None:
        if super().unavailable_reason() is not None:
            return "sherpa-onnx is not installed: pip install 'pytest-edge[speech]'"
        return None


def backends() -> list[Backend]:
    return [SherpaOnnxBackend()]
