"""Pure figures and verdicts of generation: free-running token agreement, first-step logits, timing
summaries (the budgets on them are judged by ``checks.check_generation``), and the teacher-forced
top-1 agreement and KL divergence against a golden's kept distributions (``checks.check_teacher_forced``).
No runtime here: every function takes numbers and returns numbers or messages."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..accuracy.metrics import cosine, max_abs_diff, token_agreement  # noqa: F401  (token_agreement: imported from here too)
from ..core.generation_figures import (GenerationFigures, KlDivergence, MeanSd, TeacherForcedFigures,
                                       TimingPercentiles)
from ..golden.tokens import TopLogprobs


def token_message(expected: Sequence[int], got: Sequence[int], agreement: float, first: int | None,
                  minimum: float | None) -> str | None:
    """The violation when agreement is under ``minimum`` (None when within, or not judged)."""
    if minimum is None or agreement >= minimum:
        return None
    def at(seq: Sequence[int], i: int) -> str:
        return str(seq[i]) if first is not None and i < len(seq) else "none"

    return (f"token agreement {agreement:.3f} < {minimum:g}: first difference at new token {first} "
            f"(golden {at(expected, first)}, got {at(got, first)}); golden {list(expected)}, got {list(got)}")


@dataclass(frozen=True)
class FirstStepLogits:
    """The first step's logits against the golden's: the largest absolute difference and the cosine
    (None where NaN or Inf made one meaningless), or where the shapes differ, both shapes."""

    max_abs_err: float | None
    cosine: float | None
    shape: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (the golden's, this run's)


def logits_figures(expected: np.ndarray, got: np.ndarray) -> FirstStepLogits:
    """The first step's logits against the golden's by the tensor figures' rules (accuracy.metrics:
    a NaN on both sides counts as equal, tiny values scaled before the norm so nothing underflows);
    a figure that NaN or Inf made meaningless is None, as the tensor records keep it, and fails."""
    if np.shape(expected) != np.shape(got):
        return FirstStepLogits(None, None, (tuple(np.shape(expected)), tuple(np.shape(got))))
    worst, similar = max_abs_diff(expected, got), cosine(expected, got)
    return FirstStepLogits(worst if math.isfinite(worst) else None, similar if math.isfinite(similar) else None)


def logits_messages(figures: FirstStepLogits, atol: float | None, min_cosine: float | None) -> list[str]:
    if figures.shape is not None:
        return [f"first-step logits shape {list(figures.shape[1])} differs from the golden's {list(figures.shape[0])}"]
    found, not_a_number = [], "not a number (NaN or Inf in the logits)"
    worst, least = figures.max_abs_err, figures.cosine
    if atol is not None and (worst is None or worst > atol):
        found.append(f"first-step logits max |Δ| {not_a_number if worst is None else f'{worst:.3g}'} > "
                     f"logits_atol {atol:g}")
    if min_cosine is not None and (least is None or least < min_cosine):
        found.append(f"first-step logits cosine {not_a_number if least is None else f'{least:.6f}'} < "
                     f"logits_cosine {min_cosine:g}")
    return found


def percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def timing_figures(prompt_tokens: int, ttft_s: Sequence[float], tpot_s: Sequence[float],
                   decode_s: Sequence[float] | None = None, new_tokens: int | None = None) -> GenerationFigures:
    """TTFT and TPOT in ms (P50/P90: what the gate compares), and the field's speeds per timed
    generation, mean and standard deviation over the generations (llama-bench's pp and tg, MLPerf
    Client's TTFT and TPS): prefill tokens/s = prompt tokens / TTFT; decode tokens/s = (generated
    tokens - 1) / the time after the first token (``decode_s``, one per generation, with ``ttft_s``).
    The timing part of the measured block: load, memory and the rest are the caller's to add."""
    prefill = MeanSd.of([prompt_tokens / t for t in ttft_s if t > 0])
    decode = MeanSd.of([(new_tokens - 1) / t for t in (decode_s or []) if t > 0]
                       if new_tokens is not None and new_tokens > 1 else [])
    return GenerationFigures(
        prompt_tokens=prompt_tokens,
        ttft_ms=TimingPercentiles(_in_ms(percentile(ttft_s, 50)), _in_ms(percentile(ttft_s, 90))),
        tpot_ms=TimingPercentiles(_in_ms(percentile(tpot_s, 50)), _in_ms(percentile(tpot_s, 90))),
        prefill_tokens_per_s=prefill.mean, prefill_tokens_per_s_sd=prefill.sd,
        decode_tokens_per_s=decode.mean, decode_tokens_per_s_sd=decode.sd,
        timed_generations=len(ttft_s), ttft_samples=len(ttft_s), tpot_samples=len(tpot_s),
        # 0th..100th percentiles, as a tensor record's latency_quantiles_ms: the page's distributions
        ttft_quantiles_ms=quantiles_ms(ttft_s), tpot_quantiles_ms=quantiles_ms(tpot_s))


def _in_ms(seconds: float | None) -> float | None:
    return seconds * 1000.0 if seconds is not None else None


def quantiles_ms(samples_s: Sequence[float]) -> tuple[float, ...] | None:
    """The 0th..100th percentiles of ``samples_s`` in ms (101 values); None without samples."""
    if not len(samples_s):
        return None
    return tuple(float(v) * 1000.0 for v in np.percentile(np.asarray(samples_s, np.float64), np.arange(101)))


# ------------------------------------------------------------ teacher-forced quality
# llama-perplexity --kl-divergence's figures (tools/perplexity/perplexity.cpp), over the golden's
# continuation instead of a text file: at each position the reference's next-token distribution P
# (kept by the golden as its top-k log-probabilities and the rest's mass) against the backend's Q.

