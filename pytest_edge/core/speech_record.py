"""A speech check's block of the record (``Record.speech``; the report's ``speech`` block)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import codec

@dataclass(frozen=True)
class SpeechWindow:
    """One window of an audio file longer than the export reads at once (Whisper's 30 s), decoded
    on its own: where it starts, its new tokens, where they part from the golden's window, and its
    latency (audio in to last token out: the per-chunk latency)."""

    start_s: float
    audio_s: float
    tokens: int
    first_difference: int | None
    total_ms: float
    encoder_ms: float | None  # None: not timed apart from the decoder (sherpa-onnx)
    first_token_ms: float | None
    real_time_factor: float


@dataclass(frozen=True)
class SpeechFile:
    """One audio file of a speech check: the reference's (golden) and this run's tokens and
    transcripts, where they part, the error rates and this run's timings."""

    audio: str
    audio_s: float
    golden_tokens: list[int]
    tokens: list[int]
    golden_transcript: str
    transcript: str
    first_difference: int | None  # the first position whose token differs; None: equal
    wer: float
    cer: float
    real_time_factor: float
    features_ms: float
    encoder_ms: float | None  # None: the runtime runs encoder and decoder in one call (sherpa-onnx)
    first_token_ms: float | None  # None: the runtime generates in one call (CTranslate2, sherpa-onnx)
    decode_tokens_per_s: float | None
    # The runtime's own timers of the same run (whisper.cpp's whisper_print_timings), where it keeps them.
    runtime_timers: dict[str, float | str] | None = None
    # Audio longer than one window: each window's figures, in order (one window: empty).
    windows: list[SpeechWindow] = field(default_factory=list)
    # Peak resident memory over the worker's RSS before the recognizer opened (its open or a
    # transcription of this file, the higher); None where it cannot be measured.
    peak_memory_mb: float | None = None


# The block's worst figures over its files, written before them (read back from the files).
@codec.layout(order=("config", "new_tokens", "reference", "transcript_decoding", "wer", "cer", "real_time_factor",
                     "teacher_forced", "files"),
              computed={"wer": lambda s: s.wer, "cer": lambda s: s.cer, "real_time_factor": lambda s: s.real_time_factor})
@dataclass
class SpeechRecord:
    """A speech check's part of the record (``Record.speech``; the report's ``speech`` block): the
    export's decoding configuration, the new tokens, who made the golden, each audio file's
    figures, and the worst WER/CER and real-time factor over them (run.speech_check)."""

    config: dict[str, Any]  # codec.to_json(backends.speech.SpeechConfig), as the report keeps it
    new_tokens: int
    reference: str
    transcript_decoding: str  # how token ids became words (a tokenizer, or one word per id)
    files: list[SpeechFile] = field(default_factory=list)
    # Teacher-forced over the golden's tokens, every file's positions (top-1 agreement, KL divergence).
    teacher_forced: dict[str, Any] | None = None  # llm.metrics.TeacherForced.to_json(): a summary, not read back

    @property
    def wer(self) -> float | None:
        return max((f.wer for f in self.files), default=None)

    @property
    def cer(self) -> float | None:
        return max((f.cer for f in self.files), default=None)

    @property
    def real_time_factor(self) -> float | None:
        return max((f.real_time_factor for f in self.files), default=None)
