"""A/B mode in the reports: the baseline twins measured in this job, as a baseline report.

In A/B mode (``--edge-baseline-models``) the baseline is not a stored report: each twin artifact
is measured in this job, alternately with the tested one. Its figures travel in the record
(``baseline_check["twin"]``), and :func:`report_baseline` turns them into a report of the same
shape as a stored baseline, so the HTML page ("Against the baseline", the dashed ECDF) and the
Markdown summary (regressions) show the change exactly as they do against stored numbers.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Mapping

from .. import codec
from ..core.record import Record, Verdict
from ..core.baseline_check import TWIN_FIGURES  # the twin's figures the gate keeps on the record
from .json_report import Report


def _gate_check(record: Record) -> Mapping[str, object]:
    """The record's ``baseline_check`` (the gate's summary), the one place this module reads it."""
    return codec.to_json(record.baseline_check) if record.baseline_check is not None else {}  # until read typed


def twin_baseline(report: Report) -> Report | None:
    """A baseline report made of the twins of the report's A/B-gated records; None when no record
    was gated A/B (or the report comes from a pytest-edge that did not keep the twin's figures)."""
    records = []
    sources = set()
    for record in report.records:
        check = _gate_check(record)
        twin = check.get("twin")
        if check.get("mode") != "ab" or not isinstance(twin, Mapping):
            continue
        sources.add(str(PurePath(str(check.get("baseline", "?"))).parent))  # the twins' folder
        # The twin's figures as the record a stored report would hold (its npu block read as one's).
        found = Record.from_json({"test": record.test, "model": record.model.to_json(), "backend": record.backend,
                                  "verdict": str(Verdict.PASSED), **{k: twin.get(k) for k in TWIN_FIGURES}},
                                 f"the A/B twin of {record.test}")
        found.checked = True  # measured: every figure written, as a stored record's
        records.append(found)
    if not records:
        return None
    return Report(records, report.machine, "this job (A/B against " + ", ".join(sorted(sources)) + ")", report.schema)


def report_baseline(report: Report, baseline: Report | None) -> Report | None:
    """The baseline the pages show: the stored one when given, else the A/B twins of this job."""
    return baseline if baseline is not None else twin_baseline(report)
