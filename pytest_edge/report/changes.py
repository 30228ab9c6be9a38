"""A report's records against a baseline report: where each record ran, and which figures changed.
Where the merge gate ran, a figure is regressed when the gate's findings on the record say so (the
verdict is written once, by the gate); where none ran, figures are compared and said to be a
comparison (so a page never calls "regressed" what the gate passed)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..backends import split_device
from ..judging.figures import GateFigures
from ..judging.regressions import (ARTIFACT_SIZE, DELEGATE_COVERAGE, GENERATION_FIGURES, LATENCY_FIGURES,
                                       PEAK_MEMORY, latency_regressions, resource_regressions)
from ..core.baseline_check import GateFinding
from ..core.record import GateVerdict, Record, Verdict
from ..units import parse_percent
from ..core.settings import MAX_REGRESSION
from . import generation
from .json_report import Report
from .table import machine_label

# The allowed regression against a baseline unless a project sets edge_max_regression (settings'
# MAX_REGRESSION, as users write it), as a fraction.
DEFAULT_MAX_REGRESSION = parse_percent(MAX_REGRESSION)


def device_label(record: Record) -> str:
    """Where a record ran: the merged report's machine label, then the device name (from
    ``device`` or the ``@device`` suffix of the backend); "local" for neither."""
    label = machine_label(record)
    parts = [label] if label else []
    device = (record.device.name if record.device is not None else None) or split_device(record.backend)[1]
    if device and device != "local":
        parts.append(str(device))
    return " / ".join(parts) or "local"


def base_backend(record: Record) -> str:
    return split_device(record.backend)[0]


@dataclass(frozen=True)
class FigureChange:
    """One figure of a record against its baseline record. ``regressed``: the merge gate failed
    this figure in the run that wrote the record (its findings); ``beyond``: where no gate ran, the
    figure moved past the threshold by the stored-numbers comparison: a comparison, not a verdict."""

    figure: str
    old: float
    new: float
    relative: bool  # latency, memory: a ratio; fallback: a difference of fractions
    regressed: bool
    beyond: bool = False
    inconclusive: bool = False

    @property
    def delta(self) -> float:
        if not self.relative:
            return self.new - self.old
        return self.new / self.old - 1 if self.old else (math.inf if self.new else 0.0)

    def text(self) -> str:
        if not self.relative:
            return f"{self.delta * 100:+.1f} pp"
        return "new" if math.isinf(self.delta) else f"{self.delta:+.1%}"

    @property
    def marked(self) -> bool:
        """Shown as a regression: failed by the gate, or past the threshold where no gate judged."""
        return self.regressed or self.beyond


FIGURES: list[tuple[str, Callable[[Record], float | None], bool]] = [
    ("P50", lambda r: (r.latency_ms or {}).get("p50"), True),
    ("P99", lambda r: (r.latency_ms or {}).get("p99"), True),
    ("peak memory", lambda r: r.peak_memory_mb, True),
    ("fallback", lambda r: r.coverage.fallback if r.coverage is not None else None, False),
    ("artifact size", lambda r: r.artifact_bytes, True),
    # A decoder's timed figures, as the gate judges them (per fresh process; here the pooled P50)
    ("TTFT P50", lambda r: generation.median_ms(r, "ttft"), True),
    ("TPOT P50", lambda r: generation.median_ms(r, "tpot"), True),
]


# The merge gate's name of each figure (judging.regressions.Regression.figure).
_GATE_FIGURES = {"P50": LATENCY_FIGURES[0].name, "P99": LATENCY_FIGURES[1].name, "peak memory": PEAK_MEMORY,
                 "fallback": DELEGATE_COVERAGE, "artifact size": ARTIFACT_SIZE,
                 **{f.name: f.name for f in GENERATION_FIGURES}}


def gate_judged(record: Record) -> bool:
    """A merge gate ran on this record (its verdict and findings are on it)."""
    return record.baseline_check is not None and record.baseline_check.verdict is not None


def _findings(record: Record) -> list[GateFinding]:
    """The gate's findings on the record (the figures it failed, left inconclusive or accepted)."""
    return (record.baseline_check.findings or []) if record.baseline_check is not None else []


