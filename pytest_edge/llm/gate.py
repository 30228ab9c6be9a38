"""The merge gate on generation figures, through the package's one gate
(:func:`pytest_edge.measurement.gate.run_gate`): TTFT P50 and TPOT P50 of each fresh process (and
peak memory) against a baseline, with its rules unchanged (docs/gate.md):

- **A/B** (``--edge-baseline-models=DIR``): the twin of the artifact in DIR (at the artifact's path
  under the folder its model's key is relative to: ``Model.twin``; its own configuration beside it,
  or this one's) measured alternately with it in this job, as pairs;
- **stored** (``--edge-baseline=REPORT``): the per-process figures of the same test and backend in
  an earlier report (its ``llm.processes``).

A figure above the threshold is measured again in fresh processes; it fails only when it is above
the threshold both times, the second measurement significant on its own, and both together too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.models import Model
from ..core.sizes import artifact_size
from ..errors import EdgeUsageError
from ..files import relative_path
from ..measurement.gate import AB_REMEASURE_PAIRS, GateResult, run_gate
from ..measurement.regressions import GENERATION_FIGURES
from ..backends.decoder_config import LlmConfig, read_config
from ..report.json_report import find_baseline

# rounds -> one pooled measurement per artifact, this one first, then its twin (probe.measure_rounds)
MeasureRounds = Callable[[int], "list[dict[str, Any]]"]


def twin_of(baseline_models: Path | None, model: Model, artifact: Path) -> Path | None:
    """The baseline twin of ``model``'s ``artifact`` in the A/B folder, or None."""
    if baseline_models is None:
        return None
    twin = model.twin(artifact, baseline_models)
    return twin if twin.is_file() and twin.resolve() != Path(artifact).resolve() else None


def twin_config(twin: Path, fallback: LlmConfig) -> LlmConfig:
    """The twin's own configuration (its exporter's files beside it), else the tested artifact's."""
    try:
        return read_config(twin)
    except EdgeUsageError:
        return fallback


def stored_record(baseline: Mapping[str, Any] | None, test: str, backend: str, model: str) -> dict[str, Any] | None:
    """The baseline record of a stored report, found as for every model (the same test, else the
    same model on the same backend: report.json_report.find_baseline), as the gate reads one: its
    per-process generation figures and its peak memory (None where it has no processes)."""
    record = find_baseline(baseline, {"test": test, "backend": backend, "model": {"name": model}})
    processes = ((record or {}).get("llm") or {}).get("processes")
    return {**as_gated(backend, {"processes": processes, "peak_memory_mb": record.get("peak_memory_mb")}),
            "artifact_bytes": record.get("artifact_bytes"), "model": record.get("model")} \
        if record and processes else None


def as_gated(backend: str, measured: Mapping[str, Any], artifact: Path | None = None,
             rootdir: Path | None = None) -> dict[str, Any]:
    """A measurement (probe.measure_rounds) of ``artifact`` as the gate reads a record: with the
    artifact's size, gated as every model's."""
    sized = {"artifact_bytes": artifact_size(artifact, backend)[0],
             "model": {"artifact": relative_path(artifact, rootdir or Path.cwd())}} if artifact is not None else {}
    return {"backend": backend, "processes": measured.get("processes") or [],
            "peak_memory_mb": measured.get("peak_memory_mb"), **sized}


def judge(backend: str, measured: Mapping[str, Any], baseline: Mapping[str, Any], *, paired: bool,
          measure_again: MeasureRounds, processes: int, max_regression: float, strict: bool,
          source: str, artifact: Path | None = None, rootdir: Path | None = None) -> GateResult:
    """The gate's decision on one measurement against the twin's (``paired``: ``baseline`` is the
    twin measured in the same rounds) or a stored record. ``measure_again(rounds)`` measures this
    artifact (and the twin, in A/B mode) again in fresh processes: at least AB_REMEASURE_PAIRS pairs
    in A/B mode, ``processes`` otherwise, as for every other model."""

    def remeasure() -> tuple[dict[str, Any], dict[str, Any] | None]:
        again, *twin_again = measure_again(max(processes, AB_REMEASURE_PAIRS) if paired else processes)
        return as_gated(backend, again, artifact, rootdir), (as_gated(backend, twin_again[0]) if twin_again else None)

    return run_gate(as_gated(backend, measured, artifact, rootdir), baseline, paired=paired, max_regression=max_regression,
                    strict=strict, remeasure=remeasure, source=source, figures=GENERATION_FIGURES)
