"""Counted mode (``--edge-count=instructions``): the work of a model's runs counted under
Valgrind's callgrind in fresh worker processes, instead of timed, and the gate on it
(docs/measurement.md, "Counted mode"; the decision in docs/design.md).

Each counted process is spawned under ``valgrind --tool=callgrind`` with instrumentation off; the
worker switches it on around its counted runs only (:mod:`pytest_edge.worker.callgrind`). Latency and memory
are not measured in this mode (Valgrind runs a program some 50x slower, in its own memory).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import codec
from ..backends import Coverage, split_device
from ..errors import BackendCrash, CountingUnavailable
from .counted import run_count_gate
from .figures import GateFigures
from ..measurement.counts import CountedMeasurement, combine_counts
from .baseline import BaselineChoice, twin_baseline, twin_figures
from .gate import GateResult
from ..core.plan import Plan
from ..core.record import Record
from ..core.settings import Settings
from ..worker import callgrind
from ..worker.client import BackendWorker
from ..worker.pool import ModelInfo, WorkerPool
from ..worker.protocol import Count, CountedRuns, Load, reply_as


class Counter:
    """Counts (model, backend) in fresh processes under callgrind, and gates the counts."""

    def __init__(self, settings: Settings, pool: WorkerPool) -> None:
        self.settings = settings
        self.pool = pool
        self._valgrind: tuple[str, str] | None = None  # (executable, version)

    def valgrind(self) -> tuple[str, str]:
        """Valgrind's path and version; CountingUnavailable (a skip) with the install hint if absent."""
        if self._valgrind is None:
            executable = callgrind.valgrind_path()
            if executable is None:
                raise CountingUnavailable("counted mode (--edge-count=instructions) needs Valgrind, which is not on "
                                          f"PATH; {callgrind.INSTALL_HINT}")
            self._valgrind = (executable, callgrind.valgrind_version(executable))
        return self._valgrind

    def rounds(self, info: ModelInfo, artifacts: Sequence[Path], feeds: Sequence[np.ndarray], plan: Plan,
               processes: int | None = None) -> list[CountedMeasurement]:
        """``processes`` fresh counted workers per artifact; one CountedMeasurement per artifact.
        The workers start together (a count does not depend on what else runs)."""
        if split_device(info.backend)[1] is not None:
            raise CountingUnavailable(f"{info.backend}: counted mode counts on this machine only (Valgrind runs "
                                      "the worker here); a device's backends are timed (--edge-count=off)")
        executable, version = self.valgrind()
        count = processes or self.settings.count_processes
        out_dir = Path(tempfile.mkdtemp(prefix="pytest-edge-callgrind-"))
        workers = [[self._worker(info.backend, executable, out_dir) for _ in artifacts] for _ in range(count)]
        results: list[list[CountedRuns]] = [[] for _ in artifacts]
        try:
            for row in workers:
                for worker in row:
                    worker.launch()
            for row in workers:
                for index, (worker, artifact) in enumerate(zip(row, artifacts)):
                    results[index].append(self._once(worker, info, artifact, feeds, plan))
                    worker.close()
        except BackendCrash as exc:
            runtime = info.runtime.name or info.backend
            raise CountingUnavailable(
                f"counted mode: {version} could not run the {runtime} runtime ({info.backend}) under {callgrind.TOOL}: "
                f"{exc}\n  (a runtime Valgrind cannot run is skipped in counted mode; one that is only slow needs a "
                f"larger edge_timeout, now {self.settings.timeout_s:g} s)") from None
        finally:
            for row in workers:
                for worker in row:
                    worker.close()
            shutil.rmtree(out_dir, ignore_errors=True)
        return [combine_counts(per, callgrind.TOOL, version) for per in results]

    def _worker(self, backend: str, executable: str, out_dir: Path) -> BackendWorker:
        worker = self.pool.fresh(backend, spawn=True)  # Valgrind runs a new process: never forked
        worker.command_prefix = callgrind.command_prefix(executable, out_dir)
        worker.extra_env = {callgrind.OUT_DIR_ENV: str(out_dir), **callgrind.worker_env()}
        return worker

    def _once(self, worker: BackendWorker, info: ModelInfo, artifact: Path, feeds: Sequence[np.ndarray],
              plan: Plan) -> CountedRuns:
        shapes = codec.to_json(info.shapes)
        worker.request(Load(info.key, str(artifact), info.threads, shapes, with_coverage=False), artifact=str(artifact))
        return reply_as(CountedRuns, Count.op, worker.request(
            Count(info.key, list(feeds), min(plan.warmup, 5), self.settings.count_runs), artifact=str(artifact)))

    def gate(self, info: ModelInfo, feeds: Sequence[np.ndarray], plan: Plan, live: Record,
             choice: BaselineChoice, twin_measured: CountedMeasurement | None,
             twin_coverage: Coverage | None) -> GateResult:
        """A/B against the twin's counts where the choice is the twin, else against the stored
        report's record (``live``: this run's record, its ``counted`` block this artifact's counts)."""
        twin = choice.twin
        if twin is not None:
            if twin_measured is None:
                raise RuntimeError(f"the baseline twin {choice.source} of {info.artifact} was not counted")
            # The twin's figures as the record a stored report would hold.
            twin_record, source = twin_baseline(info.backend, twin, twin_measured, twin_coverage, self.settings.rootdir)
            theirs, paired = GateFigures.of_record(twin_record), True

            def recount() -> tuple[CountedMeasurement, CountedMeasurement | None]:
                mine, theirs = self.rounds(info, [info.artifact, twin], feeds, plan)
                return mine, theirs
        else:
            twin_record, source, paired = None, choice.source, False
            assert choice.stored is not None  # neither a twin nor new: the stored report's record
            theirs = GateFigures.of_record(choice.stored)  # read as the live record is

            def recount() -> tuple[CountedMeasurement, CountedMeasurement | None]:
                (mine,) = self.rounds(info, [info.artifact], feeds, plan)
                return mine, None
        result = run_count_gate(GateFigures.of_record(live), theirs,
                                paired=paired, threshold=self.settings.count_threshold, recount=recount, source=source,
                                max_regression=self.settings.max_regression, strict=self.settings.strict_timing)
        if twin_record is not None and result.summary is not None:
            result.summary.twin = twin_figures(twin_record)
        return result
