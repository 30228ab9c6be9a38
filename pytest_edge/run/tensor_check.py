"""The check of a tensor model on a runtime, one of the session's check strategies (run.kinds.Check)
beside a compile-time target's (:mod:`.compiled_check`) and a decoder's (:mod:`.decoder_check`):
the steps of :mod:`.pipeline` in order (what the loaded model says of its coverage before any run,
then the golden, the comparison, the measurement, the budgets and the gate). Returns the record and
every violation, in the order a reader needs them (accuracy first); the session's one ending
concludes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from . import pipeline
from ..backends import Coverage
from ..core.plan import Plan
from ..core.record import NOT_MEASURED, Record, timing_not_judged
from ..core.settings import Settings
from ..errors import CountingUnavailable
from ..measurement.combined import TimedMeasurement

if TYPE_CHECKING:
    from ..golden.sets import GoldenSets
    from ..measurement.counts import CountedMeasurement  # counted mode's, imported where it counts
    from ..judging.measurer import Measurer
    from ..worker.pool import ModelInfo


class TensorRunner(Protocol):
    """What a tensor check asks of the session: load, run, measure, the golden sets, the gate."""

    settings: Settings
    golden: GoldenSets

    def load(self, plan: Plan) -> ModelInfo: ...

    def predicted_coverage(self, info: ModelInfo, target: str) -> Coverage | None: ...

    def measure(self, info: ModelInfo, feeds: Sequence[Any], plan: Plan) -> TimedMeasurement | CountedMeasurement: ...

    @property
    def measurer(self) -> Measurer: ...


class TensorCheck:
    """A tensor model's check on the session ``runner`` (which also runs its golden cases)."""

    def __init__(self, runner: TensorRunner) -> None:
        self.runner = runner

    def check(self, test_id: str, plan: Plan, step: Callable[[str], None]) -> tuple[Record, list[str]]:
        runner, settings = self.runner, self.runner.settings
        step("load")
        info = runner.load(plan)
        step("check the delegate coverage of")
        target = plan.marker.target
        covered = pipeline.coverage(plan, info, runner.predicted_coverage(info, target) if target is not None else None)
        step("refresh the golden of" if settings.update_golden else "read the golden of")
        golden = pipeline.golden(runner.golden, plan)
        step("compare")
        compared = pipeline.compare(runner, plan, info, golden, settings.rootdir)  # type: ignore[arg-type]
        measured: TimedMeasurement | CountedMeasurement | None = None
        # An emulated device's timing and memory are an emulator's: not measured by default,
        # recorded but not judged with edge_emulated_timing = record (judged with = judge).
        not_judged = timing_not_judged(info.device, settings.emulated_timing)
        counting_note: list[str] = []
        if plan.measure and not_judged != NOT_MEASURED:
            step("measure")
            try:
                measured = runner.measure(info, compared.first_feeds, plan)
            except CountingUnavailable as unavailable:
                # Counting that cannot run is a skip of the counting, never of a failed comparison.
                if not compared.violations:
                    raise
                counting_note = [f"{plan.backend}: not counted: {unavailable}"]
        # Counted mode: instructions, no timing or memory (null in the record, budgets not judged).
        timed = measured if isinstance(measured, TimedMeasurement) else None
        counted = measured if measured is not None and timed is None else None
        # The load time: the timed processes' median, else the shared worker's load (none of an
        # emulated device: the one load under the emulator is no load time either).
        load_ms = None if not_judged == NOT_MEASURED else timed.load_ms if timed is not None else info.load_ms
        budgets = [] if not_judged else pipeline.budgets(plan, timed, load_ms)
        sizes = pipeline.size_budgets(plan, info, settings.rootdir)
        findings = [*covered.findings, *budgets, *sizes]
        violations = [*compared.violations, *(f.message for f in findings), *counting_note]
        record = pipeline.record(test_id, plan, info, golden, covered, compared, timed, load_ms, settings.rootdir,
                                 counted)
        record.budget_findings = findings
        if not_judged:
            record.timing_not_judged = not_judged
        if measured is not None and not not_judged:
            gate = runner.measurer.gate(info, compared.first_feeds, plan, record)
            violations += pipeline.gate_into(record, gate, settings)
        return record, violations
