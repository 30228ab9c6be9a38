"""A record's ``baseline_check``: the merge gate's summary as the record keeps it (docs/gate.md), typed
(issue #48 item 4). The gate (judging/) fills it in as it decides; the record writes it as the report
has always held it, each key only where the gate set it, in one order for every kind and mode (a new
model's: mode, new, looked_for, folder; a judged one's: mode, baseline, remeasured, [counted], compared,
[the counted ratios], verdict, [twin], [folder]; then the gate's inconclusive warnings, notes and
findings). A stored report's is read leniently, another version's keys kept and written back last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .. import codec
from ..backends.compiled import Compilation
from ..measurement.counts import CountedMeasurement
from .generation_figures import GenerationFigures
from .record_blocks import RecordCoverage
from .verdicts import GateVerdict


@codec.layout(lenient=True)
@dataclass(frozen=True)
class GateFinding:
    """One figure the merge gate failed or left inconclusive, as the gate decided it: old and new
    value, the threshold, the statistic, the verdict and the rule. It is kept on the record
    (``baseline_check.findings``) and every report renders it; none judges a figure again. Read
    leniently from a stored report (whose reader refused a verdict of none of GateVerdict's)."""

    figure: str = ""  # the gate's name: "P50 latency", "peak memory", "delegate coverage", ...
    verdict: GateVerdict = GateVerdict.FAILED  # failed or inconclusive; accepted where an acceptance passes it
    old: float | None = None
    new: float | None = None
    threshold: float | None = None
    statistic: str | None = None
    rule: str = ""
    message: str = ""
    # The record keeps codec.to_json(finding): these keys in this order, the verdict as its string.


@dataclass(frozen=True)
class TwinFigures(codec.StoredBlock):
    """What an A/B record keeps of its twin's measurement or compilation (not the per-process
    samples): the figures the pages compare and draw (report/ab_baseline.py makes them a baseline
    record), each written, null where the twin has none."""

    latency_ms: dict[str, float] | None = None
    latency_quantiles_ms: list[float] | None = None
    peak_memory_mb: float | None = None
    steady_memory_mb: float | None = None
    load_ms: float | None = None
    first_inference_ms: float | None = None
    coverage: RecordCoverage | None = None
    measured_runs: int | None = None
    artifact_bytes: int | None = None
    npu: Compilation | None = None  # a compile-time target's compiler result
    generation: GenerationFigures | None = None  # a decoder's: its generation's measured figures (TTFT, TPOT, ...)


# The figures the pages compare and draw, as a stored record holds them (TwinFigures' keys: report/ab_baseline.py).
TWIN_FIGURES = tuple(f.name for f in fields(TwinFigures) if f.name != "unknown")


@dataclass(frozen=True)
class CountedTwin(codec.StoredBlock):
    """A counted A/B record's twin (--edge-count=instructions): its counts and its coverage."""

    counted: CountedMeasurement | None = None
    coverage: RecordCoverage | None = None


def _read_twin(value: Any) -> TwinFigures | CountedTwin:
    if not isinstance(value, Mapping):
        raise ValueError("expected an object")
    return codec.from_json(CountedTwin if "counted" in value else TwinFigures, value, "the twin")


@codec.layout(rest="unknown", lenient=True)
@dataclass
class BaselineCheck:
    """The merge gate's summary on one record: its mode (``ab`` or ``stored``), a new model's flag and
    what was looked for, the baseline's name, whether a figure was measured again, counted mode's
    flag and ratios, the figures compared, the verdict, the A/B twin's figures, the A/B folder or
    stored report; on the record, the gate's inconclusive warnings, notes and findings."""

    mode: str | None = codec.optional()
    new: bool | None = codec.optional()
    looked_for: str | None = codec.optional()
    baseline: str | None = codec.optional()
    remeasured: bool | None = codec.optional()
    counted: bool | None = codec.optional()
    compared: list[str] | None = codec.optional()
    instructions_ratio: float | None = codec.optional()
    least_run_ratio: float | None = codec.optional()
    verdict: GateVerdict | None = codec.optional()
    twin: TwinFigures | CountedTwin | None = codec.optional(decode=_read_twin)
    folder: str | None = codec.optional()
    inconclusive: list[str] | None = codec.optional()
    notes: list[str] | None = codec.optional()
    findings: list[GateFinding] | None = codec.optional()
    unknown: dict[str, Any] = field(default_factory=dict)  # another version's keys, written back


__all__ = ["TWIN_FIGURES", "BaselineCheck", "CountedTwin", "GateFinding", "TwinFigures"]
