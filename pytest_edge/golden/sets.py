"""The golden sets of one session: which input set a test reads (generated inputs, or the key of its
``inputs=``), reading it from the store (or a legacy golden of the model's folder), checking it is
not stale, and recording it on the reference backend with ``--edge-update-golden``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from .. import __version__
from ..backends import TensorSpec, get_backend, reference_order
from ..errors import BackendError, EdgeError, EdgeManyCases, EdgeUsageError, GoldenError, UnknownBackend
from ..core.external_data import artifact_digests
from ..files import relative_path, sha256_file
from ..accuracy.inputs import check_case, check_shapes, generate_case, refuse_non_numbers, user_cases
from ..core.marker import MarkerSpec
from ..core.models import Model, ModelKeys
from ..core.plan import Plan, resolve_reference
from ..core.settings import Settings
from ..worker.pool import ModelInfo
from ..core.record_blocks import RuntimeIdentity, read_block
from .layout import DEFAULT_SET, Golden, GoldenCase, GoldenMeta, GoldenReference, GoldenSignature, input_key
from .store import GoldenStore

# More inputs= cases than this for one model get a warning: each is a golden file and a run per backend.
MANY_CASES = 100


class Runner(Protocol):
    """What recording a golden needs of the session: find a model, load it, run it."""

    def resolve(self, name: str | None, test_dir: Path | None = None) -> Model: ...

    def load(self, plan: Plan) -> ModelInfo: ...

    def run(self, info: ModelInfo, feeds: Sequence[Any], reset: bool = True) -> list[np.ndarray]: ...

    @property
    def arch(self) -> str | None:
        """This machine's ISA (``x86_64``, ``aarch64``), as its runtimes see it."""
        ...


