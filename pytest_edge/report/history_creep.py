"""The creep alert over a run history (SPEC section 13, ``--edge-max-creep``, ``pytest-edge history
creep``): a figure of a (model, backend, device) that crept over its last runs, judged with the merge
gate's statistics, and the first run where it moved. Plain logic, no pytest."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..core.record import Record, is_finite_number
from ..judging.counted import AGREE
from ..judging.figures import GENERATION_FIGURES, LATENCY_FIGURES, GateFigures, TimedFigure
from ..judging.regressions import LATENCY_FLOOR_MS, MEMORY_FLOOR_MB
from ..measurement.stats import Change, compare_groups
from .generation import decoder_gate_figures
from .history_runs import Run
from .history_series import SeriesKey, series
from .record_figures import instructions


@dataclass(frozen=True)
class CreepFigure:
    """A figure the creep alert judges: its name (the gate's), how (``timed``: significance over the
    per-process figures, as the gate; ``memory``: the threshold and the gate's 1 MB floor; ``exact``:
    the threshold alone), and how it is read from a record (a timed figure: by the gate, its
    TimedFigure)."""

    name: str
    kind: str
    read: Callable[[Record], float | None] | None = None
    timed: TimedFigure | None = None


def _npu_memory(key: str) -> Callable[[Record], float | None]:
    return lambda record: record.npu.memories.get(key) if record.npu is not None else None


CREEP_FIGURES = (
    CreepFigure(LATENCY_FIGURES[0].name, "timed", timed=LATENCY_FIGURES[0]),
    *(CreepFigure(f.name, "timed", timed=f) for f in GENERATION_FIGURES),
    CreepFigure("peak memory", "memory", lambda record: record.peak_memory_mb),
    CreepFigure("artifact size", "exact", lambda record: record.artifact_bytes),
    CreepFigure("instructions", "exact", instructions),
    CreepFigure("SRAM", "exact", _npu_memory("sram")),
    CreepFigure("off-chip flash", "exact", _npu_memory("off_chip_flash")),
    CreepFigure("DRAM", "exact", _npu_memory("dram")),
)


def _gated(record: Record) -> GateFigures:
    """What the merge gate reads of ``record``, by its own parser (GateFigures reads a record's JSON,
    as it reads a stored report's): a decoder's, its generation's view."""
    return decoder_gate_figures(record) or GateFigures.from_json(record.to_json())


def _values(figure: CreepFigure, record: Record, figures: GateFigures) -> list[float]:
    """The figure's values in one run (``figures``: what the gate reads of its record): a timed
    figure's one per fresh process (the run's pooled figure where it kept none per process), else
    the one figure; [] where not measured."""
    if figure.timed is None:
        value = figure.read(record) if figure.read is not None else None
        return [float(value)] if is_finite_number(value) and value > 0 else []
    key = figure.timed.key
    per_process = [p.timed[key] for p in figures.processes if key in p.timed]
    fewest = min((p.runs for p in figures.processes if p.runs is not None), default=figures.measured_runs)
    if fewest is not None and fewest < figure.timed.min_runs:  # as the gate: too few runs to gate it
        return []
    if per_process:
        return per_process
    pooled = figures.pooled_ms.get(key)
    return [float(pooled)] if is_finite_number(pooled) and pooled > 0 else []


def _level(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class Creep:
    """A figure that crept over a window of runs: its series, the figure, the window's runs, the
    level of its first and last runs' groups, the gate's statistic (timed figures), and the first
    run where it moved."""

    key: SeriesKey
    figure: str
    runs: int
    early: float
    late: float
    change: Change | None
    first_moved: Run
    threshold: float

    @property
    def ratio(self) -> float:
        return self.late / self.early

    @property
    def message(self) -> str:
        model, backend, device = self.key
        evidence = f"; {self.change.describe().partition('(')[2].rstrip(')')}" if self.change else ""
        return (f"{model} on {backend} ({device}): {self.figure} crept {self.ratio - 1:+.1%} over the last {self.runs} "
                f"runs ({self.early:.6g} -> {self.late:.6g}, the first and last {max(1, self.runs // 3)} runs; "
                f"allowed +{self.threshold:.0%}{evidence}); first moved in the run of {self.first_moved.label}")


def judge_creep(runs: Sequence[Run], max_creep: float, window: int = 10) -> list[Creep]:
    """Every figure of every (model, backend, device) whose last ``window`` runs holding it crept: the
    last third of them against the first third (each at least one run), beyond ``max_creep`` and,
    for a timed figure, significant by the gate's test over their fresh processes
    (:func:`~pytest_edge.measurement.stats.compare_groups`) and above its floor; peak memory also
    above the gate's 1 MB floor. Fewer than three runs are not judged. The first run that moved is
    the earliest from which every run of the window lies above the window's first by more than 0.5 %
    (counted mode's agreement between processes, :data:`~pytest_edge.judging.counted.AGREE`)."""
    found = []
    for key, held in sorted(series(runs).items()):
        gated = [(run, record, _gated(record)) for run, record in held]
        for figure in CREEP_FIGURES:
            measured = [(run, values) for run, record, figures in gated if (values := _values(figure, record, figures))]
            measured = measured[-window:]
            if len(measured) < 3:
                continue
            side = max(1, len(measured) // 3)
            early = [v for _, values in measured[:side] for v in values]
            late = [v for _, values in measured[-side:] for v in values]
            early_level, late_level = _level(early), _level(late)
            # A creep moves the middle of the window too; noise that lifts the last third alone does not.
            middle = [v for _, values in measured[side:-side] for v in values]
            if middle and not early_level < _level(middle) < late_level:
                continue
            change = None
            if figure.kind == "timed":
                change = compare_groups(early, late)
                crept = change.exceeds(max_creep) and late_level - early_level > LATENCY_FLOOR_MS
            else:
                crept = late_level / early_level - 1 > max_creep
                if figure.kind == "memory":
                    crept = crept and late_level - early_level > MEMORY_FLOOR_MB
            if not crept:
                continue
            levels = [_level(values) for _, values in measured]
            above = levels[0] * (1 + AGREE)
            moved = next((k for k in range(1, len(levels)) if all(level > above for level in levels[k:])),
                         len(levels) - side)
            found.append(Creep(key, figure.name, len(measured), early_level, late_level, change,
                               measured[moved][0], max_creep))
    return found
