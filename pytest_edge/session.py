"""The conformance session: loads models on backends, keeps golden outputs, runs the check of one
:class:`~pytest_edge.plan.Plan` and returns its :class:`~pytest_edge.record.Record`.

Plain Python, no pytest: the plugin, the ``pytest-edge`` command and the tests all drive it. The
jobs live in their own modules: the worker pool (:mod:`.pool`), goldens (:mod:`.golden`),
measurement and the regression gate (:mod:`.measurement`, :mod:`.gate`), triage (:mod:`.triage`),
budget checks (:mod:`.checks`), comparison (:mod:`.compare`).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import __version__
from .backends import Coverage, TensorSpec, all_backends, get_backend, reference_order, split_device
from .checks import check_coverage, check_drift, check_latency, check_load, check_memory
from .compare import compare_output, summarize
from .cross_isa import cross_isa_note, timing_not_judged
from .errors import BackendError, EdgeCheckFailed, EdgeError, EdgeManyCases, EdgeUsageError, GoldenError, UnknownBackend
from .external_data import artifact_digests, external_files
from .files import atomic_write, sha256_file
from .golden.store import DEFAULT_SET, Golden, GoldenCase, GoldenStore, input_key, npz_bytes
from .inputs import check_case, check_shapes, feed_order, generate_case, signature_problems, user_cases
from .marker import MarkerSpec
from .measurement.timing import machine_info
from .measurement.measurer import Measurer
from .models import Model, resolve_model
from .golden.obtained import obtained_dir
from .plan import Plan, plan_for, resolve_reference, search_dirs
from .worker.pool import ModelInfo, WorkerPool
from .worker.protocol import Intermediates, Load, Run
from .record import Record
from .settings import Settings
from .triage.ladder import sibling_triage

__all__ = ["EdgeSession", "Settings", "EdgeStepError"]

# More inputs= cases than this for one model get a warning: each is a golden file and a run per backend.
MANY_CASES = 100


class EdgeStepError(EdgeError):
    """An exception nobody foresaw, raised while checking: named with its step, model and backend,
    with the original chained (``--fulltrace`` shows its traceback)."""

    def __init__(self, step: str, model: str, backend: str, exc: BaseException) -> None:
        super().__init__(f"pytest-edge could not {step} {model} on {backend}: {type(exc).__name__}: {exc}")


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


class EdgeSession:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = GoldenStore(settings.golden_dir)
        self.pool = WorkerPool(settings.isolated, settings.timeout_s, on_crash=self._forget, devices=settings.devices,
                               device_cache=settings.device_cache)
        self.measurer = Measurer(settings, self.pool)
        self.loaded: dict[str, ModelInfo] = {}
        # Keyed by (model, input set): each input set of a model has its own golden.
        self.goldens: dict[tuple[str, str], Golden] = {}
        self.refreshed: set[tuple[str, str]] = set()
        self._set_keys: dict[tuple[str, str, int], tuple[Any, str]] = {}
        self.records: list[Record] = []
        self.inconclusive = 0
        self.report_error = ""  # set when --edge-report could not be written
        self.step = ""  # what check() is doing, for the message of an unexpected exception
        self._predicted: dict[tuple[str, str], Coverage | None] = {}
        self._machine: dict[str, Any] | None = None

    # ------------------------------------------------------------ models, plans and backends

    @property
    def machine(self) -> dict[str, Any]:
        if self._machine is None:
            self._machine = machine_info()
        return self._machine

    def resolve(self, name: str | None, test_dir: Path | None = None) -> Model:
        if not name:
            raise EdgeUsageError("the edge marker needs a model: @pytest.mark.edge(model='name-or-path')")
        return resolve_model(name, search_dirs(self.settings, test_dir), [s for b in all_backends().values() for s in b.artifact_suffixes()])

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
        self.measurer.forget(backend)

    def require(self, plan: Plan) -> None:
        """A backend --edge-require keeps in the run although it cannot run here: its failure."""
        if plan.unavailable:
            raise EdgeError(f"{plan.backend} is required (--edge-require) but unavailable: {plan.unavailable}")

    def load(self, plan: Plan) -> ModelInfo:
        backend = get_backend(plan.backend)
        artifact = plan.artifact
        if artifact is None:
            raise BackendError(f"{plan.backend}: {backend.missing_artifact(plan.model.name)}")
        shapes = dict(sorted(plan.shapes.items()))
        key = f"{artifact.resolve()}|{plan.backend}|{plan.threads}|{shapes}"
        if key not in self.loaded:
            if not artifact.is_file():
                raise BackendError(f"{plan.backend}: artifact {artifact} does not exist")
            external_files(artifact, plan.backend)  # confined to its folder and present, before a runtime reads it
            info = self.pool.request(plan.backend, Load(key, str(artifact), plan.threads,
                                                        {k: list(v) for k, v in shapes.items()}), artifact)
            self.loaded[key] = ModelInfo(
                key=key, backend=plan.backend, artifact=artifact,
                inputs=[TensorSpec.from_json(s) for s in info["inputs"]],
                outputs=[TensorSpec.from_json(s) for s in info["outputs"]],
                runtime=info["runtime"], coverage=Coverage.from_json(info["coverage"]),
                load_ms=info["load_ms"], precision=info["precision"],
                threads=plan.threads if info["threads_applied"] else None, shapes=shapes,
                device=self.pool.machine(plan.backend))
        check_shapes(plan.shapes, self.loaded[key].inputs, f"{plan.backend}: {artifact}")
        return self.loaded[key]

    def run(self, info: ModelInfo, feeds: Sequence[Any], reset: bool = True) -> list[np.ndarray]:
        return self.pool.request(info.backend, Run(info.key, info.feeds(feeds), reset), info.artifact)

    def intermediates(self, info: ModelInfo, feeds: Sequence[Any]) -> dict[str, Any] | None:
        return self.pool.request(info.backend, Intermediates(info.key, info.feeds(feeds)), info.artifact)

    def measure(self, info: ModelInfo, feeds: Sequence[Any], plan: Plan) -> dict[str, Any]:
        """Timing and memory of ``info`` by the measurement protocol (cached per session)."""
        return self.measurer.measure(info, feeds, plan)

    # ------------------------------------------------------------ golden outputs

    def reference_backend(self, model: Model) -> str:
        if self.settings.reference_backend:
            try:
                get_backend(self.settings.reference_backend)
            except UnknownBackend as exc:
                raise EdgeUsageError(f"edge_reference_backend: {exc}") from None
        for name in reference_order(self.settings.reference_backend or None):
            backend = get_backend(name)
            if backend.artifact_of(model) is not None and backend.unavailable_reason() is None:
                return name
        raise GoldenError(f"no backend available here can run any artifact of {model.name} "
                          f"({', '.join(str(p) for p in model.artifacts.values())}) to record golden outputs")

    def _cases(self, plan: Plan, inputs: Sequence[TensorSpec], origin: str) -> list[dict[str, np.ndarray]]:
        check_shapes(plan.shapes, inputs, origin)
        if plan.marker.inputs is None:
            return [generate_case(inputs, plan.shapes, self.settings.seed)]
        cases = user_cases(plan.marker.inputs, plan.test_dir or self.settings.rootdir)
        if not cases:
            raise EdgeUsageError(f"{origin}: inputs= gave no cases")
        return [check_case(case, inputs, origin) for case in cases]

    def input_set(self, plan: Plan) -> str:
        """The key of the test's input set: ``default`` for generated inputs, else
        :func:`~pytest_edge.golden.input_key` of the ``inputs=`` cases as given (before conversion
        to the model's dtypes, so the key does not depend on a backend). Computed once per marker."""
        return self.input_set_of(plan.marker.inputs, plan.test_dir or self.settings.rootdir, plan.golden_model.name)

    def input_set_of(self, inputs: Any, test_dir: Path, model: str) -> str:
        if inputs is None:
            return DEFAULT_SET
        memo = (model, str(test_dir), id(inputs))
        if memo not in self._set_keys:  # the inputs object is kept, so its id is not reused
            try:
                cases = user_cases(inputs, test_dir)
            except EdgeUsageError as exc:
                raise EdgeUsageError(f"model {model}: {exc}") from None
            if len(cases) > MANY_CASES:
                warnings.warn(EdgeManyCases(
                    f"model {model}: inputs= gave {len(cases)} cases; each is a golden file of its own "
                    f"({len(cases)} files under {self.settings.golden_dir / model}) and a run of every backend: "
                    "a few representative cases usually say as much"), stacklevel=2)
            self._set_keys[memo] = (inputs, input_key(cases))
        return self._set_keys[memo][1]

    def ensure_golden(self, plan: Plan) -> None:
        """With --edge-update-golden, record the test's input set once per session (before a
        test's body, so a failing body still leaves one); without it, nothing. With ``reference=``
        the reference model's set is the one recorded."""
        if self.settings.update_golden and (plan.golden_model.name, self.input_set(plan)) not in self.refreshed:
            self.refresh_golden(plan)

    def refresh_golden(self, plan: Plan) -> Golden:
        """Record the golden of the test's input set; the model's other sets are not touched.
        With ``reference=`` that is the reference model's golden, from the reference model's own
        artifacts: the tested (say quantized) artifact's outputs never become a golden."""
        plan = plan.golden_plan
        model = plan.model
        key = self.input_set(plan)
        info = self.load(plan.on(self.reference_backend(model)))
        cases = []
        for case_inputs in self._cases(plan, info.inputs, f"golden for {model.name}"):
            outputs = self.run(info, list(case_inputs.values()))
            _check_finite(outputs, info)
            cases.append(GoldenCase(case_inputs, {s.name: o for s, o in zip(info.outputs, outputs)}))
        meta = {
            "model": model.name,
            # Each artifact and, for an .onnx, its external data files: the weights are part of it.
            "artifacts": {name: digest for p in model.artifacts.values()
                          for name, digest in artifact_digests(p, sha256_file).items()},
            "reference": {"backend": info.backend, "artifact": info.artifact.name, "runtime": info.runtime,
                          # the recording machine's ISA: a mismatch on another ISA is explained as such
                          "isa": (info.device or self.machine).get("arch")},
            "seed": self.settings.seed if plan.marker.inputs is None else None,
            "inputs_from": "signature" if plan.marker.inputs is None else "user",
            "signature": {"inputs": [s.to_json() for s in info.inputs],
                          "outputs": [s.to_json() for s in info.outputs]},
            "plugin_version": __version__,
        }
        golden = self.store.write(model.name, meta, cases, key)
        self.goldens[(model.name, key)] = golden
        self.refreshed.add((model.name, key))
        return golden

    def _same_inputs(self, plan: Plan, golden: Golden) -> bool:
        """Whether the recorded inputs of ``golden`` are the test's ``inputs=`` (converted to the
        recorded signature's dtypes, as a refresh would record them)."""
        wanted = self._cases(plan, golden.inputs_spec, f"golden for {plan.model.name}")
        recorded = [c.inputs for c in golden.cases]
        return len(wanted) == len(recorded) and all(
            w.keys() == r.keys() and all(np.array_equal(w[k], r[k]) for k in w)
            for w, r in zip(wanted, recorded))

    def _legacy_set(self, plan: Plan) -> Golden | None:
        """Before input sets, a test's ``inputs=`` were recorded in the model's folder itself: that
        golden still serves the test whose inputs it holds, until its own set is recorded."""
        if not self.store.exists(plan.model.name):
            return None
        legacy = self.store.load(plan.model.name)
        if legacy.meta.get("inputs_from") == "user" and self._same_inputs(plan, legacy):
            return legacy
        return None

    def stored_set(self, plan: Plan) -> str:
        """The set a test reads: its own, or ``default`` where only a legacy golden of the model's
        folder holds its inputs. Used to tell which stored sets are in use (of the golden's model:
        :meth:`golden_sets_used`)."""
        plan = plan.golden_plan
        key = self.input_set(plan)
        if key == DEFAULT_SET or self.store.exists(plan.model.name, key):
            return key
        try:
            return DEFAULT_SET if self._legacy_set(plan) is not None else key
        except EdgeError:  # an unreadable default set serves nobody; its test says why
            return key

    def golden_sets_used(self, plan: Plan) -> set[tuple[str, str]]:
        """(model, set) of every stored golden set this test reads: with ``reference=`` they belong
        to the reference model, not to the tested one."""
        name = plan.golden_model.name
        return {(name, self.input_set(plan)), (name, self.stored_set(plan))}

    def golden_model_name(self, marker: MarkerSpec, test_dir: Path | None = None) -> str:
        """The name under golden/ that a marker's tests read (the reference model's with
        ``reference=``), for a test that has no plan (no backend selected)."""
        model = self.resolve(marker.model, test_dir)
        reference = resolve_reference(self.settings, marker, model, test_dir)
        return (reference or model).name

    def golden_for(self, plan: Plan) -> Golden:
        """The golden of the test's input set as stored (or as refreshed in this session);
        reading never writes. With ``reference=``, the reference model's golden of that set."""
        source = plan.golden_plan
        model = source.model
        key = self.input_set(source)
        # Said after every golden error of a reference= test, so the user knows whose golden it is.
        whose = (f" (the golden of reference={plan.marker.reference!r}, against which "
                 f"{plan.model.name!r} is checked)" if plan.reference is not None else "")
        golden = self.goldens.get((model.name, key))
        if golden is None:
            try:
                if key != DEFAULT_SET and not self.store.exists(model.name, key):
                    golden = self._legacy_set(source)
                if golden is None:
                    golden = self.store.load(model.name, key)
            except GoldenError as exc:
                if not whose:
                    raise
                raise GoldenError(f"{exc}{whose}") from exc
            self.goldens[(model.name, key)] = golden
        if (model.name, key) not in self.refreshed:
            for artifact in _judged_artifacts(plan, golden):
                stale = golden.stale_reason(artifact)
                if stale:
                    raise GoldenError(stale + whose)
        if source.marker.inputs is not None and not self._same_inputs(source, golden):
            # The key names the inputs, so this is a hand-edited or colliding set.
            raise GoldenError(f"the inputs= of this test differ from the inputs recorded in "
                              f"{golden.folder}; refresh with pytest --edge-update-golden")
        return golden

    # ------------------------------------------------------------ the check after a test body

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

    def check(self, test_id: str, plan: Plan) -> Record:
        """Run the golden comparison and every budget of ``plan``; keep and return the record.

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

    def _check(self, test_id: str, plan: Plan) -> Record:
        self.require(plan)
        info = self.load(plan)
        self.step = "refresh the golden of" if self.settings.update_golden else "read the golden of"
        self.ensure_golden(plan)
        golden = self.golden_for(plan)
        self.step = "compare"
        violations, comparisons, first_feeds = self._compare(plan, info, golden)

        marker = plan.marker
        coverage = info.coverage
        predicted = self.predicted_coverage(info, marker.target) if marker.target is not None else None
        if predicted is not None or marker.target in get_backend(plan.backend).predicts_targets:
            # Backends that cannot predict a target keep their own figures; one that predicts it
            # but cannot here (OpenVINO without that device's plugin) has none: said unreadable.
            coverage = predicted
        if get_backend(plan.backend).has_delegate or predicted is not None:
            violations += check_coverage(coverage, marker.max_fallback, marker.max_partitions, plan.backend)
        measured: dict[str, Any] = {}
        # An emulated device's figures are recorded, not judged (unless edge_judge_emulated_timing).
        not_judged = timing_not_judged(info.device, self.settings.judge_emulated_timing)
        if plan.measure:
            self.step = "measure"
            measured = self.measure(info, first_feeds, plan)
            if not not_judged:
                budgets = {"p50_ms": marker.p50_ms, "p90_ms": marker.p90_ms, "p99_ms": marker.p99_ms}
                violations += check_latency(measured["latency_ms"], measured["measured_runs"], budgets, plan.backend)
                violations += check_memory(measured["peak_memory_mb"], marker.peak_memory_mb, plan.backend)
                violations += check_drift(measured.get("drift"), marker.max_drift,
                                          [p.get("drift") for p in measured.get("processes") or []], plan.backend,
                                          measured.get("probe_drift"))
        if not not_judged:
            violations += check_load(measured.get("load_ms", info.load_ms), marker.max_load_ms, plan.backend)

        record = self._record(test_id, plan, info, golden, coverage, comparisons, measured, first_feeds)
        if not_judged:
            record.extra["timing_not_judged"] = not_judged
        if measured and not not_judged:
            gate = self.measurer.gate(info, first_feeds, plan, record.to_json())
            violations += gate.failures
            if gate.summary:
                record.baseline_check = {**gate.summary, "inconclusive": gate.inconclusive, "notes": gate.notes}
            record.warnings = gate.inconclusive
            self.inconclusive += len(gate.inconclusive)
        record.restarts = self.pool.take_restart_notes()
        if self.settings.strict_restarts:
            violations += record.restarts
        self.records.append(record.conclude(violations))
        if violations:
            raise EdgeCheckFailed(violations, record.to_json())
        return record

    def _compare(self, plan: Plan, info: ModelInfo, golden: Golden) -> tuple[list[str], list, list[Any]]:
        """Every golden case on this backend: violations, comparisons, and the first case's feeds."""
        in_order = _aligned(golden.inputs_spec, info.inputs, info, golden, "input", plan)
        out_order = _aligned(golden.outputs_spec, info.outputs, info, golden, "output", plan)
        # Failure messages of a reference= test say whose golden the outputs missed.
        against = f"against reference {plan.reference.name}: " if plan.reference is not None else ""
        violations: list[str] = []
        comparisons = []
        first_feeds: list[Any] = []
        failing: tuple[list[Any], GoldenCase] | None = None
        for index, case in enumerate(golden.cases):
            feeds: list[Any] = [None] * len(info.inputs)
            for ref, position in zip(golden.inputs_spec, in_order):
                feeds[position] = case.inputs[ref.name]
            first_feeds = first_feeds or feeds
            outputs = self.run(info, feeds)
            for ref, position in zip(golden.outputs_spec, out_order):
                comparison = compare_output(ref.name, case.outputs[ref.name], outputs[position],
                                            plan.tolerance(ref.name))
                comparisons.append(comparison)
                prefix = f"{plan.backend}: {against}" + (f"case {index}: " if len(golden.cases) > 1 else "")
                violations += [prefix + p for p in comparison.problems]
                if comparison.problems and failing is None:
                    failing = (feeds, case)
                    failing_outputs = (outputs, out_order)
            if any(c.problems for c in comparisons[-len(out_order):]):
                path = self.write_obtained(plan, index, golden, outputs, out_order)
                which = "" if golden.key == DEFAULT_SET else f" --set {golden.key}"
                violations.append(f"{plan.backend}: obtained outputs of case {index} written to {path} "
                                  f"(compare: pytest-edge golden diff {golden.model}{which})")
        if failing is not None:
            violations += cross_isa_note(self, plan, info, golden, self.machine, failing[1], *failing_outputs)
            violations += sibling_triage(self, plan, _for_triage(plan, golden), *failing)
        return violations, comparisons, first_feeds

    def write_obtained(self, plan: Plan, index: int, golden: Golden, outputs: Sequence[np.ndarray],
                       out_order: Sequence[int]) -> Path:
        # Beside the golden, outside the committed folder (pytest-regressions' ``.obtained`` files).
        # Beside the golden it missed: with reference= the reference model's, named after the tested
        # model too, so they neither overwrite the reference model's own obtained files nor go
        # unseen by `pytest-edge golden diff <reference>`.
        folder = obtained_dir(self.settings.rootdir, golden.model, golden.key)
        folder.mkdir(parents=True, exist_ok=True)
        who = plan.backend if plan.reference is None else f"{plan.model.name}.{plan.backend}"
        path = folder / f"{who}-case_{index:03d}.npz"
        arrays = {f"outputs/{ref.name}": np.asarray(outputs[pos]) for ref, pos in zip(golden.outputs_spec, out_order)}
        atomic_write(path, npz_bytes(arrays))
        return Path(_relative(path, self.settings.rootdir))

    def _model_json(self, model: Model, artifact: Path | None) -> dict[str, Any]:
        return {"name": model.name,
                "artifact": _relative(artifact, self.settings.rootdir) if artifact else None,
                "sha256": sha256_file(artifact) if artifact and artifact.is_file() else None}

    def _record(self, test_id: str, plan: Plan, info: ModelInfo, golden: Golden, coverage: Coverage | None,
                comparisons: list, measured: dict[str, Any], feeds: Sequence[Any]) -> Record:
        return Record(
            test=test_id, model=self._model_json(plan.model, info.artifact), backend=info.backend,
            runtime=info.runtime, plugin={"name": "pytest-edge", "version": __version__},
            precision=info.precision, threads=info.threads,
            input={s.name: {"shape": list(np.shape(x)), "dtype": s.dtype} for s, x in zip(info.inputs, feeds)},
            warmup_runs=measured.get("warmup_runs"), measured_runs=measured.get("measured_runs"),
            coverage=coverage.to_json() if coverage else None,
            load_ms=measured.get("load_ms", info.load_ms), first_inference_ms=measured.get("first_inference_ms"),
            latency_ms=measured.get("latency_ms"), latency_quantiles_ms=measured.get("latency_quantiles_ms"),
            peak_memory_mb=measured.get("peak_memory_mb"),
            steady_memory_mb=measured.get("steady_memory_mb"), drift=measured.get("drift"),
            timing_under_load=measured.get("under_load"), other_cores_busy=measured.get("other_cores_busy"),
            processes=measured.get("processes"), process_spread=measured.get("process_spread"),
            device=({"name": split_device(info.backend)[1], "machine": info.device} if info.device else None),
            accuracy={"reference": golden.reference_backend, "cases": len(golden.cases), **summarize(comparisons),
                      # Only for reference= tests: the model whose golden was used (else the test's own).
                      **({"reference_model": golden.model} if plan.reference is not None else {})},
            checked=True,
        )

    # ------------------------------------------------------------ outcomes the plugin reports

    def _keep(self, record: Record) -> Record:
        self.records.append(record)
        return record

    def skipped(self, test_id: str, plan: Plan, reason: str) -> Record:
        return self._keep(Record.skipped(test_id, self._model_json(plan.model, plan.artifact), plan.backend, reason))

    def errored(self, test_id: str, plan: Plan, error: Exception) -> Record:
        record = getattr(error, "record", None)
        if record is not None:  # EdgeCheckFailed: its record is kept already
            return Record.from_json(record)
        return self._keep(Record.errored(test_id, self._model_json(plan.model, plan.artifact), plan.backend,
                                         str(error)))

    def body_failed(self, test_id: str, plan: Plan, error: BaseException) -> Record:
        if isinstance(error, EdgeError):  # a bad artifact met in the body: the check could not run
            return self.errored(test_id, plan, error)
        return self._keep(Record.body_failed(test_id, self._model_json(plan.model, plan.artifact), plan.backend,
                                             error))

    def record_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.records]

    def state_json(self) -> dict[str, Any]:
        """What an xdist worker sends the controller at the end (``workeroutput`` is JSON)."""
        return {"records": self.record_json(), "under_load": self.measurer.under_load,
                "measured": self.measurer.measured_any, "inconclusive": self.inconclusive}

    def merge_state_json(self, state: dict[str, Any]) -> None:
        self.records.extend(Record.from_json(r) for r in state.get("records", []))
        self.measurer.under_load |= bool(state.get("under_load"))
        self.measurer.measured_any |= bool(state.get("measured"))
        self.inconclusive += int(state.get("inconclusive", 0))

    def prestart(self, backends: Sequence[str]) -> None:
        self.pool.prestart(backends)

    def close(self) -> None:
        self.pool.close()
        self.loaded.clear()


