"""Timing and memory of a loaded model in fresh worker processes, and the regression gate that
compares them with a baseline (docs/measurement.md, docs/gate.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence, TypeVar

import numpy as np

from .. import codec
from ..backends import Coverage, split_device
from ..backends.arena import TensorArena
from .counter import Counter
from ..measurement.counts import CountedMeasurement
from .baseline import BaselineChoice, choose_baseline, gated, twin_baseline, twin_figures, twin_of
from .figures import GateFigures
from .gate import AB_REMEASURE_PAIRS, GateResult, run_gate
from ..measurement.lock import machine_measurement_lock
from ..measurement.combined import TimedMeasurement, combine_processes
from ..measurement.timing import ProcessTiming, round_order
from ..core.models import Model
from ..core.plan import Plan
from ..core.record import Record
from ..core.settings import Settings
from ..worker.client import BackendWorker
from ..worker.pool import ModelInfo, WorkerPool
from ..worker.protocol import Load, Loaded, Measure, reply_as

# CPU the rest of the machine used during the timed runs, in cores, from which a timing counts
# as taken under load.
LOAD_THRESHOLD_CORES = 0.5


class Measurer:
    """Measures each (model, backend, warmup, runs) once per session and keeps the result."""

    def __init__(self, settings: Settings, pool: WorkerPool) -> None:
        self.settings = settings
        self.pool = pool
        # Timed: combine_processes's measurement; counted (--edge-count=instructions): a CountedMeasurement.
        self.results: dict[tuple, TimedMeasurement | CountedMeasurement] = {}
        self.twin_results: dict[tuple, TimedMeasurement | CountedMeasurement] = {}
        self.twin_coverages: dict[tuple[str, str], Coverage | None] = {}
        self.twin_arenas: dict[tuple[str, str], TensorArena | None] = {}
        self.under_load = False  # some timed window of this session ran under load
        self.counter = Counter(settings, pool)  # --edge-count=instructions
        self.measured_any = False

    def forget(self, backend: str) -> None:
        self.results = {k: v for k, v in self.results.items() if k[0] != backend}

    def baseline_twin(self, model: Model, artifact: Path) -> Path | None:
        """The twin of ``model``'s ``artifact`` in --edge-baseline-models, if that folder has one
        (baseline.twin_of: the one rule for every kind)."""
        return twin_of(self.settings.baseline_models, model, artifact)

    def measure(self, info: ModelInfo, feeds: Sequence[np.ndarray],
                plan: Plan) -> TimedMeasurement | CountedMeasurement:
        """The measurement protocol, once per (model, backend, warmup, runs): ``processes`` fresh
        worker processes, each a real cold start whose memory peak inherits nothing from other
        models; with a baseline twin (A/B mode) the twin's processes alternate with these. Counted
        mode's is a CountedMeasurement (no timing, no load)."""
        key = (info.backend, info.key, plan.warmup, plan.runs, plan.min_time_s)
        if key not in self.results:
            feeds = info.feeds(feeds)
            twin = self.baseline_twin(plan.model, info.artifact)
            if self.settings.count:  # counted, not timed: under callgrind, in fresh processes whatever the isolation
                result, *twin_result = self.counter.rounds(info, [info.artifact, *([twin] if twin else [])], feeds, plan)
                if twin_result:
                    self.twin_results[key] = twin_result[0]
            elif not self.settings.isolated and twin is None:  # --edge-isolation=none: in this process, for debugging
                # (an A/B twin is measured in pairs of fresh processes whatever the isolation)
                result = self._in_process(info, feeds, plan)
            elif twin is not None:
                result, self.twin_results[key] = self.rounds(info, [info.artifact, twin], feeds, plan)
            else:
                (result,) = self.rounds(info, [info.artifact], feeds, plan)
            if isinstance(result, TimedMeasurement):  # a count does not depend on load
                self.under_load |= bool(result.under_load)
            self.measured_any = True
            self.results[key] = result
        return self.results[key]

    def _in_process(self, info: ModelInfo, feeds: Sequence[np.ndarray], plan: Plan) -> TimedMeasurement:
        with machine_measurement_lock(self.pool.board(split_device(info.backend)[1])):
            result = reply_as(ProcessTiming, Measure.op, self.pool.request(
                info.backend, Measure(info.key, list(feeds), plan.warmup, plan.runs, plan.min_time_s), info.artifact))
            result.load_ms = info.load_ms
            if result.peak_memory_mb is None and not result.hwm_reset:
                (fresh,) = self.rounds(info, [info.artifact], feeds, plan, processes=1)
                result.peak_memory_mb, result.steady_memory_mb = fresh.peak_memory_mb, fresh.steady_memory_mb
        return combine_processes([result], LOAD_THRESHOLD_CORES)

    def rounds(self, info: ModelInfo, artifacts: Sequence[Path], feeds: Sequence[np.ndarray], plan: Plan,
               processes: int | None = None) -> list[TimedMeasurement]:
        """``processes`` fresh workers per artifact, timed in rounds (see :func:`fresh_rounds`), one
        figure set per artifact."""
        results = fresh_rounds(self.pool, info.backend, artifacts, processes or self.settings.processes,
                               lambda worker, artifact: self._once(worker, info, artifact, feeds, plan))
        return [combine_processes(per_artifact, LOAD_THRESHOLD_CORES) for per_artifact in results]

    def _once(self, worker: BackendWorker, info: ModelInfo, artifact: Path, feeds: Sequence[np.ndarray],
              plan: Plan) -> ProcessTiming:
        shapes = codec.to_json(info.shapes)
        loaded = reply_as(Loaded, Load.op, worker.request(Load(info.key, str(artifact), info.threads, shapes,
                                                               with_coverage=False), artifact=str(artifact)))
        result = reply_as(ProcessTiming, Measure.op, worker.request(Measure(info.key, list(feeds), plan.warmup, plan.runs,
                                                                            plan.min_time_s), artifact=str(artifact)))
        result.load_ms = loaded.load_ms
        return result

    def _twin_coverage(self, info: ModelInfo, twin: Path) -> Coverage | None:
        """Delegate coverage of a baseline twin on this backend, loaded once in the backend's shared
        worker. Keyed by backend and twin: litert and litert-ref load the same .tflite twin, and each
        record's twin is its own backend's (litert's fallback is not litert-ref's)."""
        key = (info.backend, str(twin))
        if key not in self.twin_coverages:
            shapes = codec.to_json(info.shapes)
            loaded = reply_as(Loaded, Load.op, self.pool.request(info.backend, Load(f"twin|{info.key}", str(twin),
                                                                                    info.threads, shapes), twin))
            self.twin_coverages[key] = loaded.coverage
            # What else the load says that a stored record holds: a microcontroller runtime's arena.
            self.twin_arenas[key] = loaded.arena
        return self.twin_coverages[key]

    def gate(self, info: ModelInfo, feeds: Sequence[np.ndarray], plan: Plan, live: Record) -> GateResult:
        """A/B against the twin artifact where --edge-baseline-models has one, else against the
        stored baseline record (baseline.choose_baseline, the one rule); a suspected latency
        regression is re-measured before it counts."""
        choice = choose_baseline(self.settings, plan.model, info.artifact, live.test, live.backend)
        return gated(choice, lambda choice: self._judge(info, feeds, plan, live, choice)) or GateResult()

    def _judge(self, info: ModelInfo, feeds: Sequence[np.ndarray], plan: Plan, live: Record,
               choice: BaselineChoice) -> GateResult:
        """The gate against the twin (measured with the artifact) or the stored record."""
        twin = choice.twin
        twin_measured = self.twin_results.get((info.backend, info.key, plan.warmup, plan.runs, plan.min_time_s))
        feeds = info.feeds(feeds)
        if self.settings.count:
            coverage = self._twin_coverage(info, twin) if twin is not None and twin_measured is not None else None
            return self.counter.gate(info, feeds, plan, live, choice, twin_measured, coverage)
        if twin is not None:
            if twin_measured is None:  # measure() measures the twin with the artifact: never met
                raise RuntimeError(f"the baseline twin {choice.source} of {info.artifact} was not measured")
            coverage = self._twin_coverage(info, twin)
            twin_record, source = twin_baseline(info.backend, twin, twin_measured, coverage, self.settings.rootdir,
                                                self.twin_arenas.get((info.backend, str(twin))))
            theirs = GateFigures.of_record(twin_record)

            def remeasure() -> tuple[GateFigures, GateFigures | None]:
                mine, theirs = self.rounds(info, [info.artifact, twin], feeds, plan,
                                           processes=max(self.settings.processes, AB_REMEASURE_PAIRS))
                return (GateFigures.of_measurement(info.backend, mine, source="measured again"),
                        GateFigures.of_measurement(info.backend, theirs, source=source))
        else:
            twin_record, source = None, choice.source
            assert choice.stored is not None  # neither a twin nor new: the stored report's record
            theirs = GateFigures.of_record(choice.stored)  # read as the live record is

            def remeasure() -> tuple[GateFigures, GateFigures | None]:
                (mine,) = self.rounds(info, [info.artifact], feeds, plan)
                return GateFigures.of_measurement(info.backend, mine, source="measured again"), None

        # Parsed once here, both sides: the gate reads GateFigures, never the JSON.
        result = run_gate(GateFigures.of_record(live), theirs,
                          paired=choice.paired, max_regression=self.settings.max_regression,
                          strict=self.settings.strict_timing, remeasure=remeasure, source=source,
                          p99_regression=self.settings.p99_regression)
        assert result.summary is not None  # run_gate always summarizes
        if twin_record is not None:  # the twin's figures, for the reports' "against the baseline" (ab_baseline)
            result.summary.twin = twin_figures(twin_record)
        return result


