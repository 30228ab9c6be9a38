"""Is a latency change real? Significance tests on per-process figures. Pure NumPy, no pytest.

The unit of evidence is the worker *process*, not the single run: runs inside one process share
its memory layout, allocator state and cache placement, so thousands of them are not independent
(pyperf spawns 20 processes for this reason). Every test below therefore works on one figure per
process (its median or its P99), on a log scale, because latency changes are multiplicative.

- Against stored numbers (two independent groups of processes): Welch's t-test, one-sided.
- A/B in one job (pairs of processes measured back to back, A B A B): a paired t-test on
  log(A_i / B_i), which cancels the machine's load and drift that both sides of a pair share.

Google Benchmark's ``compare.py`` uses a Mann-Whitney U test, which needs at least 9 repetitions
per side to say anything (its exact p-value cannot go below 0.05 with 3 against 3); with the few
fresh processes a test suite can afford, a t-test on log process medians has the power, as pyperf's
``compare_to`` uses a t-test. The decision also needs the change to exceed the threshold, so a
significant but tiny change never fails a gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# The least spread of log per-process figures a test assumes. Fresh processes of one tiny model
# differ by 10 % to 70 % on a 2-core CI machine (memory layout, the host's other guests), so three
# processes that agree to 0.1 % are luck, not precision: without a floor, one such baseline made a
# 1.2x "slower" unchanged model look significant at t=11 in CI.
MIN_LOG_SD = 0.05
# One-sided 95 % critical values of Student's t by degrees of freedom (table lookup keeps NumPy
# the only dependency; a fractional Welch df rounds down, which is the conservative side).
_T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833,
        10: 1.812, 11: 1.796, 12: 1.782, 13: 1.771, 14: 1.761, 15: 1.753, 16: 1.746, 17: 1.740,
        18: 1.734, 19: 1.729, 20: 1.725, 25: 1.708, 30: 1.697, 40: 1.684, 60: 1.671, 120: 1.658}


def t_critical(df: float) -> float:
    """One-sided 95 % critical value of Student's t with ``df`` degrees of freedom (rounded down)."""
    if df < 1:
        return math.inf
    whole = int(math.floor(df))
    below = [k for k in _T95 if k <= whole]
    return _T95[max(below)] if whole <= 120 else 1.645


@dataclass(frozen=True)
class Change:
    """A measured change of one figure: ``ratio`` new/old (>1: slower), whether it is significant,
    and the evidence (t statistic, its critical value, how many processes on each side)."""

    ratio: float
    significant: bool
    t: float
    critical: float
    n_old: int
    n_new: int
    paired: bool = False
    note: str = ""

    def exceeds(self, threshold: float) -> bool:
        return self.ratio - 1 > threshold and self.significant

    def describe(self) -> str:
        if math.isinf(self.critical):
            evidence = "one process per side: no significance test possible"
        elif self.paired:
            evidence = f"paired t={self.t:.2f} over {self.n_new} A/B pairs, needs > {self.critical:.2f}"
        else:
            evidence = f"t={self.t:.2f} over {self.n_old} vs {self.n_new} processes, needs > {self.critical:.2f}"
        return f"{self.ratio - 1:+.1%} ({evidence}{'; ' + self.note if self.note else ''})"


def _logs(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([v for v in values if v is not None and v > 0], dtype=np.float64)
    return np.log(array)


def compare_groups(old: Sequence[float], new: Sequence[float]) -> Change:
    """Welch's one-sided t-test that ``new`` is slower than ``old`` (one figure per process).

    With one process on a side its variance is unknown: the other side's variance stands for both
    (equal variances assumed, said in the note). With one process on both sides there is no test;
    the change counts as significant so that the threshold alone decides, as before this module.
    """
    x, y = _logs(old), _logs(new)
    if len(x) == 0 or len(y) == 0:
        raise ValueError("compare_groups needs at least one positive figure per side")
    diff = float(y.mean() - x.mean())
    ratio = math.exp(diff)
    nx, ny = len(x), len(y)
    if nx == 1 and ny == 1:
        return Change(ratio, True, math.inf, math.inf, nx, ny)
    note = ""
    if nx == 1 or ny == 1:
        pooled = max(float(np.var(y if nx == 1 else x, ddof=1)), MIN_LOG_SD ** 2)
        se = math.sqrt(pooled * (1 / nx + 1 / ny))
        df = float(max(nx, ny) - 1)
        note = "one process on one side: the other side's spread stands for both"
    else:
        vx = max(float(np.var(x, ddof=1)), MIN_LOG_SD ** 2) / nx
        vy = max(float(np.var(y, ddof=1)), MIN_LOG_SD ** 2) / ny
        se = math.sqrt(vx + vy)
        # Welch-Satterthwaite degrees of freedom.
        df = (vx + vy) ** 2 / ((vx ** 2 / (nx - 1) if vx else 0.0) + (vy ** 2 / (ny - 1) if vy else 0.0)) \
            if (vx or vy) else float(nx + ny - 2)
    t = _t_statistic(diff, se)
    critical = t_critical(df)
    return Change(ratio, t > critical, t, critical, nx, ny, note=note)


def compare_pairs(a_values: Sequence[float], b_values: Sequence[float]) -> Change:
    """Paired one-sided t-test that A (the new artifact) is slower than B (the baseline twin),
    pair i measured back to back under the same load."""
    pairs = [(a, b) for a, b in zip(a_values, b_values) if a and b and a > 0 and b > 0]
    if not pairs:
        raise ValueError("compare_pairs needs at least one pair of positive figures")
    logs = np.log(np.asarray([a / b for a, b in pairs], dtype=np.float64))
    mean = float(logs.mean())
    n = len(logs)
    if n == 1:
        return Change(math.exp(mean), True, math.inf, math.inf, 1, 1, paired=True)
    se = max(float(np.std(logs, ddof=1)), MIN_LOG_SD) / math.sqrt(n)
    t = _t_statistic(mean, se)
    critical = t_critical(n - 1)
    return Change(math.exp(mean), t > critical, t, critical, n, n, paired=True)


def _t_statistic(diff: float, se: float) -> float:
    if se > 0:
        return diff / se
    # Identical figures within each side: any positive difference is as certain as it gets.
    return math.inf if diff > 0 else (-math.inf if diff < 0 else 0.0)


def spread(values: Sequence[float]) -> float | None:
    """Largest over smallest per-process figure (1.0: the processes agree)."""
    positive = [v for v in values if v is not None and v > 0]
    if len(positive) < 2:
        return None
    return max(positive) / min(positive)


@dataclass(frozen=True)
class MeanSd:
    """A figure's mean and sample standard deviation (n - 1, as llama-bench's ``stdev``) over ``n``
    values (a decoder's generations); None where there were none."""

    mean: float | None
    sd: float | None
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "MeanSd":
        if not len(values):
            return cls(None, None, 0)
        return cls(float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, len(values))
