"""The conformance session: loads models on backends through the worker pool, keeps the golden
sets, runs the check of one :class:`~pytest_edge.core.plan.Plan` and returns its
:class:`~pytest_edge.core.record.Record`.

Plain Python, no pytest: the plugin, the ``pytest-edge`` command and the tests all drive it. The
session picks the check of a target's kind (run.kinds.Check: :mod:`.tensor_check`, :mod:`.compiled_check`,
:mod:`.decoder_check`) and owns the one ending they share; the golden sets live in
:mod:`pytest_edge.golden.sets`, the workers in :mod:`pytest_edge.worker`, measurement and the merge
gate in :mod:`pytest_edge.judging`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .compiled_check import CompiledChecker
from .kinds import Check
from .outcomes import Outcome, SettlesOutcomes
from .. import codec
from ..backends import Backend, Coverage, InputShapes, get_backend
from ..errors import BackendError, EdgeCheckFailed, EdgeError
from ..core.external_data import artifact_files
from ..golden.sets import GoldenSets
from ..accuracy.inputs import check_shapes
from ..core.marker import MarkerSpec
from ..measurement.combined import TimedMeasurement
from ..measurement.machine import Machine, machine_info
from ..core.models import Model, ModelKeys
from ..core.plan import Plan, plan_for, resolve_reference, resolve_tested
from ..core.target import Target
from ..core.record import Record
from ..core.settings import Settings
from ..worker.pool import ModelInfo, WorkerPool
from ..worker.protocol import CalibrationSet, Load, Loaded, ReadIntermediates, Run, reply_as

if TYPE_CHECKING:  # made by the first check that measures: a golden check alone imports no gate
    from ..backends.compiled import Compilation  # a compile-time target's, counted mode's, triage's
    from ..backends.intermediates import Intermediates
    from ..measurement.counts import CountedMeasurement
    from ..judging.measurer import Measurer
    from .decoder_check import LlmChecker

__all__ = ["EdgeSession", "Outcome", "Settings", "EdgeStepError"]  # Outcome: run/outcomes.py's

class EdgeStepError(EdgeError):
    """An exception nobody foresaw, raised while checking: named with its step, model and backend,
    with the original chained (``--fulltrace`` shows its traceback)."""

    def __init__(self, step: str, model: str, backend: str, exc: BaseException) -> None:
        super().__init__(f"pytest-edge could not {step} {model} on {backend}: {type(exc).__name__}: {exc}")


def measuring_fork(settings: Settings) -> str:
    """``auto`` spawns when a merge gate runs: an unchanged 6 us model failed a CI run's forked A/B
    gate (+47 % then +17 % over 8 pairs, significant), thought to be the zygote's one layout draw
    shared by every child; a later quiet re-test did not reproduce it (docs/measurement.md), so
    until its cause is known the gate spawns, where each process draws its own layout. ``on``
    forks anyway."""
    return "off" if settings.fork == "auto" and settings.gating else settings.fork


class EdgeSession(SettlesOutcomes):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pool = WorkerPool(settings.isolated, settings.timeout_s, on_crash=self._forget, devices=settings.devices,
                               device_cache=settings.device_cache, fork=measuring_fork(settings), farm=settings.farm)
        self._measurer: Measurer | None = None
        self._decoders: LlmChecker | None = None
        self.models = ModelKeys()  # every model resolved, by key: one key, one place
        self.golden = GoldenSets(settings, self, self.models)
        self.loaded: dict[str, ModelInfo] = {}
        self.records: list[Record] = []
        self.inconclusive = 0
        self.report_error = ""  # set when --edge-report could not be written
        self.step = ""  # what check() is doing, for the message of an unexpected exception
        self._predicted: dict[tuple[str, str], Coverage | None] = {}
        self.compiler = CompiledChecker(settings)  # compile-time targets: each artifact compiled once
        self._artifacts_checked: set[tuple[str, str]] = set()  # (artifact, backend) whose files were checked
        self._tensors: Check | None = None  # a tensor model's check (run/tensor_check.py), made on first use
        self._speech: Check | None = None  # a speech model's check (run/speech_check.py), made on first use
        self._machine: Machine | None = None

    @property
    def measurer(self) -> Measurer:
        """Timing, memory, counting and the merge gate of this session's checks."""
        if self._measurer is None:
            from ..judging.measurer import Measurer

            self._measurer = Measurer(self.settings, self.pool)
        return self._measurer

    @property
    def decoders(self) -> LlmChecker:
        """The decoders' steps of this session's checks (edge_llm): made by the first decoder test."""
        if self._decoders is None:
            from .decoder_check import LlmChecker

            self._decoders = LlmChecker(self.settings, self.pool, self.models)
        return self._decoders

    @property
    def under_load(self) -> bool:
        """Some timed window of this session ran under load."""
        return self._measurer is not None and self._measurer.under_load

    @property
    def measured_any(self) -> bool:
        return self._measurer is not None and self._measurer.measured_any

    @property
    def store(self):  # the golden store (the unused-golden report and prune read it)
        return self.golden.store

    # ------------------------------------------------------------ models, plans and backends

    @property
    def machine(self) -> Machine:
        """This machine, described once (the report's ``machine`` block)."""
        if self._machine is None:
            self._machine = machine_info()
        return self._machine

    @property
    def arch(self) -> str | None:  # this machine's ISA, recorded with a golden (golden.sets)
        return self.machine.arch or None

    def resolve(self, name: str | None, test_dir: Path | None = None) -> Model:
        return resolve_tested(self.settings, self.models, name, test_dir)

    def plan(self, model: Model, backend: str, marker: MarkerSpec | None = None,
             test_dir: Path | None = None) -> Plan:
        """A plan outside a test (the ``pytest-edge`` command, benchmarks)."""
        marker = marker or MarkerSpec()
        test_dir = test_dir or self.settings.rootdir
        return plan_for(self.settings, marker, model, backend, test_dir,
                        reference=resolve_reference(self.settings, marker, model, test_dir))

    def _forget(self, backend: str) -> None:
        """A worker crashed: what it held is gone."""
        self.loaded = {k: v for k, v in self.loaded.items() if v.backend != backend}
        if self._measurer is not None:
            self._measurer.forget(backend)

    def require(self, plan: Target) -> None:
        """A backend --edge-require keeps in the run although it cannot run here: its failure."""
        if plan.unavailable:
            raise EdgeError(f"{plan.backend} is required (--edge-require) but unavailable: {plan.unavailable}")

    def load(self, plan: Plan) -> ModelInfo:
        backend = get_backend(plan.backend)
        artifact = plan.artifact
        if artifact is None:
            raise BackendError(f"{plan.backend}: {backend.missing_artifact(plan.model.name)}")
        if not artifact.is_file():
            raise BackendError(f"{plan.backend}: artifact {artifact} does not exist")
        # Its external data confined to its folder and present, nothing sparse: before anything reads
        # it (the golden's provenance hashes it), once per session.
        if (str(artifact), plan.backend) not in self._artifacts_checked:
            artifact_files(artifact, plan.backend)
            self._artifacts_checked.add((str(artifact), plan.backend))
        shapes = self.input_shapes(plan, backend, artifact)
        key = f"{artifact.resolve()}|{plan.backend}|{plan.threads}|{codec.to_json(shapes)}"
        calibration = None
        if backend.calibrates:  # a toolkit's int8 build: quantized on the golden's cases or calibration=
            from .calibration import calibration_for

            calibration = calibration_for(plan, self.golden, self.settings.rootdir)
            key += f"|calibration {calibration.identity}" if calibration is not None else ""
        if key not in self.loaded:
            cases = CalibrationSet(calibration.source, list(calibration.cases)) if calibration is not None else None
            reply = reply_as(Loaded, Load.op, self.pool.request(plan.backend, Load(
                key, str(artifact), plan.threads, codec.to_json(shapes), calibration=cases), artifact))
            self.loaded[key] = ModelInfo.from_load(key, plan.backend, artifact, reply, plan.threads, shapes,
                                                   self.pool.machine(plan.backend))
        info = self.loaded[key]
        check_shapes(plan.shapes, info.inputs, f"{plan.backend}: {artifact}",
                     shapes.renaming([spec.name for spec in info.inputs]), [name for name, _ in shapes.golden])
        return info

    def input_shapes(self, plan: Plan, backend: Backend, artifact: Path) -> InputShapes:
        """What the load of ``plan`` asks for: the marker's shapes=, the golden's inputs (their names
        and first case's shapes; the reference's own load asks without, as it records them) and what
        the artifact's converter wrote beside it."""
        golden = self.golden.known(plan)
        if golden is not None and golden.reference_backend == plan.backend and plan.reference is None:
            golden = None  # the artifact the golden was recorded from: its own names and shapes
        beside, source = backend.shapes_beside(artifact)
        return InputShapes(
            requested={name: tuple(int(d) for d in shape) for name, shape in sorted(plan.shapes.items())},
            golden=tuple((spec.name, tuple(golden.cases[0].inputs[spec.name].shape)) for spec in golden.inputs_spec)
            if golden is not None and golden.cases else (),
            beside=beside, beside_source=source)

    def run(self, info: ModelInfo, feeds: Sequence[Any], reset: bool = True) -> list[np.ndarray]:
        return self.pool.request(info.backend, Run(info.key, info.feeds(feeds), reset), info.artifact)

    def intermediates(self, info: ModelInfo, feeds: Sequence[Any]) -> Intermediates | None:
        from ..backends.intermediates import Intermediates  # triage's, on a mismatch

        reply = self.pool.request(info.backend, ReadIntermediates(info.key, info.feeds(feeds)), info.artifact)
        return reply_as(Intermediates, "intermediates", reply) if reply is not None else None

    def measure(self, info: ModelInfo, feeds: Sequence[Any], plan: Plan) -> TimedMeasurement | CountedMeasurement:
        """Timing and memory of ``info`` by the measurement protocol (cached per session); in counted
        mode its instructions per inference."""
        return self.measurer.measure(info, feeds, plan)

    def predicted_coverage(self, info: ModelInfo, target: str) -> Coverage | None:
        """Coverage for a mobile ``target`` where the backend can predict it, else None (the
        backend's own figure stands)."""
        backend = get_backend(info.backend)
        if target not in backend.predicts_targets:
            return None
        key = (str(info.artifact), target)
        if key not in self._predicted:
            self._predicted[key] = backend.predicted_coverage(info.artifact, target)
        return self._predicted[key]

    # ------------------------------------------------------------ the check after a test body

    def check(self, test_id: str, plan: Target) -> Record:
        """Run the golden comparison and every budget of ``plan`` (a target of any kind: a tensor
        model's Plan, a decoder's LlmTarget, a speech export's SpeechTarget); keep and return the record.

        Raises :class:`EdgeCheckFailed` listing every violation, or another :class:`EdgeError`
        when the check could not run at all (bad artifact, missing golden). This is the one place
        where an unexpected exception becomes an :class:`EdgeError` naming the step it broke.
        """
        self.step = "load"
        try:
            return self._check(test_id, plan)
        except EdgeError:
            raise
        except Exception as exc:
            raise EdgeStepError(self.step, plan.model.name, plan.backend, exc) from exc

    def _check(self, test_id: str, target: Target) -> Record:
        """The check of ``target``'s kind (tensor, compiled, decoder: one strategy each, behind one
        protocol, run.kinds.Check), then the one ending every kind shares."""
        self.require(target)
        return self._conclude(*self._strategy(target.kind).check(test_id, target, self._step))

    def _strategy(self, kind: str) -> Check:
        if kind == "decoder":
            return self.decoders
        if kind == "speech":  # edge_asr (run/speech_check.py): made by the first speech test
            if self._speech is None:
                from .speech_check import SpeechChecker

                self._speech = SpeechChecker(self.settings, self.pool)
            return self._speech
        if kind == "compiled":
            return self.compiler
        if self._tensors is None:
            from .tensor_check import TensorCheck

            self._tensors = TensorCheck(self)
        return self._tensors

    def _conclude(self, record: Record, violations: list[str]) -> Record:
        """The one ending of every kind's check (tensor, compile-time, decoder): the worker restarts
        said (failing the test under --edge-strict-restarts), the gate's inconclusive warnings
        counted, the verdict, the record kept, and every violation raised as one failure."""
        record.restarts = self.pool.take_restart_notes()
        if self.settings.strict_restarts:
            violations = [*violations, *record.restarts]
        self.inconclusive += len(record.warnings)
        self.records.append(record.conclude(violations))
        if violations:
            raise EdgeCheckFailed(violations, record)
        return record

    def compiled(self, backend: str, artifact: Path) -> Compilation:
        """``artifact`` compiled for the compile-time target ``backend``, once per session (docs/npu.md)."""
        return self.compiler.compiled(backend, artifact)

    def _step(self, step: str) -> None:
        self.step = step

    def state_json(self) -> dict[str, Any]:
        """What an xdist worker sends the controller at the end (``workeroutput`` is JSON)."""
        return {"records": [r.to_json() for r in self.records], "under_load": self.under_load,
                "measured": self.measured_any, "inconclusive": self.inconclusive}

    def merge_state_json(self, state: dict[str, Any]) -> None:
        self.records.extend(Record.from_json(r) for r in state.get("records", []))
        self.measurer.under_load |= bool(state.get("under_load"))
        self.measurer.measured_any |= bool(state.get("measured"))
        self.inconclusive += int(state.get("inconclusive", 0))

    def prestart(self, backends: Sequence[str]) -> None:
        # A compile-time target has no worker: its compiler runs when its test does.
        self.pool.prestart([name for name in backends if not get_backend(name).compile_only])

    def close(self) -> None:
        self.pool.close()
        self.loaded.clear()