Measured = TypeVar("Measured")  # what measure_one returns for one process: a tensor model's figures, a decoder's


def fresh_rounds(pool: WorkerPool, backend: str, artifacts: Sequence[Path], count: int,
                 measure_one: Callable[[BackendWorker, Path], Measured]) -> list[list[Measured]]:
    """``count`` fresh workers per artifact, measured by ``measure_one`` in rounds (A B, B A, A B,
    ...), each worker closed after its turn; per artifact, its processes' results in order. Every
    worker is started (runtime imported) before the first timed window, so imports never compete
    with a timing; the machine-wide lock keeps other xdist workers' measurements out of the window.
    Tensor models and decoder LLMs are measured through this one policy."""
    rounds = [[pool.fresh(backend) for _ in artifacts] for _ in range(count)]
    results: list[list[Measured]] = [[] for _ in artifacts]
    try:
        # One measurement at a time per machine: this one, or the device it runs on.
        device = split_device(backend)[1]
        with machine_measurement_lock(pool.board(device)):
            pool.settle(device)
            for workers in rounds:
                for worker in workers:
                    worker.launch()
            for workers in rounds:  # every runtime imported before the first timed window
                for worker in workers:
                    worker.wait_ready()
            for number, workers in enumerate(rounds):
                for index in round_order(number, len(artifacts)):
                    results[index].append(measure_one(workers[index], artifacts[index]))
                    workers[index].close()
    finally:
        for workers in rounds:
            for worker in workers:
                worker.close()
    return results
