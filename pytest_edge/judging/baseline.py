"""What the merge gate compares a measurement against: a stored report's record of the same test or
model (``--edge-baseline``), or an A/B twin's measurement made into such a record
(``--edge-baseline-models``), and what a record keeps of its twin."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..core.sizes import artifact_size


def find_baseline(baseline: Mapping[str, Any] | None, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The baseline record of a stored report that ``record`` is compared against: the same test,
    else the same model (its key) on the same backend."""
    if not baseline:
        return None
    same_model = None
    for old in baseline.get("records", []):
        if old.get("test") == record["test"]:
            return old
        if old.get("model", {}).get("name") == record["model"]["name"] and old.get("backend") == record["backend"]:
            same_model = same_model or old
    return same_model


def twin_baseline(backend: str, twin: Path, measured: Mapping[str, Any], coverage: dict[str, Any] | None,
                  rootdir: Path) -> tuple[dict[str, Any], str]:
    """A/B mode: the twin artifact's figures as the baseline record a stored report would hold
    (timed or counted, its coverage and size), and how the gate's messages name it."""
    baseline = {"backend": backend, **measured, "coverage": coverage, "artifact_bytes": artifact_size(twin, backend)[0]}
    return baseline, os.path.relpath(twin, rootdir)


# The figures the pages compare and draw (report/: html_report.figure_changes, the ECDF and memory charts).
TWIN_FIGURES = ("latency_ms", "latency_quantiles_ms", "peak_memory_mb", "steady_memory_mb", "load_ms",
                "first_inference_ms", "coverage", "measured_runs", "artifact_bytes")


def twin_figures(measured: Mapping[str, Any]) -> dict[str, Any]:
    """What a record keeps of its twin's measurement (not the per-process samples)."""
    return {key: measured.get(key) for key in TWIN_FIGURES}