class GoldenSets:
    """The golden of each (model, input set) this session read or recorded; reading never writes."""

    def __init__(self, settings: Settings, runner: Runner, keys: ModelKeys | None = None) -> None:
        self.settings = settings
        self.runner = runner
        self.keys = keys or ModelKeys()
        self.store = GoldenStore(settings.golden_dir)
        # Keyed by (model, input set): each input set of a model has its own golden.
        self.loaded: dict[tuple[str, str], Golden] = {}
        self.refreshed: set[tuple[str, str]] = set()
        self._set_keys: dict[tuple[str, str, int], tuple[Any, str]] = {}

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
        raise GoldenError(f"no backend available here can run any artifact of {model.key} "
                          f"({', '.join(str(p) for p in model.artifacts.values())}) to record golden outputs")

    def cases(self, plan: Plan, inputs: Sequence[TensorSpec], origin: str) -> list[dict[str, np.ndarray]]:
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
        return self.input_set_of(plan.marker.inputs, plan.test_dir or self.settings.rootdir, plan.golden_model.key)

    def input_set_of(self, inputs: Any, test_dir: Path, model: str) -> str:
        if inputs is None:
            return DEFAULT_SET
        memo = (model, str(test_dir), id(inputs))
        if memo not in self._set_keys:  # the inputs object is kept, so its id is not reused
            try:
                cases = user_cases(inputs, test_dir)
                refuse_non_numbers(cases)
            except EdgeUsageError as exc:
                raise EdgeUsageError(f"model {model}: {exc}") from None
            if len(cases) > MANY_CASES:
                warnings.warn(EdgeManyCases(
                    f"model {model}: inputs= gave {len(cases)} cases; each is a golden file of its own "
                    f"({len(cases)} files under {self.settings.golden_dir / model}) and a run of every backend: "
                    "a few representative cases usually say as much"), stacklevel=2)
            self._set_keys[memo] = (inputs, input_key(cases))
        return self._set_keys[memo][1]

    def ensure(self, plan: Plan) -> None:
        """With --edge-update-golden, record the test's input set once per session (before a
        test's body, so a failing body still leaves one); without it, nothing. With ``reference=``
        the reference model's set is the one recorded."""
        if self.settings.update_golden and (plan.golden_model.key, self.input_set(plan)) not in self.refreshed:
            self.refresh(plan)

    def folder_of(self, model: Model) -> str:
        """Where ``model``'s goldens are read under the golden folder: its key; where nothing is stored
        there yet, its stem's folder (where goldens lay before keys) if that holds goldens and no other
        model of this session has that stem. Writes always go to the key (docs/goldens.md)."""
        if model.key == model.name or self.store.sets(model.key) or not self.store.sets(model.name):
            return model.key
        return model.name if self.keys.sole_of_stem(model) else model.key

    def refresh(self, plan: Plan) -> Golden:
        """Record the golden of the test's input set; the model's other sets are not touched.
        With ``reference=`` that is the reference model's golden, from the reference model's own
        artifacts: the tested (say quantized) artifact's outputs never become a golden."""
        plan = plan.golden_plan
        model = plan.model
        key = self.input_set(plan)
        info = self.runner.load(plan.on(self.reference_backend(model)))
        stored = self._stored_meta(model.key, key)
        check_owner(self.store.folder(model.key, key), stored.reference.path if stored is not None else None, model,
                    self.settings.rootdir)
        cases = []
        for case_inputs in self.cases(plan, info.inputs, f"golden for {model.key}"):
            outputs = self.runner.run(info, list(case_inputs.values()))
            check_finite(outputs, info)
            cases.append(GoldenCase(case_inputs, {s.name: o for s, o in zip(info.outputs, outputs)}))
        meta = GoldenMeta(
            model=model.key,
            # Each artifact and, for an .onnx, its external data files: the weights are part of it.
            artifacts={name: digest for p in model.artifacts.values()
                       for name, digest in artifact_digests(p, sha256_file).items()},
            reference=GoldenReference(
                backend=info.backend, artifact=info.artifact.name, runtime=read_block(RuntimeIdentity, info.runtime),
                path=relative_path(info.artifact, self.settings.rootdir), sha256=sha256_file(info.artifact),
                isa=(info.device.arch or None) if info.device else self.runner.arch),
            seed=self.settings.seed if plan.marker.inputs is None else None,
            inputs_from="signature" if plan.marker.inputs is None else "user",
            signature=GoldenSignature(tuple(info.inputs), tuple(info.outputs)),
            plugin_version=__version__)
        golden = self.store.write(model.key, meta, cases, key)
        self.loaded[(model.key, key)] = golden
        self.refreshed.add((model.key, key))
        return golden

    def _stored_meta(self, folder: str, key: str) -> GoldenMeta | None:
        """The meta of the golden stored at ``folder`` (None: none, or unreadable: a refresh replaces it)."""
        try:
            return self.store.load(folder, key).meta if self.store.exists(folder, key) else None
        except EdgeError:
            return None

    def same_inputs(self, plan: Plan, golden: Golden) -> bool:
        """Whether the recorded inputs of ``golden`` are the test's ``inputs=`` (converted to the
        recorded signature's dtypes, as a refresh would record them)."""
        wanted = self.cases(plan, golden.inputs_spec, f"golden for {plan.model.key}")
        recorded = [c.inputs for c in golden.cases]
        return len(wanted) == len(recorded) and all(
            w.keys() == r.keys() and all(np.array_equal(w[k], r[k]) for k in w)
            for w, r in zip(wanted, recorded))

    def _legacy_set(self, plan: Plan) -> Golden | None:
        """Before input sets, a test's ``inputs=`` were recorded in the model's folder itself: that
        golden still serves the test whose inputs it holds, until its own set is recorded."""
        folder = self.folder_of(plan.model)
        if not self.store.exists(folder):
            return None
        legacy = self.store.load(folder)
        if legacy.meta.inputs_from == "user" and self.same_inputs(plan, legacy):
            return legacy
        return None

    def stored_set(self, plan: Plan) -> str:
        """The set a test reads: its own, or ``default`` where only a legacy golden of the model's
        folder holds its inputs. Used to tell which stored sets are in use (of the golden's model:
        :meth:`used`)."""
        plan = plan.golden_plan
        key = self.input_set(plan)
        if key == DEFAULT_SET or self.store.exists(self.folder_of(plan.model), key):
            return key
        try:
            return DEFAULT_SET if self._legacy_set(plan) is not None else key
        except EdgeError:  # an unreadable default set serves nobody; its test says why
            return key

    def used(self, plan: Plan) -> set[tuple[str, str]]:
        """(model, set) of every stored golden set this test reads: with ``reference=`` they belong
        to the reference model, not to the tested one."""
        name = self.folder_of(plan.golden_model)
        return {(name, self.input_set(plan)), (name, self.stored_set(plan))}

    def model_name(self, marker: MarkerSpec, test_dir: Path | None = None) -> str:
        """The name under golden/ that a marker's tests read (the reference model's with
        ``reference=``), for a test that has no plan (no backend selected)."""
        model = self.runner.resolve(marker.model, test_dir)
        reference = resolve_reference(self.settings, marker, model, test_dir)
        return self.folder_of(reference or model)

    def known(self, plan: Plan) -> Golden | None:
        """The test's golden where one can be read, else None: a load asks it for the golden's input
        names and shapes (an artifact named or shaped otherwise gets them by position) before the
        check needs the golden itself, and says its errors there."""
        try:
            return self.golden_for(plan)
        except EdgeError:
            return None

    def golden_for(self, plan: Plan) -> Golden:
        """The golden of the test's input set as stored (or as refreshed in this session);
        reading never writes. With ``reference=``, the reference model's golden of that set."""
        source = plan.golden_plan
        model = source.model
        key = self.input_set(source)
        # Said after every golden error of a reference= test, so the user knows whose golden it is.
        whose = (f" (the golden of reference={plan.marker.reference!r}, against which "
                 f"{plan.model.key!r} is checked)" if plan.reference is not None else "")
        folder = self.folder_of(model)
        golden = self.loaded.get((folder, key))
        if golden is None:
            try:
                if key != DEFAULT_SET and not self.store.exists(folder, key):
                    golden = self._legacy_set(source)
                if golden is None:
                    golden = self.store.load(folder, key)
            except GoldenError as exc:
                if not whose:
                    raise
                raise GoldenError(f"{exc}{whose}") from exc
            self.loaded[(folder, key)] = golden
        if (folder, key) not in self.refreshed:
            for artifact in judged_artifacts(plan, golden):
                stale = golden.stale_reason(artifact)
                if stale:
                    raise GoldenError(stale + whose)
        if source.marker.inputs is not None and not self.same_inputs(source, golden):
            # The key names the inputs, so this is a hand-edited or colliding set.
            raise GoldenError(f"the inputs= of this test differ from the inputs recorded in "
                              f"{golden.folder}; refresh with pytest --edge-update-golden")
        return golden


