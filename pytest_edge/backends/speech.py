"""Speech recognition (edge_asr tests, docs/speech.md): a Whisper-class encoder-decoder as its
exporter left it, its configuration read from the export's own files, and what a transcription
gives. Runtime-free: a runtime that recognizes speech is a backend of the one registry with the
:class:`SpeechRuntime` capability (``Backend.speech``: ONNX Runtime's CPU EP, ExecuTorch, ONNX
Runtime GenAI, whisper.cpp, CTranslate2, sherpa-onnx), its recognizer in its backend's folder (``onnxruntime/speech.py``).

A speech runtime: ``open(folder, threads) -> Recognizer``; the recognizer's
``transcribe(audio, new_tokens)`` decodes greedily from the configuration's forced start tokens
and says how long each stage took."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, TypedDict

import numpy as np

from .. import codec
from ..errors import BackendError
from .speech_features import FeatureConfig

class SpeechConfigError(ValueError):
    """A speech export whose configuration is missing, unreadable or contradicts the model."""


class ExportJson(TypedDict, total=False):
    """The keys read of a Whisper export's ``config.json`` and ``generation_config.json`` (the files
    ``transformers`` writes; the two share the token keys, either may hold them)."""

    vocab_size: int
    num_mel_bins: int
    max_target_positions: int
    decoder_start_token_id: int
    eos_token_id: int
    forced_decoder_ids: list[list[int]]  # [position, token] pairs
    suppress_tokens: list[int]
    begin_suppress_tokens: list[int]
    encoder_layers: int
    encoder_attention_heads: int
    decoder_layers: int
    decoder_attention_heads: int
    d_model: int


@dataclass(frozen=True)
class SpeechConfig:
    """A Whisper export's decoding configuration, from its ``config.json`` and
    ``generation_config.json`` (as ``transformers`` writes them), and its features'
    (``preprocessor_config.json``)."""
    vocab_size: int
    num_mel_bins: int
    decoder_start_token_id: int
    eos_token_id: int
    forced: tuple[int, ...]  # the tokens after the start token, in position order (language, task, no-timestamps)
    suppress_tokens: tuple[int, ...]
    begin_suppress_tokens: tuple[int, ...]
    max_target_positions: int
    features: FeatureConfig

    @property
    def prompt(self) -> list[int]:
        """The decoder's forced start: start-of-transcript, then the forced tokens."""
        return [self.decoder_start_token_id, *self.forced]

    @classmethod
    def opened_by(cls, folder: Path, backend: str) -> "SpeechConfig":
        """:meth:`read`, a configuration it refuses said as ``backend``'s error (every recognizer's start)."""
        try:
            return cls.read(folder)
        except SpeechConfigError as exc:
            raise BackendError(f"{backend}: {exc}") from None

    @classmethod
    def read(cls, folder: Path) -> "SpeechConfig":
        """The configuration of the export in ``folder``; an error naming the file that lacks a key."""
        def load(name: str) -> ExportJson:
            path = folder / name
            try:
                data = json.loads(path.read_text())
            except FileNotFoundError:
                raise SpeechConfigError(f"{path}: missing (a Whisper export has config.json, generation_config.json "
                                        "and preprocessor_config.json beside its models)") from None
            except (OSError, ValueError) as exc:
                raise SpeechConfigError(f"{path}: not readable JSON: {exc}") from None
            if not isinstance(data, dict):
                raise SpeechConfigError(f"{path}: not a JSON object")
            return data

        config, generation = load("config.json"), load("generation_config.json")
        try:
            features = FeatureConfig.read(folder / "preprocessor_config.json")
        except ValueError as exc:
            raise SpeechConfigError(str(exc)) from None

        def key(name: str, *sources: tuple[str, ExportJson]) -> int:
            for _, data in sources:
                if data.get(name) is not None:
                    return int(data[name])
            raise SpeechConfigError(f"{folder}: no {name} in {' or '.join(f for f, _ in sources)}")

        both = (("generation_config.json", generation), ("config.json", config))
        forced_ids = generation.get("forced_decoder_ids") or config.get("forced_decoder_ids") or []
        forced = [int(token) for _, token in sorted((int(p), t) for p, t in forced_ids)]
        if [int(p) for p, _ in sorted(forced_ids)] != list(range(1, len(forced) + 1)):
            raise SpeechConfigError(f"{folder / 'generation_config.json'}: forced_decoder_ids {forced_ids} do not follow "
                                    "the start token position by position")
        found = cls(vocab_size=key("vocab_size", ("config.json", config)),
                    num_mel_bins=key("num_mel_bins", ("config.json", config)),
                    decoder_start_token_id=key("decoder_start_token_id", *both),
                    eos_token_id=key("eos_token_id", *both),
                    forced=tuple(forced),
                    suppress_tokens=tuple(int(t) for t in generation.get("suppress_tokens") or ()),
                    begin_suppress_tokens=tuple(int(t) for t in generation.get("begin_suppress_tokens") or ()),
                    max_target_positions=key("max_target_positions", ("config.json", config)),
                    features=features)
        outside = [t for t in [*found.prompt, found.eos_token_id] if not 0 <= t < found.vocab_size]
        if outside:
            raise SpeechConfigError(f"{folder}: token id {outside[0]} of the start/end tokens is outside the "
                                    f"vocabulary [0, {found.vocab_size})")
        if found.num_mel_bins != features.feature_size:
            raise SpeechConfigError(f"{folder}: config.json's num_mel_bins {found.num_mel_bins} differs from "
                                    f"preprocessor_config.json's feature_size {features.feature_size}")
        return found


