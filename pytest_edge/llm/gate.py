"""The merge gate on generation figures: TTFT P50 and TPOT P50 of each fresh process against a
baseline, with the package's statistics (``edge_max_regression`` and significance):

- **A/B** (``--edge-baseline-models=DIR``): the twin of the artifact in DIR (same file name, its
  own ``<stem>.json`` beside it, or this one's) measured alternately with it in this job, as pairs;
- **stored** (``--edge-baseline=REPORT``): the per-process figures of the same test and backend in
  an earlier report (its ``llm.processes``), Welch's test.

A figure fails when it is more than the allowed regression slower *and* significant.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..measurement.stats import compare_groups, compare_pairs
from ..errors import EdgeUsageError
from .config import LlmConfig, read_config

GATED = (("ttft_p50_ms", "TTFT P50"), ("tpot_p50_ms", "TPOT P50"))


def twin_of(baseline_models: Path | None, artifact: Path) -> Path | None:
    """The baseline twin of ``artifact`` in the A/B folder, or None."""
    if baseline_models is None:
        return None
    twin = Path(baseline_models) / Path(artifact).name
    return twin if twin.is_file() and twin.resolve() != Path(artifact).resolve() else None


def twin_config(twin: Path, fallback: LlmConfig) -> LlmConfig:
    """The twin's own configuration (its exporter's files beside it), else the tested artifact's."""
    try:
        return read_config(twin)
    except EdgeUsageError:
        return fallback


def stored_processes(baseline: Mapping[str, Any] | None, test: str, backend: str) -> list[dict[str, Any]] | None:
    """The per-process figures of the same test on the same backend in a stored report."""
    for record in (baseline or {}).get("records", []):
        if record.get("test") == test and record.get("backend") == backend:
            return ((record.get("llm") or {}).get("processes")) or None
    return None


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def regressions(backend: str, new: Sequence[Mapping[str, Any]], old: Sequence[Mapping[str, Any]],
                max_regression: float, paired: bool, what: str) -> tuple[list[str], dict[str, Any]]:
    """(failures naming backend, figure, both values and the allowed regression; a summary)."""
    failures, summary = [], {"mode": "ab" if paired else "stored", "baseline": what}
    for key, name in GATED:
        a = [p[key] for p in new if p.get(key)]
        b = [p[key] for p in old if p.get(key)]
        if not a or not b or (paired and len(a) != len(b)):
            continue
        change = compare_pairs(a, b) if paired else compare_groups(b, a)
        summary[key] = {"new": _geomean(a), "baseline": _geomean(b), "ratio": change.ratio,
                        "significant": change.significant}
        if change.exceeds(max_regression):
            failures.append(f"{backend}: {name} {_geomean(a):.3g} ms is {change.describe()} against {what} "
                            f"{_geomean(b):.3g} ms (allowed +{max_regression:.0%})")
    return failures, summary
