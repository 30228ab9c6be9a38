"""Pure figures and verdicts of generation: token agreement, first-step logits, timing summaries
(the budgets on them are judged by ``checks.check_generation``). No runtime here: every function
takes numbers and returns numbers or messages."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


def token_agreement(expected: Sequence[int], got: Sequence[int]) -> tuple[float, int | None]:
    """(fraction of positions where both agree, the first position that differs or None).
    A shorter sequence disagrees at every position it lacks."""
    n = max(len(expected), len(got))
    if n == 0:
        return 1.0, None
    same = sum(1 for a, b in zip(expected, got) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), None)
    if first is None and len(expected) != len(got):
        first = min(len(expected), len(got))
    return same / n, first


def token_message(expected: Sequence[int], got: Sequence[int], agreement: float, first: int | None,
                  minimum: float) -> str | None:
    """The violation when agreement is under ``minimum`` (None when within)."""
    if agreement >= minimum:
        return None
    def at(seq: Sequence[int], i: int) -> str:
        return str(seq[i]) if first is not None and i < len(seq) else "none"

    return (f"token agreement {agreement:.3f} < {minimum:g}: first difference at new token {first} "
            f"(golden {at(expected, first)}, got {at(got, first)}); golden {list(expected)}, got {list(got)}")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0.0:
        return 1.0 if not a.any() and not b.any() else 0.0
    return float(np.dot(a, b) / norm)


def logits_figures(expected: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    if np.shape(expected) != np.shape(got):
        return {"max_abs_err": None, "cosine": None, "shape": [list(np.shape(expected)), list(np.shape(got))]}
    diff = np.abs(np.asarray(expected, np.float64) - np.asarray(got, np.float64))
    return {"max_abs_err": float(diff.max()) if diff.size else 0.0, "cosine": cosine(expected, got)}


def logits_messages(figures: Mapping[str, Any], atol: float | None, min_cosine: float | None) -> list[str]:
    if "shape" in figures:
        return [f"first-step logits shape {figures['shape'][1]} differs from the golden's {figures['shape'][0]}"]
    found = []
    if atol is not None and not figures["max_abs_err"] <= atol:
        found.append(f"first-step logits max |Δ| {figures['max_abs_err']:.3g} > logits_atol {atol:g}")
    if min_cosine is not None and not figures["cosine"] >= min_cosine:
        found.append(f"first-step logits cosine {figures['cosine']:.6f} < logits_cosine {min_cosine:g}")
    return found


def percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def timing_figures(prompt_tokens: int, ttft_s: Sequence[float], tpot_s: Sequence[float]) -> dict[str, Any]:
    """TTFT and TPOT in ms (P50/P90), prefill and decode tokens/s apart (from the medians)."""
    ms = 1000.0
    ttft50, tpot50 = percentile(ttft_s, 50), percentile(tpot_s, 50)
    return {
        "prompt_tokens": prompt_tokens,
        "ttft_ms": {"p50": ttft50 * ms if ttft50 is not None else None,
                    "p90": percentile(ttft_s, 90) * ms if len(ttft_s) else None},
        "tpot_ms": {"p50": tpot50 * ms if tpot50 is not None else None,
                    "p90": percentile(tpot_s, 90) * ms if len(tpot_s) else None},
        "prefill_tokens_per_s": prompt_tokens / ttft50 if ttft50 else None,
        "decode_tokens_per_s": 1.0 / tpot50 if tpot50 else None,
        "ttft_samples": len(ttft_s), "tpot_samples": len(tpot_s),
    }
