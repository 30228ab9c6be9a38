"""A speech check's block of the record (``Record.speech``; the report's ``speech`` block)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import codec
from .generation_figures import KlDivergence  # record.py imports it first (generation_record): no import cost

if TYPE_CHECKING:
    from ..backends.speech import SpeechConfig


@dataclass(frozen=True)
class RecordSpeechConfig(codec.StoredBlock):
    """backends.speech.SpeechConfig as the record keeps it (the ``speech`` block's ``config``), in its
    keys and order. A stored report's is read leniently: a key an older version did not write is None
    and is not written back, a key of another version is kept (``unknown``) and written after."""

    vocab_size: int | None = codec.optional()
    num_mel_bins: int | None = codec.optional()
    decoder_start_token_id: int | None = codec.optional()
    eos_token_id: int | None = codec.optional()
    forced: tuple[int, ...] | None = codec.optional()
    suppress_tokens: tuple[int, ...] | None = codec.optional()
    begin_suppress_tokens: tuple[int, ...] | None = codec.optional()
    max_target_positions: int | None = codec.optional()
    features: dict[str, int] | None = codec.optional()  # backends.speech_features.FeatureConfig's parameters, by name

    @classmethod
    def of(cls, config: "SpeechConfig") -> "RecordSpeechConfig":
        """The configuration a speech export was checked with, as the record keeps it: every key."""
        return codec.from_json(cls, codec.to_json(config), "a speech export's configuration")


@dataclass(frozen=True)
class FilePosition:
    """Where a teacher-forced figure lies over every audio file: the file (or its window) by name, as
    ``prompt`` (the decoders' word), and the new token."""

    prompt: str
    position: int


@dataclass(frozen=True)
class SpeechTeacherForced(codec.StoredBlock):
    """The speech block's ``teacher_forced``: a decoder's figures (core.generation_figures'
    TeacherForcedFigures) over every audio file's positions, the first top-1 difference and the
    worst KL divergence named by file; ``not_measured`` why a figure is missing. A stored report's
    is read leniently (a figure that does not fit: not measured; another version's keys kept)."""

    positions: int = 0
    top1_agreement: float | None = None
    first_top1_difference: FilePosition | None = None
    kld: KlDivergence | None = None
    max_kld_at: FilePosition | None = codec.optional()  # with the KL divergence only
    golden_rest_mass_max: float | None = codec.optional()
    not_measured: str | None = codec.optional()


@dataclass(frozen=True)
class NotForced:
    """``teacher_forced`` where no file could be teacher-forced (a runtime without logits): why, alone.
    As the checks read teacher-forced figures: none measured (properties, not written)."""

    not_measured: str

    @property
    def positions(self) -> int:
        return 0

    @property
    def top1_agreement(self) -> None:
        return None

    @property
    def first_top1_difference(self) -> None:
        return None

    @property
    def kld(self) -> None:
        return None

    @property
    def max_kld_at(self) -> None:
        return None


def _read_teacher_forced(data: Any) -> "SpeechTeacherForced | NotForced | None":
    """A stored block's ``teacher_forced``: none, the reason alone (no positions: no file was
    teacher-forced), or the figures."""
    if data is None:
        return None
    if isinstance(data, Mapping) and "positions" not in data and isinstance(data.get("not_measured"), str):
        return NotForced(data["not_measured"])
    return codec.from_json(SpeechTeacherForced, data, "teacher_forced")

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

    config: RecordSpeechConfig
    new_tokens: int
    reference: str
    transcript_decoding: str  # how token ids became words (a tokenizer, or one word per id)
    files: list[SpeechFile] = field(default_factory=list)
    # Teacher-forced over the golden's tokens, every file's positions (top-1 agreement, KL divergence).
    teacher_forced: SpeechTeacherForced | NotForced | None = codec.json_field(default=None, decode=_read_teacher_forced)

    @property
    def wer(self) -> float | None:
        return max((f.wer for f in self.files), default=None)

    @property
    def cer(self) -> float | None:
        return max((f.cer for f in self.files), default=None)

    @property
    def real_time_factor(self) -> float | None:
        return max((f.real_time_factor for f in self.files), default=None)
