"""The conformance session: loads models on backends, keeps golden outputs, runs the checks.

Plain Python, no pytest: the plugin, the ``pytest-edge`` command and the tests all drive it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import __version__
from .backends import Coverage, TensorSpec, all_backends, get_backend, reference_order
from .checks import check_coverage, check_latency, check_load, check_memory
from .compare import compare_output, resolve_tolerance, summarize
from .errors import (BackendCrash, BackendError, EdgeCheckFailed, EdgeError, EdgeUsageError, GoldenError,
                     UnknownBackend)
from .golden import Golden, GoldenCase, GoldenStore, sha256_file
from .inputs import DEFAULT_SEED, check_case, check_shapes, feed_order, generate_case, signature_problems, user_cases
from .gate import GateResult, run_gate
from .measure import combine_processes, machine_info
from .models import Model, resolve_model
from .options import EdgeSpec
from .report import find_baseline
from .worker import BackendWorker, machine_measurement_lock

# CPU the rest of the machine used during the timed runs, in cores, from which a timing counts
# as taken under load.
_LOAD_THRESHOLD_CORES = 0.5


@dataclass
class Settings:
    golden_dir: Path
    rootdir: Path
    reference_backend: str = "onnxruntime-cpu"
    update_golden: bool = False
    isolated: bool = True
    backends: list[str] | None = None
    require: list[str] = field(default_factory=list)
    atol: float = 1e-4
    rtol: float = 1e-4
    warmup: int = 5
    runs: int = 50
    threads: int = 1
    seed: int = DEFAULT_SEED
    measure: bool = False
    baseline: dict[str, Any] | None = None
    max_regression: float = 0.10
    model_dirs: list[Path] = field(default_factory=list)
    timeout_s: float = 600.0
    # Fresh worker processes per measurement, and the least time the timed runs of each take.
    processes: int = 3
    min_time_s: float = 0.25
    # A/B mode: a folder with the baseline's artifacts (same file names), measured in this job.
    baseline_models: Path | None = None
    # A stored-baseline regression seen while the machine was busy fails instead of warning.
    strict_timing: bool = False


class EdgeStepError(EdgeError):
    """An exception nobody foresaw, raised while checking: named with its step, model and backend,
    with the original chained (``--fulltrace`` shows its traceback)."""

    def __init__(self, step: str, model: str, backend: str, exc: BaseException) -> None:
        super().__init__(f"pytest-edge could not {step} {model} on {backend}: {type(exc).__name__}: {exc}")


@dataclass
class Loaded:
    """What a backend worker said about a model it loaded."""

    key: str
    backend: str
    artifact: Path
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    runtime: dict[str, Any]
    coverage: Coverage | None
    load_ms: float
    precision: str
    threads: int | None
    shapes: dict[str, tuple[int, ...]]


def _fits(shape: Sequence[int], declared: Sequence[Any]) -> bool:
    """Same rank, and every static dimension equal (dynamic ones are names, None or negative)."""
    return len(shape) == len(declared) and all(
        not isinstance(d, int) or d < 0 or d == n for n, d in zip(shape, declared))


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


class EdgeSession:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = GoldenStore(settings.golden_dir)
        self.workers: dict[str, BackendWorker] = {}
        self.loaded: dict[str, Loaded] = {}
        self.goldens: dict[str, Golden] = {}
        self.refreshed: set[str] = set()
        self.measurements: dict[tuple, dict[str, Any]] = {}
        self.twin_measurements: dict[tuple, dict[str, Any]] = {}
        self.inconclusive = 0
        self.report_error = ""  # set when --edge-report could not be written
        self.step = ""  # what check() is doing, for the message of an unexpected exception
        self._twin_coverages: dict[str, dict[str, Any] | None] = {}
        self._predicted: dict[tuple[str, str], Coverage] = {}
        self.records: list[dict[str, Any]] = []
        self.timing_under_load = False
        self.measured_any = False
        self._machine: dict[str, Any] | None = None

    # ------------------------------------------------------------ models and backends

    @property
    def machine(self) -> dict[str, Any]:
        if self._machine is None:
            self._machine = machine_info()
        return self._machine

    def suffixes(self) -> list[str]:
        return [b.suffix for b in all_backends().values()]

    def resolve(self, spec: str | None, test_dir: Path | None = None) -> Model:
        if not spec:
            raise EdgeUsageError("the edge marker needs a model: @pytest.mark.edge(model='name-or-path')")
        dirs = [d for d in (test_dir, self.settings.rootdir) if d is not None]
        dirs += [d if d.is_absolute() else self.settings.rootdir / d for d in self.settings.model_dirs]
        return resolve_model(spec, dirs, self.suffixes())

    def backend_plan(self, model: Model, spec: EdgeSpec) -> list[tuple[str, str | None]]:
        """Every backend for this test with the reason it cannot run, or None where it can."""
        registry = all_backends()
        named = [*(self.settings.backends or []), *(spec.backends or []), *spec.skip_backends,
                 *self.settings.require]
        for name in named:
            get_backend(name)  # raises UnknownBackend for a misspelt name
        names = list(registry) + [n for n in named if n not in registry]
        if self.settings.backends is not None:
            names = [n for n in names if n in self.settings.backends]
        if spec.backends is not None:
            names = [n for n in names if n in spec.backends]
        names = [n for n in dict.fromkeys(names) if n not in spec.skip_backends]
        plan = []
        for name in names:
            backend = get_backend(name)
            reason = None
            if model.artifact(backend.suffix) is None:
                reason = f"no {backend.suffix} artifact for {model.name}"
            else:
                reason = backend.unavailable_reason()
            plan.append((name, reason))
        return plan

    def worker(self, backend: str) -> BackendWorker:
        if backend not in self.workers:
            self.workers[backend] = BackendWorker(backend, isolated=self.settings.isolated,
                                                  timeout_s=self.settings.timeout_s)
        return self.workers[backend]

    def prestart(self, backends: Sequence[str]) -> None:
        """Launch these backends' workers without waiting for them (see BackendWorker.launch)."""
        if self.settings.isolated:
            for backend in dict.fromkeys(backends):
                self.worker(backend).launch()

    def _call(self, backend: str, op: str, *args: Any, artifact: Path) -> Any:
        try:
            return self.worker(backend).call(op, *args, artifact=str(artifact))
        except BackendCrash:
            # Everything that worker held is gone with it.
            self.loaded = {k: v for k, v in self.loaded.items() if v.backend != backend}
            self.measurements = {k: v for k, v in self.measurements.items() if k[0] != backend}
            raise

    def load(self, model: Model, backend: str, spec: EdgeSpec) -> Loaded:
        artifact = model.artifact(get_backend(backend).suffix)
        if artifact is None:
            raise BackendError(f"{backend}: no {get_backend(backend).suffix} artifact for {model.name}")
        threads = spec.threads or self.settings.threads
        shapes = dict(sorted(spec.shapes.items()))
        key = f"{artifact.resolve()}|{backend}|{threads}|{shapes}"
        if key not in self.loaded:
            if not artifact.is_file():
                raise BackendError(f"{backend}: artifact {artifact} does not exist")
            info = self._call(backend, "load", key, str(artifact), threads,
                              {k: tuple(v) for k, v in shapes.items()}, artifact=artifact)
            self.loaded[key] = Loaded(
                key=key, backend=backend, artifact=artifact,
                inputs=[TensorSpec.from_json(s) for s in info["inputs"]],
                outputs=[TensorSpec.from_json(s) for s in info["outputs"]],
                runtime=info["runtime"], coverage=Coverage.from_json(info["coverage"]),
                load_ms=info["load_ms"], precision=info["precision"],
                threads=threads if info["threads_applied"] else None, shapes=shapes)
        check_shapes(spec.shapes, self.loaded[key].inputs, f"{backend}: {artifact}")
        return self.loaded[key]

    @staticmethod
    def _feeds(loaded: Loaded, feeds: Sequence[Any]) -> list[np.ndarray]:
        """Positional inputs as contiguous arrays of the declared dtypes (Python scalars welcome)."""
        if len(feeds) != len(loaded.inputs):
            raise EdgeUsageError(f"{loaded.backend}: {loaded.artifact} takes {len(loaded.inputs)} inputs "
                                 f"({[s.name for s in loaded.inputs]}), got {len(feeds)}")
        arrays = []
        for x, spec in zip(feeds, loaded.inputs):
            try:
                array = np.asarray(x)
                if array.dtype.kind not in "biuf":
                    raise TypeError(f"dtype {array.dtype} is not a number type")
                array = array.astype(spec.dtype, copy=False)
                if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-d)
                    array = np.ascontiguousarray(array)
            except (TypeError, ValueError) as exc:
                raise EdgeUsageError(f"{loaded.backend}: input {spec.name!r} of {loaded.artifact} ({spec.dtype}) "
                                     f"cannot take {type(x).__name__}: {exc}") from None
            if not _fits(array.shape, spec.shape):
                # Checked here, once, for every backend: runtimes differ (LiteRT resizes silently).
                raise EdgeUsageError(f"{loaded.backend}: input {spec.name!r} of {loaded.artifact} has shape "
                                     f"{list(spec.shape)}, got an array of shape {list(array.shape)}")
            arrays.append(array)
        return arrays

    def run(self, loaded: Loaded, feeds: Sequence[Any], reset: bool = True) -> list[np.ndarray]:
        return self._call(loaded.backend, "run", loaded.key, self._feeds(loaded, feeds), reset,
                          artifact=loaded.artifact)

    # ------------------------------------------------------------ golden outputs

    def reference_backend(self, model: Model) -> str:
        try:
            get_backend(self.settings.reference_backend)
        except UnknownBackend as exc:
            raise EdgeUsageError(f"edge_reference_backend: {exc}") from None
        for name in reference_order(self.settings.reference_backend):
            backend = get_backend(name)
            if model.artifact(backend.suffix) is not None and backend.unavailable_reason() is None:
                return name
        raise GoldenError(f"no backend available here can run any artifact of {model.name} "
                          f"({', '.join(str(p) for p in model.artifacts.values())}) to record golden outputs")

    def _cases_for(self, spec: EdgeSpec, inputs: Sequence[TensorSpec], test_dir: Path | None,
                   origin: str) -> list[dict[str, np.ndarray]]:
        check_shapes(spec.shapes, inputs, origin)
        if spec.inputs is None:
            return [generate_case(inputs, spec.shapes, self.settings.seed)]
        cases = user_cases(spec.inputs, test_dir or self.settings.rootdir)
        if not cases:
            raise EdgeUsageError(f"{origin}: inputs= gave no cases")
        return [check_case(case, inputs, origin) for case in cases]

    def refresh_golden(self, model: Model, spec: EdgeSpec, test_dir: Path | None = None) -> Golden:
        reference = self.reference_backend(model)
        loaded = self.load(model, reference, spec)
        cases = []
        for case_inputs in self._cases_for(spec, loaded.inputs, test_dir, f"golden for {model.name}"):
            outputs = self.run(loaded, list(case_inputs.values()))
            self._check_finite(outputs, loaded)
            cases.append(GoldenCase(case_inputs, {s.name: o for s, o in zip(loaded.outputs, outputs)}))
        meta = {
            "model": model.name,
            "artifacts": {p.name: sha256_file(p) for p in model.artifacts.values()},
            "reference": {"backend": reference, "artifact": loaded.artifact.name,
                          "runtime": loaded.runtime},
            "seed": self.settings.seed if spec.inputs is None else None,
            "inputs_from": "signature" if spec.inputs is None else "user",
            "signature": {"inputs": [s.to_json() for s in loaded.inputs],
                          "outputs": [s.to_json() for s in loaded.outputs]},
            "plugin_version": __version__,
        }
        golden = self.store.write(model.name, meta, cases)
        self.goldens[model.name] = golden
        self.refreshed.add(model.name)
        return golden

    def golden_for(self, model: Model, spec: EdgeSpec, artifact: Path, test_dir: Path | None = None) -> Golden:
        if self.settings.update_golden and model.name not in self.refreshed:
            return self.refresh_golden(model, spec, test_dir)
        golden = self.goldens.get(model.name)
        if golden is None:
            golden = self.goldens[model.name] = self.store.load(model.name)
        if model.name not in self.refreshed:
            stale = golden.stale_reason(artifact)
            if stale:
                raise GoldenError(stale)
        if spec.inputs is not None:
            wanted = self._cases_for(spec, golden.inputs_spec, test_dir, f"golden for {model.name}")
            recorded = [c.inputs for c in golden.cases]
            same = len(wanted) == len(recorded) and all(
                w.keys() == r.keys() and all(np.array_equal(w[k], r[k]) for k in w)
                for w, r in zip(wanted, recorded))
            if not same:
                raise GoldenError(f"the inputs= of this test differ from the inputs recorded in "
                                  f"{golden.folder}; refresh with pytest --edge-update-golden")
        return golden

    # ------------------------------------------------------------ the check after a test body

    @staticmethod
    def _check_finite(outputs: Sequence[np.ndarray], loaded: Loaded) -> None:
        for spec, out in zip(loaded.outputs, outputs):
            out = np.asarray(out)
            if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
                raise BackendError(f"{loaded.backend}: output {spec.name!r} of {loaded.artifact} has "
                                   f"{int(np.isnan(out).sum())} NaN and {int(np.isinf(out).sum())} Inf values")

    def _protocol(self, spec: EdgeSpec) -> tuple[int, int]:
        return (spec.warmup if spec.warmup is not None else self.settings.warmup,
                spec.runs if spec.runs is not None else self.settings.runs)

    def baseline_twin(self, artifact: Path) -> Path | None:
        """The artifact of the same name in --edge-baseline-models, if that folder has one."""
        folder = self.settings.baseline_models
        if folder is None:
            return None
        twin = folder / artifact.name
        return twin if twin.is_file() else None

    def measure(self, loaded: Loaded, feeds: Sequence[np.ndarray], spec: EdgeSpec) -> dict[str, Any]:
        """The measurement protocol, once per (model, backend, warmup, runs): ``processes`` fresh
        worker processes, each a real cold start whose memory peak inherits nothing from other
        models; with a baseline twin (A/B mode) the twin's processes alternate with these."""
        warmup, runs = self._protocol(spec)
        key = (loaded.backend, loaded.key, warmup, runs)
        if key not in self.measurements:
            feeds = self._feeds(loaded, feeds)
            twin = self.baseline_twin(loaded.artifact)
            if not self.settings.isolated:  # --edge-isolation=none: in this process, for debugging
                result = self._measure_in_process(loaded, feeds, warmup, runs)
            elif twin is not None:
                result, self.twin_measurements[key] = self.measure_rounds(loaded, [loaded.artifact, twin],
                                                                          feeds, warmup, runs)
            else:
                (result,) = self.measure_rounds(loaded, [loaded.artifact], feeds, warmup, runs)
            self.timing_under_load |= bool(result["under_load"])
            self.measured_any = True
            self.measurements[key] = result
        return self.measurements[key]

    def _measure_in_process(self, loaded: Loaded, feeds: Sequence[np.ndarray], warmup: int,
                            runs: int) -> dict[str, Any]:
        with machine_measurement_lock():
            result = self._call(loaded.backend, "measure", loaded.key, list(feeds), warmup, runs,
                                self.settings.min_time_s, artifact=loaded.artifact)
            result["load_ms"] = loaded.load_ms
            if result["peak_memory_mb"] is None and not result.get("hwm_reset"):
                (fresh,) = self.measure_rounds(loaded, [loaded.artifact], feeds, warmup, runs, processes=1)
                result.update(peak_memory_mb=fresh["peak_memory_mb"], steady_memory_mb=fresh["steady_memory_mb"])
        return combine_processes([result], _LOAD_THRESHOLD_CORES)

    def measure_rounds(self, loaded: Loaded, artifacts: Sequence[Path], feeds: Sequence[np.ndarray],
                       warmup: int, runs: int, processes: int | None = None) -> list[dict[str, Any]]:
        """``processes`` fresh workers per artifact, timed in rounds (A B, A B, ...), one figure set
        per artifact. Every worker is started (runtime imported) before the first timed window, so
        imports never compete with a timing; the machine-wide lock keeps other xdist workers'
        measurements out of the window."""
        count = processes or self.settings.processes
        rounds = [[BackendWorker(loaded.backend, isolated=True, timeout_s=self.settings.timeout_s)
                   for _ in artifacts] for _ in range(count)]
        results: list[list[dict[str, Any]]] = [[] for _ in artifacts]
        try:
            with machine_measurement_lock():
                for workers in rounds:
                    for worker in workers:
                        worker.launch()
                for workers in rounds:
                    for index, (worker, artifact) in enumerate(zip(workers, artifacts)):
                        results[index].append(self._measure_once(worker, loaded, artifact, feeds, warmup, runs))
                        worker.close()
        finally:
            for workers in rounds:
                for worker in workers:
                    worker.close()
        return [combine_processes(per_artifact, _LOAD_THRESHOLD_CORES) for per_artifact in results]

    def _measure_once(self, worker: BackendWorker, loaded: Loaded, artifact: Path, feeds: Sequence[np.ndarray],
                      warmup: int, runs: int) -> dict[str, Any]:
        info = worker.call("load", loaded.key, str(artifact), loaded.threads, loaded.shapes, False,
                           artifact=str(artifact))
        result = worker.call("measure", loaded.key, list(feeds), warmup, runs, self.settings.min_time_s,
                             artifact=str(artifact))
        result["load_ms"] = info["load_ms"]
        return result

    def predicted_coverage(self, loaded: Loaded, target: str) -> Coverage | None:
        """Coverage for a mobile ``target`` where the backend can predict it, else None (the
        backend's own figure stands)."""
        backend = get_backend(loaded.backend)
        if target not in backend.predicts_targets:
            return None
        key = (str(loaded.artifact), target)
        if key not in self._predicted:
            self._predicted[key] = backend.predicted_coverage(loaded.artifact, target)
        return self._predicted[key]

    def wants_measurement(self, spec: EdgeSpec) -> bool:
        return (self.settings.measure or spec.needs_measurement or self.settings.baseline is not None
                or self.settings.baseline_models is not None)

    def check(self, test_id: str, model: Model, backend: str, spec: EdgeSpec,
              test_dir: Path | None = None) -> dict[str, Any]:
        """Run the golden comparison and every budget of ``spec``; return the record.

        Raises :class:`EdgeCheckFailed` listing every violation, or another :class:`EdgeError`
        when the check could not run at all (bad artifact, missing golden). This is the one place
        where an unexpected exception becomes an :class:`EdgeError` naming the step it broke.
        """
        self.step = "load"
        try:
            return self._check(test_id, model, backend, spec, test_dir)
        except EdgeError:
            raise
        except Exception as exc:
            raise EdgeStepError(self.step, model.name, backend, exc) from exc

    def _check(self, test_id: str, model: Model, backend: str, spec: EdgeSpec,
               test_dir: Path | None) -> dict[str, Any]:
        loaded = self.load(model, backend, spec)
        self.step = "refresh the golden of" if self.settings.update_golden else "read the golden of"
        golden = self.golden_for(model, spec, loaded.artifact, test_dir)
        self.step = "compare"
        in_order = self._aligned(golden.inputs_spec, loaded.inputs, loaded, golden, "input")
        out_order = self._aligned(golden.outputs_spec, loaded.outputs, loaded, golden, "output")
        defaults = {"atol": spec.atol if spec.atol is not None else self.settings.atol,
                    "rtol": spec.rtol if spec.rtol is not None else self.settings.rtol,
                    "min_cosine": spec.min_cosine, "min_snr_db": spec.min_snr_db,
                    "topk_agreement": spec.topk_agreement}
        violations: list[str] = []
        comparisons = []
        first_feeds: list[np.ndarray] = []
        failing_case: tuple[list[Any], Any] | None = None
        for index, case in enumerate(golden.cases):
            feeds: list[Any] = [None] * len(loaded.inputs)
            for ref, position in zip(golden.inputs_spec, in_order):
                feeds[position] = case.inputs[ref.name]
            first_feeds = first_feeds or feeds
            outputs = self.run(loaded, feeds)
            for ref, position in zip(golden.outputs_spec, out_order):
                tolerance = resolve_tolerance(defaults, spec.tolerances, backend, ref.name)
                comparison = compare_output(ref.name, case.outputs[ref.name], outputs[position], tolerance)
                comparisons.append(comparison)
                prefix = f"{backend}: " + (f"case {index}: " if len(golden.cases) > 1 else "")
                violations += [prefix + p for p in comparison.problems]
                if comparison.problems and failing_case is None:
                    failing_case = (feeds, case)
        if failing_case is not None:
            violations += self._sibling_triage(model, backend, spec, golden, failing_case, defaults)

        coverage = loaded.coverage
        predicted = self.predicted_coverage(loaded, spec.target) if spec.target is not None else None
        if predicted is not None:
            coverage = predicted  # backends that cannot predict a target keep their own figures
        if get_backend(backend).has_delegate or predicted is not None:
            violations += check_coverage(coverage, spec.max_fallback, spec.max_partitions, backend)
        measured: dict[str, Any] = {}
        if self.wants_measurement(spec):
            self.step = "measure"
            measured = self.measure(loaded, first_feeds, spec)
            budgets = {"p50_ms": spec.p50_ms, "p90_ms": spec.p90_ms, "p99_ms": spec.p99_ms}
            violations += check_latency(measured["latency_ms"], measured["measured_runs"], budgets, backend)
            violations += check_memory(measured["peak_memory_mb"], spec.peak_memory_mb, backend)
        violations += check_load(measured.get("load_ms", loaded.load_ms), spec.max_load_ms, backend)

        record = self._record(test_id, model, loaded, golden, coverage, comparisons, measured, first_feeds)
        gate = self._regression_gate(loaded, first_feeds, spec, record) if measured else GateResult()
        violations += gate.failures
        if gate.summary:
            record["baseline_check"] = {**gate.summary, "inconclusive": gate.inconclusive, "notes": gate.notes}
        self.inconclusive += len(gate.inconclusive)
        record["warnings"] = gate.inconclusive
        record["verdict"] = "failed" if violations else "passed"
        record["violations"] = violations
        self.records.append(record)
        if violations:
            raise EdgeCheckFailed(violations, record)
        return record

    def _regression_gate(self, loaded: Loaded, feeds: Sequence[np.ndarray], spec: EdgeSpec,
                         record: dict[str, Any]) -> GateResult:
        """A/B against the twin artifact where --edge-baseline-models has one, else against the
        stored baseline record; a suspected latency regression is re-measured before it counts."""
        warmup, runs = self._protocol(spec)
        twin = self.baseline_twin(loaded.artifact)
        twin_measured = self.twin_measurements.get((loaded.backend, loaded.key, warmup, runs))
        feeds = self._feeds(loaded, feeds)
        if twin is not None and twin_measured is not None:
            baseline = {"backend": loaded.backend, **twin_measured,
                        "coverage": self._twin_coverage(loaded, twin)}

            def remeasure() -> tuple[dict[str, Any], dict[str, Any] | None]:
                mine, theirs = self.measure_rounds(loaded, [loaded.artifact, twin], feeds, warmup, runs)
                return {"backend": loaded.backend, **mine}, theirs

            source, paired = _relative(twin, self.settings.rootdir), True
        else:
            stored = find_baseline(self.settings.baseline, record)
            if stored is None:
                return GateResult()
            baseline = stored

            def remeasure() -> tuple[dict[str, Any], dict[str, Any] | None]:
                (mine,) = self.measure_rounds(loaded, [loaded.artifact], feeds, warmup, runs)
                return {"backend": loaded.backend, **mine}, None

            source, paired = stored.get("test", "?"), False
        return run_gate(record, baseline, paired=paired, max_regression=self.settings.max_regression,
                        strict=self.settings.strict_timing, remeasure=remeasure, source=source)

    def _twin_coverage(self, loaded: Loaded, twin: Path) -> dict[str, Any] | None:
        key = f"twin|{loaded.key}"
        if key not in self._twin_coverages:
            info = self._call(loaded.backend, "load", key, str(twin), loaded.threads, loaded.shapes,
                              artifact=twin)
            self._twin_coverages[key] = info["coverage"]
        return self._twin_coverages[key]

    def _sibling_triage(self, model: Model, backend: str, spec: EdgeSpec, golden: Golden,
                        failing: tuple[list[Any], Any], defaults: Mapping[str, Any]) -> list[str]:
        """Run the same artifact without the delegate (litert -> litert-ref): if that agrees with the
        golden, the delegate's kernels diverge; if not, the artifact itself does (export,
        conversion, quantization)."""
        sibling = get_backend(backend).reference_sibling
        if sibling is not None and sibling == golden.reference_backend:
            return [f"triage: the golden comes from {sibling} on the same artifact: the {backend} "
                    "delegate's kernels diverge, not the artifact"]
        if sibling is None or get_backend(sibling).unavailable_reason():
            return []
        feeds, case = failing
        try:
            loaded = self.load(model, sibling, spec)
            outputs = self.run(loaded, feeds)
            order = feed_order(golden.outputs_spec, loaded.outputs)
        except (EdgeError, ValueError):
            return []
        disagree = [ref.name for ref, position in zip(golden.outputs_spec, order)
                    if compare_output(ref.name, case.outputs[ref.name], outputs[position],
                                      resolve_tolerance(defaults, spec.tolerances, sibling, ref.name)).problems]
        artifact = loaded.artifact.name
        if disagree:
            return [f"triage: {sibling} on the same {artifact} also differs from the golden "
                    f"({', '.join(disagree)}): the artifact itself disagrees with the reference "
                    f"{golden.reference_backend} (look at its export/conversion, then quantization)"]
        return [f"triage: {sibling} on the same {artifact} matches the golden: the {backend} delegate's "
                "kernels diverge, not the artifact"
                + self._first_divergence(backend, sibling, model, spec, feeds, golden, defaults)]

    def _first_divergence(self, backend: str, sibling: str, model: Model, spec: EdgeSpec, feeds: list[Any],
                          golden: Golden, defaults: Mapping[str, Any]) -> str:
        """The first operator (in graph order) whose output differs between a backend and its
        delegate-free sibling, where the runtime exposes intermediate tensors (LiteRT)."""
        found = []
        for name in (backend, sibling):
            loaded = self.load(model, name, spec)
            try:
                found.append(self._call(name, "intermediates", loaded.key, self._feeds(loaded, feeds),
                                        artifact=loaded.artifact))
            except EdgeError:
                return ""
        mine, theirs = found
        if not mine or not theirs:
            return ""
        if not mine["delegated"]:
            return ("; this runtime does not delegate when intermediate tensors are preserved, so the "
                    "diverging operator cannot be named")
        tolerance = resolve_tolerance(defaults, spec.tolerances, backend, golden.outputs_spec[0].name)
        atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
        for tensor in theirs["order"]:
            a, b = mine["tensors"].get(tensor), theirs["tensors"].get(tensor)
            if a is None or b is None or a.shape != b.shape or a.dtype.kind not in "fiu":
                continue
            if not np.allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol):
                err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                return (f"; first divergence: tensor {theirs['names'].get(tensor, tensor)!r}, the output of "
                        f"{mine['producers'][tensor]} (max |Δ| {err:.3g} against {sibling})")
        return ""

    def _aligned(self, reference: Sequence[TensorSpec], actual: Sequence[TensorSpec], loaded: Loaded,
                 golden: Golden, kind: str) -> list[int]:
        try:
            order = feed_order(reference, actual)
        except ValueError as exc:
            problems = [f"{kind}s: {exc}"]
        else:
            problems = signature_problems(reference, actual, order, kind)
            if not problems:
                return order
        raise BackendError(f"signature mismatch: {loaded.artifact} on {loaded.backend} does not match the "
                           f"golden signature recorded in {golden.folder / 'meta.json'} "
                           f"(from {golden.reference_backend}): " + "; ".join(problems))

    def _record(self, test_id: str, model: Model, loaded: Loaded, golden: Golden,
                coverage: Coverage | None, comparisons: list, measured: Mapping[str, Any],
                feeds: Sequence[np.ndarray]) -> dict[str, Any]:
        root = self.settings.rootdir
        return {
            "test": test_id,
            "model": {"name": model.name, "artifact": _relative(loaded.artifact, root),
                      "sha256": sha256_file(loaded.artifact)},
            "backend": loaded.backend,
            "runtime": loaded.runtime,
            "plugin": {"name": "pytest-edge", "version": __version__},
            "precision": loaded.precision,
            "threads": loaded.threads,
            "input": {s.name: {"shape": list(np.shape(x)), "dtype": s.dtype}
                      for s, x in zip(loaded.inputs, feeds)},
            "warmup_runs": measured.get("warmup_runs"),
            "measured_runs": measured.get("measured_runs"),
            "coverage": coverage.to_json() if coverage else None,
            "load_ms": measured.get("load_ms", loaded.load_ms),
            "first_inference_ms": measured.get("first_inference_ms"),
            "latency_ms": measured.get("latency_ms"),
            "peak_memory_mb": measured.get("peak_memory_mb"),
            "steady_memory_mb": measured.get("steady_memory_mb"),
            "drift": measured.get("drift"),
            "timing_under_load": measured.get("under_load"),
            "other_cores_busy": measured.get("other_cores_busy"),
            "processes": measured.get("processes"),
            "process_spread": measured.get("process_spread"),
            "accuracy": {"reference": golden.reference_backend, "cases": len(golden.cases),
                         **summarize(comparisons)},
        }

    def skipped_record(self, test_id: str, model: Model, backend: str, reason: str) -> dict[str, Any]:
        suffix = get_backend(backend).suffix
        artifact = model.artifact(suffix)
        record = {
            "test": test_id,
            "model": {"name": model.name,
                      "artifact": _relative(artifact, self.settings.rootdir) if artifact else None,
                      "sha256": sha256_file(artifact) if artifact and artifact.is_file() else None},
            "backend": backend, "verdict": "skipped", "skip_reason": reason, "violations": [],
        }
        self.records.append(record)
        return record

    def error_record(self, test_id: str, model: Model, backend: str, error: Exception) -> dict[str, Any]:
        record = self.skipped_record(test_id, model, backend, "")
        record.pop("skip_reason")
        record.update(verdict="error", violations=[str(error)])
        return record

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
        self.loaded.clear()

