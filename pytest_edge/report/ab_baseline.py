"""A/B mode in the reports: the baseline twins measured in this job, as a baseline report.

In A/B mode (``--edge-baseline-models``) the baseline is not a stored report: each twin artifact
is measured in this job, alternately with the tested one. Its figures travel in the record
(``baseline_check["twin"]``), and :func:`report_baseline` turns them into a report of the same
shape as a stored baseline, so the HTML page ("Against the baseline", the dashed ECDF) and the
Markdown summary (regressions) show the change exactly as they do against stored numbers.
"""

from __future__ import annotations

from pathlib import PurePath

from ..core.baseline_check import TwinFigures
from ..core.generation_record import GenerationRecord
from ..core.record import Record, Verdict
from .json_report import Report


def twin_baseline(report: Report) -> Report | None:
    """A baseline report made of the twins of the report's A/B-gated records; None when no record
    was gated A/B (or the report comes from a pytest-edge that did not keep the twin's figures)."""
    records = []
    sources = set()
    for record in report.records:
        check = record.baseline_check
        if check is None or check.mode != "ab" or check.twin is None:
            continue
        sources.add(str(PurePath("?" if check.baseline is None else check.baseline).parent))  # the twins' folder
        # A counted twin's figures are its counts: of what the pages draw it has the coverage only.
        twin = check.twin if isinstance(check.twin, TwinFigures) else TwinFigures(coverage=check.twin.coverage)
        # The twin's figures as the record a stored report would hold: measured, every figure written.
        records.append(Record(record.test, record.model, record.backend, Verdict.PASSED, latency_ms=twin.latency_ms,
                              latency_quantiles_ms=twin.latency_quantiles_ms, peak_memory_mb=twin.peak_memory_mb,
                              steady_memory_mb=twin.steady_memory_mb, load_ms=twin.load_ms,
                              first_inference_ms=twin.first_inference_ms, coverage=twin.coverage,
                              measured_runs=twin.measured_runs, artifact_bytes=twin.artifact_bytes, npu=twin.npu,
                              generation=None if twin.generation is None else GenerationRecord(measured=twin.generation),
                              checked=True))
    if not records:
        return None
    return Report(records, report.machine, "this job (A/B against " + ", ".join(sorted(sources)) + ")", report.schema)


def report_baseline(report: Report, baseline: Report | None) -> Report | None:
    """The baseline the pages show: the stored one when given, else the A/B twins of this job."""
    return baseline if baseline is not None else twin_baseline(report)
