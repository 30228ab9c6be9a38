"""How far a tested tensor is from a reference one: SNR, cosine similarity, the largest absolute
difference, and whether two tensors diverge beyond a tolerance; how far a generated token
sequence is from a golden one. One home for the golden comparison, the triage ladder, the
quantization table and ``pytest-edge golden diff``. NumPy only."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def as_float(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    return array.astype(np.float64) if array.dtype != np.float64 else array


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """Signal-to-noise ratio of ``test`` against ``reference`` in dB, ``10 log10(sum(ref²) /
    sum((ref - test)²))``: ``inf`` when they are equal, ``-inf`` when the reference is all zeros and
    the test is not, NaN when either holds NaN/Inf or the sums overflow float64."""
    ref, tested = as_float(reference).ravel(), as_float(test).ravel()
    with np.errstate(all="ignore"):
        peak = float(max(np.max(np.abs(ref), initial=0.0), np.max(np.abs(tested), initial=0.0)))
        if math.isfinite(peak) and peak > 0:  # scaled first, so squares of large values do not overflow
            ref, tested = ref / peak, tested / peak
        noise = float(np.sum((tested - ref) ** 2))
        signal = float(np.sum(ref ** 2))
    if not (math.isfinite(noise) and math.isfinite(signal)):
        return math.nan
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine(reference: np.ndarray, test: np.ndarray) -> float:
    """Cosine of the angle between the two tensors as flat vectors, in [-1, 1]: 1.0 for two
    all-zero tensors, 0.0 when only one is all zeros, NaN when it cannot be computed (NaN/Inf)."""
    a, b = as_float(reference).ravel(), as_float(test).ravel()
    with np.errstate(all="ignore"):
        # Each scaled by its largest magnitude first: the squares of tiny values (1.6e-161) underflow
        # to subnormals and the norm loses its digits (a tensor's cosine with itself read 0.99973).
        a, b = _by_peak(a), _by_peak(b)
        norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        if norm_a == 0.0 and norm_b == 0.0:
            return 1.0
        if norm_a == 0.0 or norm_b == 0.0:
            return 0.0
        value = float(np.dot(a / norm_a, b / norm_b))  # normalised first: no overflow
    return float(np.clip(value, -1.0, 1.0)) if math.isfinite(value) else math.nan


def _by_peak(vector: np.ndarray) -> np.ndarray:
    peak = float(np.max(np.abs(vector))) if vector.size else 0.0
    return vector / peak if peak > 0.0 and math.isfinite(peak) else vector


def max_abs_diff(reference: np.ndarray, test: np.ndarray) -> float:
    """The largest ``|reference - test|`` (0.0 for empty tensors, ``inf`` for different shapes); a
    NaN in the same place on both sides counts as equal."""
    a, b = as_float(reference), as_float(test)
    if a.shape != b.shape:
        return math.inf
    with np.errstate(all="ignore"):
        diff = np.abs(a - b)
    return float(np.max(np.where(np.isnan(a) & np.isnan(b), 0.0, diff), initial=0.0))


def diverges(a: np.ndarray | None, b: np.ndarray | None, atol: float, rtol: float) -> float | None:
    """``max |a - b|`` where the two differ beyond ``atol``/``rtol`` (``inf`` where no element
    differs by a finite amount); None where they agree, or cannot be compared (a missing tensor,
    different shapes, not numbers)."""
    if a is None or b is None or a.shape != b.shape or a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return None
    a, b = a.astype(np.float64), b.astype(np.float64)
    if np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
        return None
    with np.errstate(invalid="ignore"):
        return float(np.nanmax(np.abs(a - b))) if np.isfinite(a - b).any() else math.inf


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