@dataclass(frozen=True)
class RuntimeTimers:
    """A runtime's own timers of one transcription (whisper.cpp's whisper_print_timings), beside
    the figures measured around its calls."""
    source: str
    mel_ms: float
    encode_ms: float
    decode_ms: float  # every decoder pass: single-token, batched and prompt
    sample_ms: float
    total_ms: float


@dataclass(frozen=True)
class Transcription:
    """One greedy transcription: the new tokens (the forced start not included; end-of-text ends
    it and is not kept) and each stage's time, measured around the runtime's own calls. Transcribe's
    reply is ``codec.to_json(transcription)``."""
    # a runtime's ids may be NumPy integers: the reply's are Python's
    tokens: list[int] = codec.json_field(encode=lambda tokens: [int(t) for t in tokens])
    ended: bool  # end-of-text was generated
    audio_s: float  # the audio's duration
    features_ms: float
    # None where the runtime runs its encoder and decoder in one call that nothing times apart
    # (sherpa-onnx's decode_stream)
    encoder_ms: float | None
    # audio in to first new token out: features, encoder, first decoder step; None where the runtime
    # generates in one call that no step can be timed in (CTranslate2's generate)
    first_token_ms: float | None
    # the decoder steps after the first (every step where first_token_ms is None); 0 where the decoder
    # is not timed apart from the encoder (encoder_ms None): its tokens/s is then not measured
    decode_s: float
    total_ms: float
    runtime_timers: RuntimeTimers | None = None  # the runtime's own, where it keeps them
    # Peak resident memory over the RSS before the recognizer opened (its open or this run, the
    # higher), set by the worker; None where the high-water mark cannot be reset, or in-process.
    peak_memory_mb: float | None = None

    @property
    def real_time_factor(self) -> float:
        """Processing time over audio duration (< 1: faster than real time)."""
        return self.total_ms / 1e3 / self.audio_s

    @property
    def decode_tps(self) -> float | None:
        """Decoder tokens/s over the tokens after the first (over every token where the first one's
        time is not known; None with none to count)."""
        after = len(self.tokens) + int(self.ended) - (1 if self.first_token_ms is not None else 0)
        return after / self.decode_s if after > 0 and self.decode_s > 0 else None


