"""What the merge gate compares a measurement against, decided once for every kind of check
(tensor, compile-time target, decoder) and both modes: the A/B twin in ``--edge-baseline-models``,
else the stored report's record (``--edge-baseline``), else the model is new in this change, else no
gate runs (:func:`choose_baseline`), and what each of those means for the gate (:func:`gated`). Also
what a record keeps of its twin for the pages."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..backends.arena import TensorArena
from ..backends.tensors import Coverage
from ..core.baseline_check import BaselineCheck, CountedTwin, TwinFigures
from ..core.record import Record
from ..core.record_blocks import ModelIdentity
from ..core.sizes import artifact_size
from ..files import relative_path
from ..measurement.counts import CountedMeasurement

if TYPE_CHECKING:
    from ..measurement.combined import TimedMeasurement
    from ..core.models import Model
    from ..core.settings import Settings
    from .gate import GateResult


class BaselineKind(str, Enum):
    TWIN = "twin"  # A/B: the twin artifact, measured or compiled in this job
    STORED = "stored"  # a record of the stored report
    NEW = "new"  # a gate runs and found neither: new in this change, listed, not judged
    NONE = "none"  # no gate asked for

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BaselineChoice:
    """The one decision of what a check is gated against. ``source`` names the baseline in the
    gate's messages (the twin's path, the stored record's test); ``stored`` is that record, as the
    stored report holds it; ``folder`` is the A/B folder or the stored report, as the pages name it;
    ``looked_for`` what a new model's gate looked for."""

    kind: BaselineKind
    twin: Path | None = None
    stored: Record | None = None
    source: str = ""
    folder: str = ""
    looked_for: str = ""
    mode: str = ""  # "ab" or "stored", as the record's baseline_check names it; "" without a gate

    @property
    def paired(self) -> bool:
        """A/B: the two sides are measured as pairs in this job."""
        return self.kind is BaselineKind.TWIN

    def new_result(self) -> "GateResult":
        """A gated model with neither twin nor stored record: new in this change, measured, not
        judged; the summary says what was looked for (a run where every model is new compared
        nothing and fails: report.table.gate_compared_nothing)."""
        from .gate import GateResult

        return GateResult(summary=BaselineCheck(mode=self.mode, new=True, looked_for=self.looked_for,
                                                folder=self.folder))


def gated(choice: BaselineChoice, judge: Callable[[BaselineChoice], "GateResult"]) -> "GateResult | None":
    """What the merge gate says on a check whose baseline is ``choice``, for every kind and mode:
    nothing where no gate runs (None), a new model listed and not judged, else ``judge``'s verdict
    against the twin or the stored record, with the folder or report the pages name."""
    if choice.kind is BaselineKind.NONE:
        return None
    if choice.kind is BaselineKind.NEW:
        return choice.new_result()
    result = judge(choice)
    if result.summary is not None:
        result.summary.folder = choice.folder
    return result


def twin_of(folder: Path | None, model: "Model", artifact: Path) -> Path | None:
    """The A/B twin of ``model``'s ``artifact``: the regular file at the artifact's place under
    ``folder`` (Model.twin), never the artifact itself (a folder gated against itself compares
    nothing)."""
    if folder is None:
        return None
    twin = model.twin(artifact, folder)
    return twin if twin.is_file() and twin.resolve() != Path(artifact).resolve() else None


def _report_path(settings: "Settings") -> str:
    return relative_path(settings.baseline_path, settings.rootdir) if settings.baseline_path else "the stored report"


def choose_baseline(settings: "Settings", model: "Model", artifact: Path, test_id: str,
                    backend: str) -> BaselineChoice:
    """Twin, stored, new or none, for every kind and mode: the twin where the A/B folder has one,
    else the stored report's record of the same test (else the same model on the same backend),
    else new where a gate runs, else none."""
    if not settings.gating:
        return BaselineChoice(BaselineKind.NONE)
    rootdir = settings.rootdir
    twin = twin_of(settings.baseline_models, model, artifact)
    if twin is not None:
        return BaselineChoice(BaselineKind.TWIN, twin=twin, source=os.path.relpath(twin, rootdir),
                              folder=os.path.relpath(settings.baseline_models, rootdir), mode="ab")
    stored = find_baseline(settings.baseline.records, test=test_id, model=model.key, backend=backend) \
        if settings.baseline is not None else None
    if stored is not None:
        return BaselineChoice(BaselineKind.STORED, stored=stored, source=stored.test,
                              folder=_report_path(settings), mode="stored")
    if settings.baseline_models is not None:
        return BaselineChoice(BaselineKind.NEW, mode="ab",
                              looked_for=os.path.relpath(model.twin(artifact, settings.baseline_models), rootdir),
                              folder=os.path.relpath(settings.baseline_models, rootdir))
    return BaselineChoice(BaselineKind.NEW, mode="stored", looked_for=f"{test_id}, or {model.key} on {backend}",
                          folder=_report_path(settings))


def find_baseline(records: Iterable[Record], *, test: str, model: str, backend: str) -> Record | None:
    """The stored record a check of ``test`` (``model``: its key, on ``backend``) is compared
    against: the record of the same test, else the first of the same model on the same backend. The
    one rule, for the gate and for the pages (report.json_report.Report.baseline_of)."""
    same_model = None
    for old in records:
        if old.test == test:
            return old
        if same_model is None and old.model.name == model and old.backend == backend:
            same_model = old
    return same_model


def twin_baseline(backend: str, twin: Path, measured: "TimedMeasurement | CountedMeasurement",
                  coverage: Coverage | None, rootdir: Path, arena: TensorArena | None = None) -> tuple[Record, str]:
    """A/B mode: the twin artifact's figures as the record a stored report would hold (timed or
    counted, its coverage, size and arena), and how the gate's messages name it."""
    source = os.path.relpath(twin, rootdir)
    size = artifact_size(twin, backend)[0]
    if isinstance(measured, CountedMeasurement):
        return Record(source, ModelIdentity(), backend, coverage=coverage, artifact_bytes=size, counted=measured,
                      arena=arena, checked=True), source
    return Record(source, ModelIdentity(), backend, coverage=coverage, artifact_bytes=size, arena=arena, checked=True,
                  latency_ms=measured.latency_ms, latency_quantiles_ms=measured.latency_quantiles_ms,
                  warmup_runs=measured.warmup_runs, measured_runs=measured.measured_runs, load_ms=measured.load_ms,
                  first_inference_ms=measured.first_inference_ms, peak_memory_mb=measured.peak_memory_mb,
                  steady_memory_mb=measured.steady_memory_mb, drift=measured.drift,
                  timing_under_load=measured.under_load, other_cores_busy=measured.other_cores_busy,
                  processes=measured.processes, process_spread=measured.process_spread), source


def twin_figures(twin: Record) -> TwinFigures | CountedTwin:
    """What a record keeps of its twin's measurement or compilation (not the per-process samples)."""
    if twin.counted is not None:
        return CountedTwin(twin.counted, twin.coverage)
    return TwinFigures(twin.latency_ms, twin.latency_quantiles_ms, twin.peak_memory_mb, twin.steady_memory_mb,
                       twin.load_ms, twin.first_inference_ms, twin.coverage, twin.measured_runs, twin.artifact_bytes,
                       twin.npu)
