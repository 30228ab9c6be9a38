"""Budget checks as pure functions: measurements and budgets in, violation messages out (the
regressions against a baseline are in :mod:`.measurement.regressions`)."""

from __future__ import annotations

from typing import Mapping, Sequence

from .backends import Coverage
from .measurement.stats import compare_pairs
from .measurement.timing import (DRIFT_MIN_TIME_S, DRIFT_MIN_WINDOW_RUNS, DRIFT_MIN_WINDOW_S, DRIFT_WINDOW_FRACTION,
                                 MIN_RUNS)

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
            if runs is not None and runs < MIN_RUNS[key]:
                weak = (f" [weak evidence: {key.upper()} from only {runs} runs; "
                        f"use runs>={MIN_RUNS[key]}]")
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
    hit by an interrupt storm in one window does not fail an unchanged model. Where the machine probe
    slowed down over the same windows (``probe_drift`` > 1: other load, frequency), the model is
    judged by its drift divided by the probe's, as the gate divides out a slower machine: a busy CI
    runner read drift 1.54 on an unchanged 7 us model while its probe drifted 1.18 (1.30 of the model's own)."""
    if budget is None:
        return []
    if drift is None:
        return [f"{backend}: drift was not measured (max_drift={budget:g}): the first and last fifth of "
                f"each process's timed runs must last {DRIFT_MIN_WINDOW_S:g} s with {DRIFT_MIN_WINDOW_RUNS} runs "
                f"at least (a max_drift test times {DRIFT_MIN_TIME_S:g} s per process; a slow model needs "
                f"runs>={DRIFT_MIN_WINDOW_RUNS / DRIFT_WINDOW_FRACTION:.0f})"]
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


def check_sizes(artifact: str, artifact_bytes: int | None, runtime: str, runtime_bytes: int | None,
                max_artifact_mb: float | None, max_runtime_mb: float | None, backend: str,
                runtime_reason: str | None = None, artifact_reason: str | None = None) -> list[str]:
    """``max_artifact_mb`` against the artifact (with its external data), ``max_runtime_mb`` against
    the runtime's installed package; MB = 2**20 bytes."""
    problems = []
    for what, figure, budget, key, unknown in (
            (f"artifact {artifact}", artifact_bytes, max_artifact_mb, "max_artifact_mb",
             artifact_reason or "its size could not be read"),
            (f"runtime package {runtime}", runtime_bytes, max_runtime_mb, "max_runtime_mb",
             runtime_reason or "its size could not be read")):
        if budget is None:
            continue
        if figure is None:
            problems.append(f"{backend}: {what}: {unknown} ({key}={budget:g})")
        elif figure / 2**20 > budget:
            problems.append(f"{backend}: {what} is {figure / 2**20:.4g} MB ({figure} bytes) > {key} {budget:.4g} MB "
                            f"({round(budget * 2**20)} bytes)")
    return problems
