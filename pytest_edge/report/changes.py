"""A report's records against a baseline report: where each record ran, and which figures changed
or regressed by the merge gate's own rules (so a page never calls "regressed" what the gate passes)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..backends import split_device
from ..measurement.regressions import latency_regressions, resource_regressions
from ..record import dig
from ..marker import parse_percent
from .json_report import find_baseline

# The allowed regression against a baseline unless a project sets edge_max_regression (and the
# default of the report commands' --max-regression), as users write it and as a fraction.
MAX_REGRESSION = "10%"
DEFAULT_MAX_REGRESSION = parse_percent(MAX_REGRESSION)


def device_label(record: Mapping[str, Any]) -> str:
    """Where a record ran: the merged report's machine label, then the device name (from
    ``device`` or the ``@device`` suffix of the backend); "local" for neither."""
    parts = [str(record["machine"])] if record.get("machine") else []
    device = dig(record, "device", "name") or split_device(record["backend"])[1]
    if device and device != "local":
        parts.append(str(device))
    return " / ".join(parts) or "local"


def base_backend(record: Mapping[str, Any]) -> str:
    return split_device(record["backend"])[0]


@dataclass(frozen=True)
class FigureChange:
    """One figure of a record against its baseline record."""

    figure: str
    old: float
    new: float
    relative: bool  # latency, memory: a ratio; fallback: a difference of fractions
    regressed: bool

    @property
    def delta(self) -> float:
        if not self.relative:
            return self.new - self.old
        return self.new / self.old - 1 if self.old else (math.inf if self.new else 0.0)

    def text(self) -> str:
        if not self.relative:
            return f"{self.delta * 100:+.1f} pp"
        return "new" if math.isinf(self.delta) else f"{self.delta:+.1%}"


FIGURES: list[tuple[str, Callable[[Mapping[str, Any]], Any], bool]] = [
    ("P50", lambda r: dig(r, "latency_ms", "p50"), True),
    ("P99", lambda r: dig(r, "latency_ms", "p99"), True),
    ("peak memory", lambda r: r.get("peak_memory_mb"), True),
    ("fallback", lambda r: dig(r, "coverage", "fallback"), False),
    ("artifact size", lambda r: r.get("artifact_bytes"), True),
]


# The merge gate's name of each figure (checks.Regression.figure).
_GATE_FIGURES = {"P50": "P50 latency", "P99": "P99 latency", "peak memory": "peak memory",
                 "fallback": "delegate coverage", "artifact size": "artifact size"}


def figure_changes(record: Mapping[str, Any], old: Mapping[str, Any] | None,
                   max_regression: float = DEFAULT_MAX_REGRESSION) -> list[FigureChange]:
    """P50, P99, peak memory and fallback against the baseline record, where both have them. A
    figure is marked regressed by the merge gate's own rules against stored numbers (checks.py):
    latency above ``max_regression`` and significant over the processes (P99 is never gated
    against stored numbers), memory above it and by more than 1 MB, fallback when it rose at all.
    So a page never calls "regressed" what the gate would pass."""
    if not old:
        return []
    flagged: set[str] = set()
    if record.get("backend"):
        latency, _ = latency_regressions(record, old, max_regression)
        flagged = {r.figure for r in latency + resource_regressions(record, old, max_regression)}
    changes = []
    for figure, get, relative in FIGURES:
        new_value, old_value = get(record), get(old)
        if not isinstance(new_value, (int, float)) or not isinstance(old_value, (int, float)):
            continue
        changes.append(FigureChange(figure, float(old_value), float(new_value), relative,
                                    _GATE_FIGURES[figure] in flagged))
    return changes


def regressions(report: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                max_regression: float = DEFAULT_MAX_REGRESSION) -> list[tuple[Mapping[str, Any], FigureChange]]:
    """Every regressed figure of the report's records against the baseline report."""
    if not baseline:
        return []
    found = []
    for record in report.get("records", []):
        if record.get("verdict") == "skipped":
            continue
        found += [(record, c) for c in figure_changes(record, find_baseline(baseline, record), max_regression)
                  if c.regressed]
    return found
