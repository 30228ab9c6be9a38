"""Decoder LLMs as a capability of the Backend interface: a runtime that runs them has a
:class:`DecoderRuntime` (``Backend.decoders``; None where it runs none), whose ``open`` returns a
:class:`Decoder` (each runtime's export convention in its own module); greedy generation over
one (:func:`generate`), which the backend's worker runs for ``Generate`` and ``MeasureGeneration``, and
the teacher-forced pass over a given continuation (:func:`teacher_forced`, for ``TeacherForce``)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import codec
from ..errors import BackendError


class DecoderRuntime(ABC):
    """A backend's capability to run decoder LLMs (edge_llm tests, docs/llm.md): ``Backend.decoders``,
    None on a backend that runs none, so that no backend has a method that exists only to raise."""

    # How the runtime keeps a decoder's KV cache, in words, for the record's llm.kv_cache.
    kv_cache: str | None = None
    # Why this runtime's decoder API gives no logits (LiteRT-LM's Session: text out); None where it
    # gives them. Its first-step logits and teacher-forced figures are then not measured.
    why_no_logits: str | None = None

    @abstractmethod
    def open(self, path: Path, config: Any, threads: int) -> "Decoder | OwnLoopDecoder":
        """Load ``path`` as a decoder LLM described by ``config`` (a decoder_config.LlmConfig); a
        BackendError naming the file and the convention expected where it is not one."""

    def config_of(self, artifact: Path) -> Any:
        """The decoder configuration (a decoder_config.LlmConfig) ``artifact`` carries inside, read
        without loading it (a GGUF's metadata); None where the format carries none."""
        return None

    def folder_decoder(self, folder: Path) -> Path | None:
        """The decoder artifact an exporter's output folder holds by its convention, for
        ``edge_llm(model="folder")``; None where ``folder`` is not such an export. An
        EdgeUsageError where the folder's own configuration names a file that is not there."""
        return None

    def refuses(self, artifact: Path) -> str | None:
        """Why this runtime cannot take ``artifact`` (of its suffix) as a decoder, read without
        loading it; None where it can."""
        return None


class LoadedDecoder(ABC):
    """What every loaded decoder LLM has, whichever way it generates: a cache to forget, and the
    runtime's own counters where it keeps any. A :class:`Decoder` is stepped by this product (tokens
    in, logits out: every runtime that exposes logits); an :class:`OwnLoopDecoder` generates with its
    runtime's own loop (LiteRT-LM's Session: text out, no logits)."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the cache: the next generation starts at position 0."""

    def reset_runtime_timings(self) -> None:
        """Start the runtime's own counters afresh (before the timed generations)."""

    def runtime_timings(self) -> "RuntimeCounters | None":
        """The runtime's own timings since the last reset, where it keeps any (llama.cpp's
        ``llama_perf_context``), recorded beside ours; None where it keeps none."""
        return None


class OwnLoopDecoder(LoadedDecoder):
    """A decoder whose runtime's API gives tokens and no logits (LiteRT-LM's Session): it generates
    with the runtime's own loop, nothing steps it, and its logits figures (first step, teacher-forced)
    are not measured, for the reason ``why_no_logits`` gives."""

    why_no_logits = ""

    @abstractmethod
    def generate_own(self, prompt: Sequence[int], new_tokens: int,
                     clock: Callable[[], float] = time.perf_counter) -> "Generation":
        """Greedy generation of ``new_tokens`` after ``prompt`` by the runtime's own loop, timed as
        :func:`generate` times a stepped decoder (TTFT, then each later token)."""


class Decoder(LoadedDecoder):
    """A decoder LLM loaded by its runtime, in the runtime's own export convention, with its KV
    cache: ``step(ids)`` feeds tokens at the next positions and returns the last one's logits."""

    @abstractmethod
    def step(self, ids: Sequence[int]) -> np.ndarray:
        """Feed ``ids`` at the next positions; the logits (float32, vocabulary-sized) of the last."""

    def feed(self, ids: Sequence[int]) -> None:
        """Feed ``ids`` at the next positions and return once the runtime has computed the last one's
        logits, without reading them out (``logits``): what generation times, as llama-bench times
        ``llama_decode`` + ``llama_synchronize`` and reads nothing. Default: ``step``, for runtimes
        whose call returns the logits (ONNX Runtime's, ExecuTorch's, LiteRT's outputs)."""
        self._fed_logits = self.step(ids)

    def logits(self) -> np.ndarray:
        """The logits of the last position ``feed`` fed, read from the runtime."""
        return self._fed_logits


@dataclass(frozen=True)
class RuntimeCounters:
    """A runtime's own counters of one timed generation (llama.cpp's ``llama_perf_context``,
    LiteRT-LM's ``BenchmarkInfo``), read from the runtime where the decoder gives them
    (``Decoder.runtime_timings``): prefill's ("prompt eval") and decode's ("eval") milliseconds and
    tokens, and the runtime's own time to first token where it keeps one. The worker's
    MeasureGeneration reply carries them in these keys (codec), which core.generation_figures
    sums into the record's RuntimeTimings."""

    source: str  # which counters: "llama_perf_context"
    prompt_eval_ms: float
    prompt_tokens: int
    eval_ms: float
    eval_tokens: int
    ttft_ms: float | None = codec.json_field(default=None, omit=lambda value: value is None)

    @classmethod
    def summed(cls, counted: Sequence["RuntimeCounters"]) -> "RuntimeCounters":
        """The counters of ``counted`` (one or more generations, one runtime's) summed, named by the
        first's source; the runtime's own time to first token where every generation has one."""
        first_token = [c.ttft_ms for c in counted]
        return cls(counted[0].source, sum(c.prompt_eval_ms for c in counted), sum(c.prompt_tokens for c in counted),
                   sum(c.eval_ms for c in counted), sum(c.eval_tokens for c in counted),
                   sum(t for t in first_token if t is not None) if None not in first_token else None)


def not_a_decoder(path: Path, backend: str, expected: str, found: str) -> BackendError:
    """The error of an artifact that is not a decoder in ``backend``'s LLM export convention."""
    return BackendError(f"{path} ({backend}): not a decoder in this runtime's LLM convention: expected "
                        f"{expected}; found {found}")


def _logits(value: Any) -> np.ndarray | None:
    return None if value is None else np.asarray(value, np.float32)


@dataclass
class Generation:
    """Generate's value; the worker's reply is ``codec.to_json(generation)``, read back with
    ``codec.from_json(Generation, reply, ..., given={"prompt": prompt})``: the prompt is the request's."""

    prompt: list[int] = codec.json_field(skip=True)
    tokens: list[int]  # the new tokens, greedy
    # the logits the first new token was chosen from; None: not exposed
    first_logits: np.ndarray | None = codec.json_field(decode=_logits)
    prefill_s: float  # prompt in, first token out (TTFT)
    step_s: list[float] = field(default_factory=list)  # each later token (TPOT samples)


def generate(decoder: Decoder | OwnLoopDecoder, prompt: Sequence[int], new_tokens: int,
             clock: Callable[[], float] = time.perf_counter) -> Generation:
    """Greedy decoding of ``new_tokens`` after ``prompt`` (the first from the prefill). Timed: each
    ``feed``, the runtime computing a position's logits (the prompt's: TTFT; each later token's:
    TPOT), as llama-bench's pp and tg time ``llama_decode`` + ``llama_synchronize``; reading the
    logits out where that is a call of its own (llama.cpp's) and choosing the token (the app's
    sampler, here argmax) are not, as llama-bench reads and samples nothing (docs/llm.md). A decoder
    that exposes no logits runs its own loop."""
    if isinstance(decoder, OwnLoopDecoder):
        return decoder.generate_own(prompt, new_tokens, clock)
    decoder.reset()
    start = clock()
    decoder.feed(list(prompt))
    prefill_s = clock() - start
    logits = decoder.logits()
    token = int(np.argmax(logits))
    result = Generation(list(prompt), [token], np.asarray(logits, np.float32).copy(), prefill_s)
    for _ in range(new_tokens - 1):
        start = clock()
        decoder.feed([token])
        result.step_s.append(clock() - start)
        token = int(np.argmax(decoder.logits()))
        result.tokens.append(token)
    return result


def teacher_forced(decoder: Decoder | OwnLoopDecoder, prompt: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """The logits [len(tokens), vocab] of each position of a given continuation: row j is what the
    decoder predicts after ``prompt`` and ``tokens[:j]`` (the golden's tokens fed one at a time through
    the same cache as generation, whatever it would have chosen itself). A decoder that exposes
    no logits has none to give: a BackendError saying why."""
    if isinstance(decoder, OwnLoopDecoder):
        raise BackendError(f"teacher-forced logits: {decoder.why_no_logits}")
    decoder.reset()
    rows = [np.asarray(decoder.step(list(prompt)), np.float32).copy()]
    for token in list(tokens)[:-1]:
        rows.append(np.asarray(decoder.step([int(token)]), np.float32).copy())
    return np.stack(rows)
