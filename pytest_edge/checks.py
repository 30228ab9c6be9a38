"""Budget checks as pure functions: measurements and budgets in, violation messages out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .backends import Coverage
from .measurement.timing import (DRIFT_MIN_TIME_S, DRIFT_MIN_WINDOW_RUNS, DRIFT_MIN_WINDOW_S,
                                 DRIFT_WINDOW_FRACTION)
from .measurement.stats import Change, compare_groups, compare_pairs

# Below these run counts a percentile rests on too few samples to be trusted.
_MIN_RUNS = {"p50": 5, "p90": 20, "p99": 100}


def check_coverage(coverage: Coverage | None, max_fallback: float | None,
                   max_partitions: int | None, backend: str) -> list[str]:
    if max_fallback is None and max_partitions is None:
        return []
    if coverage is None:
        return [f"{backend}: delegate coverage cannot be read on this backend, so max_fallback/"
                "max_partitions cannot be checked"]
    problems = []
    how = " (predicted)" if coverage.method == "predicted" else ""
    how += " (approximate)" if coverage.approximate else ""
    if max_fallback is not None and coverage.fallback > max_fallback + 1e-12:
        ops = ", ".join(f"{name} x{count}" for name, count in
                        sorted(coverage.fallback_op_names.items(), key=lambda kv: (-kv[1], kv[0])))
        problems.append(
            f"{backend}: fallback {coverage.fallback:.1%}{how} ({coverage.fallback_ops} of "
            f"{coverage.total_ops} operators on default CPU kernels) > max_fallback "
            f"{max_fallback:.1%}; fell back: {ops}")
    if max_partitions is not None and coverage.partitions > max_partitions:
        problems.append(f"{backend}: {coverage.partitions} delegate partitions{how} > max_partitions "
                        f"{max_partitions}")
    return problems


def check_latency(latency: Mapping[str, float] | None, runs: int | None,
                  budgets: Mapping[str, float | None], backend: str) -> list[str]:
    problems = []
    for key in ("p50", "p90", "p99"):
        budget = budgets.get(f"{key}_ms")
        if budget is None:
            continue
        if latency is None:
            problems.append(f"{backend}: {key.upper()} latency was not measured ({key}_ms={budget:g})")
            continue
        figure = latency[key]
        if figure > budget:
            weak = ""
            if runs is not None and runs < _MIN_RUNS[key]:
                weak = (f" [weak evidence: {key.upper()} from only {runs} runs; "
                        f"use runs>={_MIN_RUNS[key]}]")
            problems.append(f"{backend}: {key.upper()} latency {figure:.3f} ms > {key}_ms {budget:g} ms "
                            f"(over {runs} runs){weak}")
    return problems


def check_load(load_ms: float | None, budget: float | None, backend: str) -> list[str]:
    if budget is None:
        return []
    if load_ms is None:
        return [f"{backend}: load time was not measured (max_load_ms={budget:g})"]
    if load_ms > budget:
        return [f"{backend}: load time {load_ms:.2f} ms > max_load_ms {budget:g} ms"]
    return []


def check_drift(drift: float | None, budget: float | None, per_process: Sequence[float | None], backend: str,
                probe_drift: float | None = None) -> list[str]:
    """``max_drift``: the runs of the last fifth of the timed time against those of the first fifth
    (``drift``: the geometric mean over the measuring processes, ``per_process`` each one's figure)
    must not be slower than ``budget``. With several processes the drift must also be significant
    over their spread (a one-sample t-test on log drift, as the gate judges latency), so one process
    hit by an interrupt storm in one window does not fail an unchanged model."""
    if budget is None:
        return []
    if drift is None:
        return [f"{backend}: drift was not measured (max_drift={budget:g}): the first and last fifth of "
                f"each process's timed runs must last {DRIFT_MIN_WINDOW_S:g} s with {DRIFT_MIN_WINDOW_RUNS} runs "
                f"at least (a max_drift test times {DRIFT_MIN_TIME_S:g} s per process; a slow model needs "
                f"runs>={DRIFT_MIN_WINDOW_RUNS / DRIFT_WINDOW_FRACTION:.0f})"]
    if drift <= budget:
        return []
    figures = [d for d in per_process if d is not None and d > 0]
    if len(figures) > 1:
        change = compare_pairs(figures, [1.0] * len(figures))
        if not change.significant:
            return []
        evidence = (f"geometric mean of {len(figures)} processes: {', '.join(f'{d:.2f}' for d in figures)}; "
                    f"t={change.t:.2f}, needs > {change.critical:.2f}")
    else:
        evidence = "one process: no spread to judge it against"
    machine = (f"; the machine probe drifted {probe_drift:.2f} over the same windows"
               if probe_drift is not None else "")
    return [f"{backend}: drift {drift:.3f} > max_drift {budget:g} (median run of the last fifth of the timed time "
            f"over the first fifth, {evidence}); the model got slower while it ran: thermal throttling, a growing "
            f"cache or allocation, or a busy machine{machine}"]


def check_memory(peak_mb: float | None, budget: float | None, backend: str) -> list[str]:
    if budget is None:
        return []
    if peak_mb is None:
        return [f"{backend}: peak memory could not be measured here (peak_memory_mb={budget:g})"]
    if peak_mb > budget:
        return [f"{backend}: peak memory {peak_mb:.1f} MB over the runtime's baseline > "
                f"peak_memory_mb {budget:g} MB"]
    return []


@dataclass(frozen=True)
class Regression:
    """A figure that got worse than the baseline allows. ``timed`` regressions (latency) depend on
    the machine's state, so the session re-measures them before they fail."""

    figure: str
    message: str
    timed: bool = False
    change: Change | None = None


# Percentile -> fewest runs per process from which it is gated against a baseline. A P99 of a few
# hundred runs rests on a handful of slow runs (an interrupt, a page fault): gated from 1000 runs,
# ten runs beyond it in every process.
_GATED_PERCENTILES = {"p50": _MIN_RUNS["p50"], "p99": 1000}
# Peak memory moves by allocator pages and arenas between processes; below this much a change is
# not reported whatever its percentage (a 1.2 MB model going to 1.4 MB is +17 % of noise).
MEMORY_FLOOR_MB = 1.0


def _per_process(record: Mapping[str, Any], key: str) -> tuple[list[float], int | None]:
    """One figure per process (a report without per-process figures counts as one process)."""
    processes = record.get("processes") or []
    values = [p.get(key) for p in processes if isinstance(p, Mapping)]
    values = [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
    runs = [p.get("runs") for p in processes if isinstance(p, Mapping)]
    if values:
        fewest = min((r for r in runs if isinstance(r, int)), default=None)
        return values, fewest
    pooled = _dig(record, ("latency_ms", key))
    if isinstance(pooled, (int, float)) and pooled > 0:
        runs_total = record.get("measured_runs")
        return [float(pooled)], runs_total if isinstance(runs_total, int) else None
    return [], None


def latency_regressions(record: Mapping[str, Any], baseline: Mapping[str, Any], max_regression: float,
                        paired: bool = False, significant: bool = True,
                        p99_regression: float | None = None) -> tuple[list[Regression], list[str]]:
    """P50 (and P99 where the run counts support it) of ``record`` against ``baseline``: above
    ``max_regression`` and, with ``significant``, significant (without: suspects, to re-measure).
    ``paired``: the two were measured as A/B pairs in one job; only then is P99 gated, and only with
    its own threshold ``p99_regression`` (None: reported, not gated). Returns the regressions and
    notes on what could not be gated."""
    backend = record["backend"]
    found, notes = [], []
    for key, min_runs in _GATED_PERCENTILES.items():
        new, new_runs = _per_process(record, key)
        old, old_runs = _per_process(baseline, key)
        if not new or not old:
            continue
        fewest = min(r for r in (new_runs, old_runs, min_runs * 10**6) if r is not None)
        if fewest < min_runs:
            notes.append(f"{backend}: {key.upper()} not gated: {fewest} runs per process, {min_runs} needed")
            continue
        gated = key == "p50" or (paired and p99_regression is not None)
        threshold = max_regression if key == "p50" or p99_regression is None else p99_regression
        change = compare_pairs(new, old) if paired else compare_groups(old, new)
        if not (change.exceeds(threshold) if significant else change.ratio - 1 > threshold):
            continue
        if not gated:
            # A tail moves between fresh processes (interrupts, page faults, the host's other guests)
            # by more than a median: an unchanged model read +18 % on P99 in an A/B gate on a shared
            # machine. Against stored numbers it is never gated; A/B mode gates it on request.
            how = ("not gated unless asked (--edge-gate-p99=25%)" if paired else
                   "not gated against stored numbers (A/B mode gates it with --edge-gate-p99)")
            notes.append(f"{backend}: {key.upper()} latency {change.describe()} against the "
                         f"{'baseline twin' if paired else 'stored baseline'}; {how}")
            continue
        new_mean, old_mean = _geomean(new), _geomean(old)
        what = "the baseline twin" if paired else "the baseline"
        per = f"geometric mean of {len(new)} process {key.upper()}s" if len(new) > 1 else "one process"
        pooled = _dig(record, ("latency_ms", key))
        if len(new) > 1 and _number(pooled):
            # The terminal table shows the pooled percentile of the first measurement's runs.
            per += f"; pooled over the runs, as in the table: {pooled:.3f} ms"
        found.append(Regression(
            f"{key.upper()} latency",
            f"{backend}: {key.upper()} latency {new_mean:.3f} ms ({per}) is {change.ratio - 1:+.1%} against {what} "
            f"{old_mean:.3f} ms (allowed +{threshold:.0%}; {_evidence(change)})", timed=True, change=change))
    return found, notes


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _evidence(change: Change) -> str:
    text = change.describe()
    return text[text.index("(") + 1:-1] if "(" in text else text


def resource_regressions(record: Mapping[str, Any], baseline: Mapping[str, Any],
                         max_regression: float, what: str = "the baseline") -> list[Regression]:
    """Peak memory above ``max_regression`` (and MEMORY_FLOOR_MB), or a higher fallback fraction."""
    backend = record["backend"]
    found = []
    new, old = _dig(record, ("peak_memory_mb",)), _dig(baseline, ("peak_memory_mb",))
    if _number(new) and _number(old) and old > 0:
        change = new / old - 1
        if change > max_regression and new - old > MEMORY_FLOOR_MB:
            found.append(Regression("peak memory", f"{backend}: peak memory {new:.3f} MB is {change:+.1%} against "
                                    f"{what} {old:.3f} MB (allowed +{max_regression:.0%})"))
    new_cov, old_cov = _dig(record, ("coverage", "fallback")), _dig(baseline, ("coverage", "fallback"))
    if _number(new_cov) and _number(old_cov) and new_cov > old_cov + 1e-12:
        found.append(Regression("delegate coverage", f"{backend}: delegate coverage dropped: fallback "
                                f"{new_cov:.1%} against {what} {old_cov:.1%}"))
    return found


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_baseline(record: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                   max_regression: float) -> list[str]:
    """Every regression of ``record`` against a stored ``baseline`` record, as messages (no
    re-measurement: what ``pytest-edge report compare`` says about two finished reports)."""
    if baseline is None:
        return []
    if record.get("timing_not_judged"):  # an emulated device: its coverage is judged, its timing and memory not
        return [r.message for r in resource_regressions(record, baseline, max_regression) if r.figure == "delegate coverage"]
    timed, _ = latency_regressions(record, baseline, max_regression)
    return [r.message for r in [*timed, *resource_regressions(record, baseline, max_regression)]]


def _dig(data: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data
