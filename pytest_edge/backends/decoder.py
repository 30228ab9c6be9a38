"""Decoder LLMs as a capability of the Backend interface: what a runtime's ``open_decoder`` returns
(:class:`Decoder`, each runtime's export convention in its own module), and greedy generation over
one (:func:`generate`), which the backend's worker runs for ``Generate`` and ``MeasureGeneration``, and
the teacher-forced pass over a given continuation (:func:`teacher_forced`, for ``TeacherForce``)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import BackendError


class Decoder(ABC):
    """A decoder LLM loaded by its runtime, in the runtime's own export convention, with its KV
    cache: ``step(ids)`` feeds tokens at the next positions and returns the last one's logits."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the cache: the next step starts at position 0."""

    @abstractmethod
    def step(self, ids: Sequence[int]) -> np.ndarray:
        """Feed ``ids`` at the next positions; the logits (float32, vocabulary-sized) of the last."""

    def reset_runtime_timings(self) -> None:
        """Start the runtime's own counters afresh (before the timed generations)."""

    def runtime_timings(self) -> dict | None:
        """The runtime's own timings since the last reset, where it keeps any (llama.cpp's
        ``llama_perf_context``), recorded beside ours; None where it keeps none."""
        return None


def not_a_decoder(path: Path, backend: str, expected: str, found: str) -> BackendError:
    """The error of an artifact that is not a decoder in ``backend``'s LLM export convention."""
    return BackendError(f"{path} ({backend}): not a decoder in this runtime's LLM convention: expected "
                        f"{expected}; found {found}")


@dataclass
class Generation:
    prompt: list[int]
    tokens: list[int]  # the new tokens, greedy
    first_logits: np.ndarray  # the logits the first new token was chosen from
    prefill_s: float  # prompt in, first token out (TTFT)
    step_s: list[float] = field(default_factory=list)  # each later token (TPOT samples)

    def to_reply(self) -> dict:
        """What a worker sends back for Generate (the prompt is the request's)."""
        return {"tokens": self.tokens, "first_logits": self.first_logits, "prefill_s": self.prefill_s,
                "step_s": self.step_s}

    @classmethod
    def from_reply(cls, prompt: Sequence[int], reply: dict) -> "Generation":
        return cls(list(prompt), [int(t) for t in reply["tokens"]], np.asarray(reply["first_logits"], np.float32),
                   float(reply["prefill_s"]), [float(t) for t in reply["step_s"]])


def generate(decoder: Decoder, prompt: Sequence[int], new_tokens: int,
             clock: Callable[[], float] = time.perf_counter) -> Generation:
    """Greedy decoding of ``new_tokens`` after ``prompt`` (the first from the prefill)."""
    decoder.reset()
    start = clock()
    logits = decoder.step(list(prompt))
    token = int(np.argmax(logits))
    prefill_s = clock() - start
    result = Generation(list(prompt), [token], np.asarray(logits, np.float32).copy(), prefill_s)
    for _ in range(new_tokens - 1):
        start = clock()
        token = int(np.argmax(decoder.step([token])))
        result.step_s.append(clock() - start)
        result.tokens.append(token)
    return result


def teacher_forced(decoder: Decoder, prompt: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """The logits [len(tokens), vocab] of each position of a given continuation: row j is what the
    decoder predicts after ``prompt`` and ``tokens[:j]`` (the golden's tokens fed one at a time through
    the same cache as generation, whatever it would have chosen itself)."""
    decoder.reset()
    rows = [np.asarray(decoder.step(list(prompt)), np.float32).copy()]
    for token in list(tokens)[:-1]:
        rows.append(np.asarray(decoder.step([int(token)]), np.float32).copy())
    return np.stack(rows)
