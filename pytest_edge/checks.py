"""Budget checks as pure functions: measurements and budgets in, violation messages out."""

from __future__ import annotations

from typing import Any, Mapping

from .backends import Coverage

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


def check_memory(peak_mb: float | None, budget: float | None, backend: str) -> list[str]:
    if budget is None:
        return []
    if peak_mb is None:
        return [f"{backend}: peak memory could not be measured here (peak_memory_mb={budget:g})"]
    if peak_mb > budget:
        return [f"{backend}: peak memory {peak_mb:.1f} MB over the runtime's baseline > "
                f"peak_memory_mb {budget:g} MB"]
    return []


def check_baseline(record: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                   max_regression: float) -> list[str]:
    """Latency or memory worse by more than ``max_regression``, or coverage lower, than before."""
    if baseline is None:
        return []
    backend = record["backend"]
    problems = []
    figures = [
        ("P50 latency", ("latency_ms", "p50"), "ms"),
        ("P99 latency", ("latency_ms", "p99"), "ms"),
        ("peak memory", ("peak_memory_mb",), "MB"),
    ]
    for label, path, unit in figures:
        new, old = _dig(record, path), _dig(baseline, path)
        if new is None or old is None or old <= 0:
            continue
        change = new / old - 1
        if change > max_regression:
            problems.append(f"{backend}: {label} {new:.3f} {unit} is {change:+.1%} against the baseline "
                            f"{old:.3f} {unit} (allowed +{max_regression:.0%})")
    new_cov, old_cov = _dig(record, ("coverage", "fallback")), _dig(baseline, ("coverage", "fallback"))
    if new_cov is not None and old_cov is not None and new_cov > old_cov + 1e-12:
        problems.append(f"{backend}: delegate coverage dropped: fallback {new_cov:.1%} against the "
                        f"baseline {old_cov:.1%}")
    return problems


def _dig(data: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data