def check_finite(outputs: Sequence[np.ndarray], info: ModelInfo) -> None:
    for spec, out in zip(info.outputs, outputs):
        out = np.asarray(out)
        if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
            raise BackendError(f"{info.backend}: output {spec.name!r} of {info.artifact} has "
                               f"{int(np.isnan(out).sum())} NaN and {int(np.isinf(out).sum())} Inf values")


def decoder_folder(store: GoldenStore, model: Model, keys: ModelKeys) -> str:
    """Where ``model``'s decoder goldens (``llm/``) are read, by the rule of
    :meth:`GoldenSets.folder_of`: its key, else its stem's old folder while no other model of the
    session has that stem. Writes always go to the key."""
    if model.key == model.name or store.prompts(model.key) or not store.prompts(model.name):
        return model.key
    return model.name if keys.sole_of_stem(model) else model.key


def check_owner(folder: Path, recorded: str | None, model: Model, rootdir: Path) -> None:
    """Refuse to write over a golden another model's artifact made: ``recorded`` (what the golden in
    ``folder`` says of the artifact that made it: its path in the project; None where there is no
    golden) names that artifact; where that is a file that still exists and is none of ``model``'s
    artifacts, the golden is another model's (a moved model, a key that changed with edge_model_dirs)."""
    if not isinstance(recorded, str):
        return  # none there, or recorded before goldens named their artifact: nothing to tell
    other = rootdir / recorded
    if other.exists() and other.resolve() not in {Path(a).resolve() for a in model.artifacts.values()}:
        raise GoldenError(f"{folder} was recorded from {recorded}, which is not an artifact of {model.key} "
                          f"({', '.join(relative_path(a, rootdir) for a in model.artifacts.values())}): "
                          "--edge-update-golden does not write over another model's golden (docs/goldens.md, "
                          "a model's key)")


def judged_artifacts(plan: Plan, golden: Golden) -> list[Path]:
    """The artifacts whose sha256 decides whether ``golden`` is stale for ``plan``: the tested one
    (and, inside ``stale_reason``, the one the golden came from); with ``reference=`` the reference
    model's artifact the golden came from, else each of the reference model's artifacts. The tested
    artifact is not among them: checking it against another model's outputs is the test."""
    if plan.reference is None:
        return [plan.artifact] if plan.artifact is not None else []
    artifacts = list(plan.reference.artifacts.values())
    producer = golden.meta.reference.artifact
    return [a for a in artifacts if a.name == producer] or artifacts
