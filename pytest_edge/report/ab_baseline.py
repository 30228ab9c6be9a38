"""A/B mode in the reports: the baseline twins measured in this job, as a baseline report.

In A/B mode (``--edge-baseline-models``) the baseline is not a stored report: each twin artifact
is measured in this job, alternately with the tested one. Its figures travel in the record
(``baseline_check["twin"]``), and :func:`report_baseline` turns them into a report of the same
shape as a stored baseline, so the HTML page ("Against the baseline", the dashed ECDF) and the
Markdown summary (regressions) show the change exactly as they do against stored numbers.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping

from ..core.record import Verdict
from ..judging.baseline import TWIN_FIGURES  # the twin's figures the gate keeps on the record


def twin_baseline(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """A baseline report made of the twins of the report's A/B-gated records; None when no record
    was gated A/B (or the report comes from a pytest-edge that did not keep the twin's figures)."""
    records = []
    sources = set()
    for record in report.get("records", []):
        check = record.get("baseline_check") or {}
        twin = check.get("twin")
        if check.get("mode") != "ab" or not isinstance(twin, Mapping):
            continue
        sources.add(str(PurePath(str(check.get("baseline", "?"))).parent))  # the twins' folder
        records.append({"test": record["test"], "model": record["model"], "backend": record["backend"],
                        "verdict": str(Verdict.PASSED), **{k: twin.get(k) for k in TWIN_FIGURES}})
    if not records:
        return None
    return {"schema": report.get("schema"), "created": "this job (A/B against " + ", ".join(sorted(sources)) + ")",
            "machine": report.get("machine"), "records": records}


def report_baseline(report: Mapping[str, Any], baseline: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The baseline the pages show: the stored one when given, else the A/B twins of this job."""
    return baseline if baseline is not None else twin_baseline(report)
