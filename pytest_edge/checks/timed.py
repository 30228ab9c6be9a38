"""The budgets judged on a tensor model's timed runs: its latency percentiles, load time, drift over
the timed time, peak memory and memory growth per run. Pure functions: figures and budgets in,
findings out; each is given the rows of the table it judges (:mod:`pytest_edge.checks` calls them
so)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..measurement.stats import compare_pairs
from ..measurement.timing import (DRIFT_MIN_TIME_S, DRIFT_MIN_WINDOW_RUNS, DRIFT_MIN_WINDOW_S, DRIFT_WINDOW_FRACTION,
                                  MIN_RUNS)
from .rows import Budgets, Finding, Rows, found, one_row


def check_latency(latency: Mapping[str, float] | None, runs: int | None, budgets: Budgets,
                  backend: str, *, rows: Rows) -> list[Finding]:
    problems = []
    for key in ("p50", "p90", "p99"):
        budget = budgets.get(f"{key}_ms")
        if budget is None:
            continue
        if latency is None:
            problems.append(found(rows, f"{key}_ms", None, budget,
                                  f"{backend}: {key.upper()} latency was not measured ({key}_ms={budget:g})"))
            continue
        figure = latency[key]
        if figure > budget:
            weak = ""
            if runs is not None and runs < MIN_RUNS[key]:
                weak = (f" [weak evidence: {key.upper()} from only {runs} runs; "
                        f"use runs>={MIN_RUNS[key]}]")
            problems.append(found(rows, f"{key}_ms", figure, budget,
                                  f"{backend}: {key.upper()} latency {figure:.3f} ms > {key}_ms {budget:g} ms "
                                  f"(over {runs} runs){weak}"))
    return problems


def check_load(load_ms: float | None, budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """``max_load_ms``, its one row, against the time the model took to load."""
    keyword = one_row(rows)
    budget = budgets.get(keyword)
    if budget is None:
        return []
    if load_ms is None:
        return [found(rows, keyword, None, budget, f"{backend}: load time was not measured ({keyword}={budget:g})")]
    if load_ms > budget:
        return [found(rows, keyword, load_ms, budget,
                      f"{backend}: load time {load_ms:.2f} ms > {keyword} {budget:g} ms")]
    return []


def check_drift(drift: float | None, budgets: Budgets, per_process: Sequence[float | None], backend: str,
                probe_drift: float | None = None, *, rows: Rows) -> list[Finding]:
    """``max_drift``, its one row: the runs of the last fifth of the timed time against those of the
    first fifth (``drift``: the geometric mean over the measuring processes, ``per_process`` each
    one's figure) must not be slower than the budget. With several processes the drift must also be
    significant over their spread (a one-sample t-test on log drift, as the gate judges latency), so
    one process hit by an interrupt storm in one window does not fail an unchanged model. Where the
    machine probe slowed down over the same windows (``probe_drift`` > 1: other load, frequency), the
    model is judged by its drift divided by the probe's, as the gate divides out a slower machine: a
    busy CI runner read drift 1.54 on an unchanged 7 us model while its probe drifted 1.18 (1.30 of
    the model's own)."""
    keyword = one_row(rows)
    budget = budgets.get(keyword)
    if budget is None:
        return []
    if drift is None:
        return [found(rows, keyword, None, budget,
                      f"{backend}: drift was not measured ({keyword}={budget:g}): the first and last fifth of "
                      f"each process's timed runs must last {DRIFT_MIN_WINDOW_S:g} s with {DRIFT_MIN_WINDOW_RUNS} runs "
                      f"at least (a {keyword} test times {DRIFT_MIN_TIME_S:g} s per process; a slow model needs "
                      f"runs>={DRIFT_MIN_WINDOW_RUNS / DRIFT_WINDOW_FRACTION:.0f})")]
    machine_slowdown = probe_drift if probe_drift is not None and probe_drift > 1 else 1.0
    if drift <= budget or drift / machine_slowdown <= budget:
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
    return [found(rows, keyword, drift, budget,
                  f"{backend}: drift {drift:.3f} > {keyword} {budget:g} (median run of the last fifth of the timed "
                  f"time over the first fifth, {evidence}); the model got slower while it ran: thermal throttling, "
                  f"a growing cache or allocation, or a busy machine{machine}")]


def check_memory(peak_mb: float | None, budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """``peak_memory_mb``, its one row, against the peak resident memory over the runtime's baseline."""
    keyword = one_row(rows)
    budget = budgets.get(keyword)
    if budget is None:
        return []
    if peak_mb is None:
        return [found(rows, keyword, None, budget,
                      f"{backend}: peak memory could not be measured here ({keyword}={budget:g})")]
    if peak_mb > budget:
        return [found(rows, keyword, peak_mb, budget,
                      f"{backend}: peak memory {peak_mb:.1f} MB over the runtime's baseline > {keyword} {budget:g} MB")]
    return []


def check_memory_growth(kb_per_run: float | None, mb_per_min: float | None, budgets: Budgets,
                        backend: str, *, rows: Rows) -> list[Finding]:
    """``max_memory_growth_kb_per_run``, its one row: resident memory must not keep growing over the
    timed runs (a leak: the first on-device incident). Per run, so a machine's speed does not move it."""
    keyword = one_row(rows)
    budget = budgets.get(keyword)
    if budget is None:
        return []
    if kb_per_run is None:
        return [found(rows, keyword, None, budget,
                      f"{backend}: memory growth could not be measured here (too few readings of resident "
                      f"memory; {keyword}={budget:g})")]
    if kb_per_run > budget:
        per_min = f", {mb_per_min:.1f} MB per minute of runs" if mb_per_min is not None else ""
        return [found(rows, keyword, kb_per_run, budget,
                      f"{backend}: resident memory grew {kb_per_run:.1f} KB per run over the timed runs{per_min} "
                      f"(the median process's slope) > {keyword} {budget:g} KB: a leak")]
    return []