def _check_finite(outputs: Sequence[np.ndarray], info: ModelInfo) -> None:
    for spec, out in zip(info.outputs, outputs):
        out = np.asarray(out)
        if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
            raise BackendError(f"{info.backend}: output {spec.name!r} of {info.artifact} has "
                               f"{int(np.isnan(out).sum())} NaN and {int(np.isinf(out).sum())} Inf values")


def _judged_artifacts(plan: Plan, golden: Golden) -> list[Path]:
    """The artifacts whose sha256 decides whether ``golden`` is stale for ``plan``: the tested one
    (and, inside ``stale_reason``, the one the golden came from); with ``reference=`` the reference
    model's artifact the golden came from, else each of the reference model's artifacts. The tested
    artifact is not among them: checking it against another model's outputs is the test."""
    if plan.reference is None:
        return [plan.artifact] if plan.artifact is not None else []
    artifacts = list(plan.reference.artifacts.values())
    producer = golden.meta["reference"].get("artifact")
    return [a for a in artifacts if a.name == producer] or artifacts


def _for_triage(plan: Plan, golden: Golden) -> Golden:
    """The golden as triage should see it. Triage takes "the golden comes from the sibling backend"
    to mean "from the same artifact"; with reference= it came from another model's artifact, so the
    reference is labelled with that artifact too (no backend has that name, and messages read
    "the reference onnxruntime-cpu on tiny_cnn.onnx")."""
    if plan.reference is None:
        return golden
    ref = golden.meta["reference"]
    label = f"{ref['backend']} on {ref.get('artifact') or golden.model}"
    return replace(golden, meta={**golden.meta, "reference": {**ref, "backend": label}})