TOP_K = 256  # log-probabilities a golden keeps per position: the whole vocabulary of a small one


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Rows of log-probabilities (float64) of rows of logits."""
    x = np.asarray(logits, np.float64)
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def _log_rest(logprobs: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """log of the mass outside ``keep`` (per row; -inf where nothing is outside)."""
    masked = logprobs.copy()
    np.put_along_axis(masked, keep, -np.inf, axis=-1)
    top = masked.max(axis=-1, keepdims=True)
    finite = np.isfinite(top)
    safe = np.where(finite, top, 0.0)
    with np.errstate(divide="ignore"):
        rest = np.log(np.exp(masked - safe).sum(axis=-1, keepdims=True)) + safe
    return np.where(finite, rest, -np.inf)[..., 0]


def top_logprobs(logits: np.ndarray, k: int = TOP_K) -> TopLogprobs:
    """The top-``k`` log-probabilities of each row of ``logits`` [n, vocab] and the rest's mass."""
    logprobs = log_softmax(np.atleast_2d(logits))
    k = min(k, logprobs.shape[-1])
    ids = np.argsort(-logprobs, axis=-1, kind="stable")[:, :k]
    return TopLogprobs(ids.astype(np.int64), np.take_along_axis(logprobs, ids, axis=-1).astype(np.float32),
                       _log_rest(logprobs, ids).astype(np.float32))


@dataclass(frozen=True)
class TeacherForced:
    """One prompt's (or all prompts') teacher-forced figures against the golden continuation:
    ``top1`` the share of positions whose argmax is the golden's next token (llama-perplexity's
    "Same top p"), ``kld`` each position's KL divergence KL(P || Q) of the reference's distribution
    P to the backend's Q, in nats, over the golden's k ids and the rest's mass as one bin."""

    top1: np.ndarray  # bool [n]: the backend's argmax is the golden's token there
    kld: np.ndarray | None  # float64 [n]; None where the golden keeps no log-probabilities
    # [n] the golden's mass outside its k ids (0 where k is the vocabulary): how much the k + 1 bins
    # may understate the full divergence
    rest_mass: np.ndarray | None = None

    @property
    def positions(self) -> int:
        return int(self.top1.size)

    @property
    def top1_agreement(self) -> float:
        return float(self.top1.mean()) if self.top1.size else 1.0

    def figures(self) -> TeacherForcedFigures:
        """The record's figures: top-1 agreement, the first position that differs and, where the
        golden keeps distributions, the KL divergence's mean, P99 and maximum (and where it is)."""
        first = int(np.argmin(self.top1)) if not self.top1.all() else None
        if self.kld is None:
            return TeacherForcedFigures(self.positions, self.top1_agreement, first, None)
        worst = int(np.argmax(self.kld))
        rest = float(self.rest_mass.max()) if self.rest_mass is not None and self.rest_mass.size else None
        return TeacherForcedFigures(self.positions, self.top1_agreement, first,
                                    KlDivergence(float(self.kld.mean()), float(np.percentile(self.kld, 99)),
                                                 float(self.kld[worst])), worst, rest)

    @classmethod
    def joined(cls, parts: Sequence["TeacherForced"]) -> "TeacherForced":
        """All prompts' positions as one (the overall figures)."""
        klds, rests = [p.kld for p in parts], [p.rest_mass for p in parts]
        return cls(np.concatenate([p.top1 for p in parts]),
                   None if any(k is None for k in klds) else np.concatenate(klds),  # type: ignore[arg-type]
                   None if any(r is None for r in rests) else np.concatenate(rests))  # type: ignore[arg-type]


def kl_divergence(reference: TopLogprobs, logits: np.ndarray) -> np.ndarray:
    """KL(P || Q) per position: P the reference's top-k and rest bins, Q the backend's softmax of
    ``logits`` [n, vocab] gathered into the same k + 1 bins. Merging bins never raises a KL divergence
    (the log-sum inequality): this is the full-vocabulary figure where k is the vocabulary, else a
    lower bound whose gap is the tail's share."""
    q = log_softmax(logits)
    ids = np.asarray(reference.ids, np.int64)
    p_top = np.asarray(reference.logprobs, np.float64)
    q_top = np.take_along_axis(q, ids, axis=-1)
    kld = (np.exp(p_top) * (p_top - q_top)).sum(axis=-1)
    p_rest = np.asarray(reference.rest, np.float64)
    has_rest = np.isfinite(p_rest)
    if has_rest.any():
        q_rest = _log_rest(q, ids)
        with np.errstate(invalid="ignore"):
            kld = kld + np.where(has_rest, np.exp(p_rest) * (p_rest - q_rest), 0.0)
    return kld


def teacher_forced(golden_tokens: Sequence[int], reference: TopLogprobs | None, logits: np.ndarray) -> TeacherForced:
    """The figures of a backend's ``logits`` [n, vocab], position j having seen the prompt and the
    golden's first j tokens, against the golden's ``n`` tokens and (where kept) its distributions."""
    tokens = np.asarray(golden_tokens, np.int64)
    logits = np.atleast_2d(np.asarray(logits))
    if logits.shape[0] != tokens.size:
        raise ValueError(f"{logits.shape[0]} positions of logits for {tokens.size} golden tokens")
    top1 = np.argmax(logits, axis=-1) == tokens
    if reference is None:
        return TeacherForced(top1, None)
    n = tokens.size
    kept = TopLogprobs(reference.ids[:n], reference.logprobs[:n], reference.rest[:n])
    return TeacherForced(top1, kl_divergence(kept, logits), np.exp(np.asarray(kept.rest, np.float64)))
