"""The worker's speech operations (edge_asr, docs/speech.md): open a speech export's recognizer,
transcribe an audio window, and teacher-force one, each with the memory it peaked at over the RSS
before the open. Part of the worker's server (worker/server.py), which answers them as ops."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BackendError
from ..measurement import timing

if TYPE_CHECKING:  # a speech export's worker only
    from ..backends import Backend
    from ..backends.speech import Recognizer, Transcription
    from .speech_replies import ForcedSpeechLogits, SpeechOpened


class SpeechOps:
    """A worker's speech ops; its server keeps ``recognizers`` and ``speech_memory``."""

    backend: Backend
    recognizers: dict[str, Recognizer]  # OpenSpeech's
    speech_memory: dict[str, tuple[float, float | None] | None]  # RSS before the open, its peak

    def op_open_speech(self, key: str, folder: str, threads: int) -> SpeechOpened:
        """A speech export's recognizer, kept under ``key`` (Backend.speech): its configuration."""
        speech = self.backend.speech
        if speech is None:
            raise BackendError(f"{folder} ({self.backend.name}): this runtime recognizes no speech (edge_asr)")
        # Peak memory over the RSS before the recognizer opened: its open's high-water mark and each
        # transcription's (the mark reset before each); None where the mark cannot be reset.
        reset = timing.reset_hwm()
        base = timing.rss_mb()
        recognizer = speech.open(Path(folder), threads)
        self.recognizers[key] = recognizer
        self.speech_memory[key] = (base, timing.hwm_mb()) if reset and base is not None else None
        from .speech_replies import SpeechOpened

        return SpeechOpened(recognizer.config)

    def op_transcribe(self, key: str, audio: np.ndarray, new_tokens: int) -> Transcription:
        reset = timing.reset_hwm()
        run = self.recognizers[key].transcribe(np.asarray(audio, np.float32), new_tokens)
        memory, peak = self.speech_memory.get(key), timing.hwm_mb()
        if reset and memory is not None and peak is not None:
            base, opened = memory
            run = replace(run, peak_memory_mb=max(peak, opened or peak) - base)
        return run

    def op_force_speech(self, key: str, audio: np.ndarray, tokens: list[int]) -> ForcedSpeechLogits:
        from .speech_replies import ForcedSpeechLogits

        logits = self.recognizers[key].teacher_force(np.asarray(audio, np.float32), [int(t) for t in tokens])
        return ForcedSpeechLogits(None if logits is None else np.asarray(logits, np.float32))