def _reference_problems(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec], plan: Plan,
                        golden: Golden, kind: str) -> tuple[list[int], list[str]]:
    """Tensor matching and its problems for a reference= test, naming both models."""
    tested, ref_model = plan.model.name, golden.model
    try:
        order = feed_order(reference, actual)
    except ValueError:
        return [], [f"{tested} has {len(actual)} {kind}s ({', '.join(s.name for s in actual)}), "
                    f"{ref_model} has {len(reference)} ({', '.join(s.name for s in reference)})"]
    problems = []
    for ref, index in zip(reference, order):
        act = actual[index]
        pair = f"{kind} {act.name!r} of {tested} (matched to {ref.name!r} of {ref_model})"
        if np.dtype(ref.dtype) != np.dtype(act.dtype):
            problems.append(f"{pair}: dtype {act.dtype}, {ref_model} has {ref.dtype}")
        if _shapes_differ(ref.shape, act.shape):
            problems.append(f"{pair}: shape {list(act.shape)}, {ref_model} has {list(ref.shape)}")
    return order, problems


def _quantized_io_hint(problems: Sequence[str]) -> str:
    """For an artifact with integer I/O checked against a float golden: what to do instead."""
    if any(re.search(r": dtype u?int(8|16), \S+ has float", p) for p in problems):
        return ("; reference= does not quantize inputs or dequantize outputs: export the quantized model with "
                "float inputs and outputs, or compare the two artifacts layer by layer with "
                "pytest-edge triage quant FLOAT.tflite INT8.tflite")
    return ""