def one_window(audio: np.ndarray, config: SpeechConfig, backend: str) -> float:
    """The audio's duration in seconds; a BackendError naming ``backend`` where it is longer than
    the one window the export reads (the speech check cuts longer audio into windows first:
    run.speech_check.windows)."""
    audio_s = len(audio) / config.features.sampling_rate
    if audio_s > config.features.chunk_length:
        raise BackendError(f"{backend}: {audio_s:.1f} s of audio; one window holds {config.features.chunk_length} s "
                           "(cut it into windows: run.speech_check.windows)")
    return audio_s


class Recognizer(Protocol):
    config: SpeechConfig

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        ...

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray | None:
        """The decoder's logits [len(tokens), vocab] at each position of ``tokens`` fed after the
        forced start: row j is what it predicts having seen the start and ``tokens[:j]``. None
        where the runtime gives no logits (the figures are then recorded as not measured)."""
        ...


class Stopwatch:
    """Milliseconds since the last lap."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.last = (now - self.last) * 1e3, now
        return elapsed

    def total(self) -> float:
        return (time.perf_counter() - self.start) * 1e3


def greedy_decode(next_logits: Callable[[int, list[int]], np.ndarray | None], config: SpeechConfig,
                  new_tokens: int, clock: Stopwatch) -> tuple[list[int], bool, float, float]:
    """Greedy decoding after the forced start, as every recognizer here decodes: ``next_logits(step,
    tokens)`` runs the runtime's decoder for the next position (the tokens so far fed) and gives its
    logits, or None where the decoder's context is full (decoding stops there). Returns the new
    tokens (end-of-text ends them and is not kept), whether it ended, the time to the first token
    (``clock``'s total at the first pick) and the seconds of the steps after it."""
    tokens: list[int] = []
    ended, first_token_ms = False, 0.0
    for step in range(new_tokens):
        logits = next_logits(step, tokens)
        if logits is None:
            break
        token = greedy_pick(logits, config, step)
        if step == 0:
            first_token_ms = clock.total()
            clock.lap()
        if token == config.eos_token_id:
            ended = True
            break
        tokens.append(token)
    decode_s = clock.lap() / 1e3 if new_tokens > 1 else 0.0
    return tokens, ended, first_token_ms, decode_s


def greedy_pick(logits: np.ndarray, config: SpeechConfig, step: int) -> int:
    """The next token: the argmax of ``logits`` with the configuration's suppressed tokens (and, at
    the first step, its begin-suppressed ones) out, as transformers' Whisper generation does."""
    scores = np.array(logits, np.float32, copy=True)
    banned = [*config.suppress_tokens, *(config.begin_suppress_tokens if step == 0 else ())]
    if banned:
        scores[np.asarray(banned, np.int64)] = -np.inf
    return int(np.argmax(scores))


def mask_suppressed(logits: np.ndarray, config: SpeechConfig) -> np.ndarray:
    """Teacher-forced logits [n, vocab] as greedy decoding sees them: the suppressed tokens (and, at
    the first position, the begin-suppressed ones) at -1e9, a probability of zero that keeps the KL
    divergence finite."""
    masked = np.array(logits, np.float32, copy=True)
    if config.suppress_tokens:
        masked[:, np.asarray(config.suppress_tokens, np.int64)] = -1e9
    if config.begin_suppress_tokens and len(masked):
        masked[0, np.asarray(config.begin_suppress_tokens, np.int64)] = -1e9
    return masked


class SpeechRuntime(ABC):
    """A backend's capability to recognize speech (``Backend.speech``; None on a backend that does not)."""

    # What an export folder holds for this runtime: the files that make one (the first: what the
    # record names). A folder without them has no export for it: its test is skipped saying so.
    files: tuple[str, ...]

    @abstractmethod
    def open(self, folder: Path, threads: int) -> Recognizer:
        """The recognizer of the export in ``folder``; a BackendError naming the file and the backend
        where the export is not one this runtime reads, or contradicts its configuration."""

    def file_figures(self, folder: Path) -> tuple[tuple[str, int], ...]:
        """What the export's model file says of itself, read without loading it (``inspect``): a
        BackendError naming the file where it is not one this runtime reads; () for a runtime whose
        file is read only when loaded."""
        return ()