def gate_findings(record: Record, verdict: GateVerdict) -> set[str]:
    """The gate's figure names that the gate gave ``verdict`` (failed, inconclusive) on this record.
    A record of a pytest-edge before findings has none: no figure is marked (its verdict column and
    violations still say what failed), rather than guessing from the messages' text."""
    return {f.figure for f in _findings(record) if f.verdict == verdict}


def figure_changes(record: Record, old: Record | None,
                   max_regression: float = DEFAULT_MAX_REGRESSION, gates: bool = True) -> list[FigureChange]:
    """P50, P99, peak memory, fallback and artifact size against the baseline record, where both have
    them. Where a merge gate ran on the record, a figure is regressed exactly when the gate failed it
    (its findings): nothing judges it a second time. Where none ran (a stored report given to the
    report commands), a figure past the threshold by the gate's stored-numbers rules is ``beyond``:
    latency above ``max_regression`` and significant over the processes (P99 never), memory above it
    and by more than 1 MB, fallback when it rose at all. ``gates=False``: ``old`` is not the baseline
    the gate used (another report given to the report commands), so only the comparison applies."""
    if old is None:
        return []
    judged = gates and gate_judged(record)
    failed = gate_findings(record, GateVerdict.FAILED) if judged else set()
    undecided = gate_findings(record, GateVerdict.INCONCLUSIVE) if judged else set()
    compared: set[str] = set()
    if not judged and record.backend:
        # Both records' JSON parsed once into what the gate reads (its parser reads a record's JSON, as
        # a stored report holds it), and judged by the gate's own rules.
        test = record.test
        mine = GateFigures.from_json(record.to_json(), source=test)
        theirs = GateFigures.from_json(old.to_json(), source=f"baseline of {test}")
        view = generation.decoder_gate_figures(record, source=test)
        old_view = generation.decoder_gate_figures(old, source=f"baseline of {test}")
        if view is not None and old_view is not None:  # a decoder: its TTFT and TPOT, per process
            latency, _ = latency_regressions(view, old_view, max_regression, figures=GENERATION_FIGURES)
        else:
            latency, _ = latency_regressions(mine, theirs, max_regression)
        compared = {r.figure for r in latency + resource_regressions(mine, theirs, max_regression)}
    # Where the gate judged a figure, its values (a P50 is the geometric mean of the process P50s,
    # not the pooled runs' P50): the page shows the percentage the failure message gives.
    judged_values = {f.figure: (f.old, f.new) for f in (_findings(record) if judged else [])
                     if isinstance(f.old, (int, float)) and isinstance(f.new, (int, float))}
    changes = []
    for figure, get, relative in FIGURES:
        name = _GATE_FIGURES[figure]
        old_value, new_value = judged_values.get(name, (get(old), get(record)))
        if not isinstance(new_value, (int, float)) or not isinstance(old_value, (int, float)):
            continue
        changes.append(FigureChange(figure, float(old_value), float(new_value), relative, name in failed,
                                    beyond=name in compared, inconclusive=name in undecided))
    # A figure the gate failed that the pages do not tabulate (counted instructions): as the gate said it.
    for finding in _findings(record) if judged else []:
        if (finding.verdict == GateVerdict.FAILED and finding.figure not in _GATE_FIGURES.values()
                and isinstance(finding.old, (int, float)) and isinstance(finding.new, (int, float))):
            changes.append(FigureChange(finding.figure, float(finding.old), float(finding.new), True, True))
    return changes


def regressions(report: Report, baseline: Report | None, max_regression: float = DEFAULT_MAX_REGRESSION,
                gates: bool = True) -> list[tuple[Record, FigureChange]]:
    """Every marked figure of the report's records against the baseline report: failed by the gate
    where one ran, past the threshold by comparison where none did (``FigureChange.regressed`` tells)."""
    if baseline is None:
        return []
    found = []
    for record in report.records:
        if record.verdict in (Verdict.SKIPPED, Verdict.DOES_NOT_CONVERT):
            continue
        found += [(record, c) for c in figure_changes(record, baseline.baseline_of(record), max_regression, gates)
                  if c.marked]
    return found