def _shapes_differ(reference: Sequence[Any], actual: Sequence[Any]) -> bool:
    """Ranks differ, or a static dimension does (dynamic ones, names or None, match anything)."""
    return len(reference) != len(actual) or any(
        isinstance(a, int) and isinstance(r, int) and a >= 0 and r >= 0 and a != r
        for a, r in zip(actual, reference))


def _aligned(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec], info: ModelInfo,
             golden: Golden, kind: str, plan: Plan | None = None) -> list[int]:
    if plan is not None and plan.reference is not None:
        order, problems = _reference_problems(reference, actual, plan, golden, kind)
        if not problems:
            return order
        # The pairing of models is the user's choice, so this is a usage error, not a runtime's.
        raise EdgeUsageError(
            f"signature mismatch: {plan.model.name} ({info.artifact.name} on {info.backend}) cannot be checked "
            f"against the golden of reference model {golden.model} ({golden.folder / 'meta.json'}): "
            + "; ".join(problems) + " (reference= needs the same input and output names, or the same "
            "order, with the same shapes and dtypes)" + _quantized_io_hint(problems))
    try:
        order = feed_order(reference, actual)
    except ValueError as exc:
        problems = [f"{kind}s: {exc}"]
    else:
        problems = signature_problems(reference, actual, order, kind)
        if not problems:
            return order
    raise BackendError(f"signature mismatch: {info.artifact} on {info.backend} does not match the "
                       f"golden signature recorded in {golden.folder / 'meta.json'} "
                       f"(from {golden.reference_backend}): " + "; ".join(problems))
