"""``Plan``: one test's model on one backend, resolved at collection from the marker and the
settings. It is the ``edge_model`` parametrization value, the fixture holds it, and it is the one
argument the core takes: what to compare with which tolerance, which budgets, how to measure."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..devices.kinds import DeviceKind, device_kind
from ..backends import (Backend, all_artifact_suffixes, all_backends, compile_targets, get_backend, split_device,
                        tensor_backends)
from ..backends.base import no_tensors_reason
from ..errors import EdgeUsageError
from ..accuracy.compare import Tolerance, resolve_tolerance
from ..checks import DRIFT_BUDGET
from .marker import MarkerSpec, parse_marker
from ..measurement.timing import DRIFT_MIN_TIME_S
from .models import Model, ModelKeys, resolve_model
from .settings import Settings


@dataclass(frozen=True)
class Plan:
    model: Model
    backend: str
    test_dir: Path
    marker: MarkerSpec = field(compare=False)
    unavailable: str | None = None  # why the backend cannot run here (a skip, or a --edge-require failure)
    required: bool = False
    # The user named this backend (marker backends=, edge_backends, --edge-backends, --edge-require):
    # a borrowed artifact it does not convert fails the test instead of being reported (DoesNotConvert).
    targeted: bool = False
    threads: int = 1
    warmup: int = 5
    runs: int = 50
    min_time_s: float = 0.0  # least time each measuring process spends on timed runs
    measure: bool = False  # time and measure memory after the golden check
    defaults: Tolerance = field(default_factory=Tolerance, compare=False)  # tolerances before overrides
    # ``reference=``: the model whose golden this plan's artifact is checked against (None: its own).
    reference: Model | None = None

    @property
    def golden_model(self) -> Model:
        """The model that owns the golden this plan is checked against."""
        return self.reference or self.model

    @property
    def golden_plan(self) -> "Plan":
        """This test as the owner of its golden sees it: the reference model (its golden is read,
        refreshed and judged stale from its own artifacts), the same inputs= and shapes=."""
        return self if self.reference is None else replace(self, model=self.reference, reference=None)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.marker.shapes

    @property
    def artifact(self) -> Path | None:
        return get_backend(self.backend).artifact_of(self.model)

    @property
    def kind(self) -> str:
        """Which check runs it (run.kinds): "compiled" on a compile-time target, else "tensor"."""
        return "compiled" if get_backend(self.backend).compile_only else "tensor"

    @property
    def reads_golden(self) -> bool:
        """Its check compares outputs with a golden (a compile-time target's executes nothing, so
        --edge-update-golden records none for it)."""
        return self.kind == "tensor"

    def tolerance(self, output: str, backend: str | None = None) -> Tolerance:
        """The tolerances for one output on ``backend`` (this plan's by default), overrides applied."""
        return resolve_tolerance(self.defaults, self.marker.tolerances, backend or self.backend, output)

    def on(self, backend: str) -> "Plan":
        """The same test on another backend (the golden's reference, a delegate's sibling)."""
        return replace(self, backend=backend, unavailable=None, required=False, targeted=False)


def search_dirs(settings: Settings, test_dir: Path | None) -> list[Path]:
    """Where a model named by the marker is looked for: the test file's folder, the rootdir, then
    each ``edge_model_dirs`` folder."""
    dirs = [d for d in (test_dir, settings.rootdir) if d is not None]
    return dirs + [d if d.is_absolute() else settings.rootdir / d for d in settings.model_dirs]


def key_bases(settings: Settings) -> list[Path]:
    """The folders a model's key is relative to: each ``edge_model_dirs`` folder, then the rootdir."""
    return [d if d.is_absolute() else settings.rootdir / d for d in settings.model_dirs] + [settings.rootdir]


def resolve_reference(settings: Settings, marker: MarkerSpec, model: Model, test_dir: Path | None) -> Model | None:
    """The model named by ``reference=`` (None without one), found as ``model=`` is; an unknown
    one is an EdgeUsageError naming the reference and the places searched."""
    if marker.reference is None:
        return None
    try:
        reference = resolve_model(marker.reference, search_dirs(settings, test_dir),
                                  all_artifact_suffixes(), key_bases(settings), keyword="reference")
    except EdgeUsageError as exc:
        raise EdgeUsageError(f"reference={marker.reference!r} of model {model.name!r}: {exc}") from None
    if reference.key == model.key:
        # Goldens are kept per model key: this would be the test's own golden under another label.
        raise EdgeUsageError(f"reference={marker.reference!r} names the tested model {model.name!r} itself; "
                             "drop reference= (a model is checked against its own golden by default)")
    return reference


def plan_for(settings: Settings, marker: MarkerSpec, model: Model, backend: str, test_dir: Path,
             unavailable: str | None = None, reference: Model | None = None) -> Plan:
    # Against another model's golden (an int8 artifact against the float one) the ini's atol/rtol
    # (1e-4, meant for the same network in another runtime) would always fail: once the marker
    # names any tolerance of its own, only those apply. A marker that names none keeps the defaults.
    # A reference= test, or a marker that names only statistical checks (min_cosine, min_snr_db,
    # topk_agreement: the tools for quantized artifacts), is judged by what it names alone: the
    # ini's element-wise atol/rtol would fail every int8 model on rounding the marker accepts.
    own_only = (reference is not None and marker.names_tolerance) or marker.statistical_only
    return Plan(
        model=model, backend=backend, test_dir=test_dir, marker=marker, unavailable=unavailable,
        required=backend in settings.require,
        targeted=(backend in settings.require or backend in (settings.backends or ())
                  or backend in (marker.backends or ())),
        threads=marker.threads or settings.threads,
        warmup=marker.warmup if marker.warmup is not None else settings.warmup,
        runs=marker.runs if marker.runs is not None else settings.runs,
        # A drift figure needs two windows long enough to say how fast the model ran in each.
        min_time_s=max(settings.min_time_s, DRIFT_MIN_TIME_S if marker.budget(DRIFT_BUDGET) is not None else 0.0),
        measure=settings.measure or marker.needs_measurement or settings.gating,
        reference=reference,
        defaults=Tolerance(atol=marker.atol if marker.atol is not None or own_only else settings.atol,
                           rtol=marker.rtol if marker.rtol is not None or own_only else settings.rtol,
                           min_cosine=marker.min_cosine, min_snr_db=marker.min_snr_db,
                           topk_agreement=marker.topk_agreement))



@dataclass(frozen=True)
class Unresolved:
    """A marked test whose marker or model could not be resolved at collection: parametrized with
    this instead, so it is an error of that test (at setup, naming it), never a collection error
    that interrupts the session and the other tests with it."""

    message: str

def is_pattern(name: str) -> bool:
    """A backend selection that is a shell-style pattern (``*@pi5``, ``onnxruntime-*``), not a name."""
    return any(c in name for c in "*?[")


def expand_patterns(names: list[str] | None, registry: Any, devices: Any, others: Any = ()) -> list[str] | None:
    """The backends a selection names: names as given, patterns (``*@pi5``: every registered
    runtime on the device pi5; ``onnxruntime-*``) matched against the registered backends and each
    of them on each configured device. A pattern that matches none of ``registry`` but some of
    ``others`` (backends that cannot run this kind of test: ``*-genai`` for a tensor test) selects
    those, as naming them would (each is then skipped with its reason). A pattern that matches
    nothing is an error naming it. A pattern selects; it does not target (a borrowed artifact a
    matched backend does not convert is reported, not failed: only a backend named in full is
    targeted)."""
    if names is None:
        return None

    def universe(backends: Any) -> list[str]:
        return [*backends, *(f"{b}@{d}" for d in devices for b in backends
                             if not (get_backend(b).compile_only or get_backend(b).named_only))]

    found: list[str] = []
    for name in names:
        if not is_pattern(name):
            found.append(name)
            continue
        matches = fnmatch.filter(universe(registry), name) or fnmatch.filter(universe(others), name)
        if not matches:
            raise EdgeUsageError(f"backend pattern {name!r} matches no backend (registered: "
                                 f"{', '.join(dict.fromkeys([*registry, *others]))}; devices: {', '.join(devices) or 'none'})")
        found += matches
    return list(dict.fromkeys(found))


def backend_choices(settings: Settings, marker: MarkerSpec, model: Model) -> list[tuple[str, str | None]]:
    """Every backend for a test, with the reason it cannot run here, or None where it can: the
    registered ones and any named on the command line or in the marker, narrowed by
    --edge-backends, backends= and skip_backends=. A misspelt name raises UnknownBackend."""
    registry = tensor_backends()
    # A pattern (ethos-u*) may select compile-time targets; the defaults never hold them.
    patterns = {**registry, **compile_targets()}
    # A pattern that matches only decoder-only runtimes selects them as their names would: skipped below.
    selected = expand_patterns(settings.backends, patterns, settings.devices, all_backends())
    chosen = expand_patterns(marker.backends, patterns, settings.devices, all_backends())
    named = [*(selected or []), *(chosen or []), *marker.skip_backends, *settings.require]
    for name in named:
        get_backend(name)
    names = list(registry) + [n for n in named if n not in registry]
    if selected is not None:
        names = [n for n in names if n in selected]
    if chosen is not None:
        names = [n for n in names if n in chosen]
    choices = []
    for name in dict.fromkeys(names):
        if name in marker.skip_backends:
            continue
        backend = get_backend(name)
        device = known_device(settings, name)
        if backend.tensors is None and backend.compiler is None:  # a runtime of decoders only
            choices.append((name, no_tensors_reason(backend)))
        elif backend.compile_only and device is not None:
            raise EdgeUsageError(f"{name}: {backend.name} is a compile-time target: its compiler runs on this "
                                 "machine, not on a device; name it without @")
        elif backend.artifact_of(model) is None:
            choices.append((name, backend.missing_artifact(model.name)))
        else:
            choices.append((name, unavailable_on(settings, backend, device)))
    return choices


def known_device(settings: Settings, name: str) -> str | None:
    """The device ``BACKEND@DEVICE`` names (None: this machine); a usage error for one that is not in
    edge_devices."""
    device = split_device(name)[1]
    if device is not None and device not in settings.devices:
        raise EdgeUsageError(f"{name}: no device {device!r} in edge_devices (known: "
                             f"{', '.join(settings.devices) or 'none'})")
    return device


def unavailable_on(settings: Settings, backend: Backend, device: str | None) -> str | None:
    """Why ``backend`` cannot run on ``device`` (None: this machine) as far as this machine can tell.
    A device's runtimes are the device's to say: its worker reports what it lacks. An emulated
    device's are known here (the host's versions), as is a host that cannot run one."""
    if device is None:
        return backend.unavailable_reason()
    command = settings.devices[device]
    if device_kind(command) is DeviceKind.QEMU:
        from ..devices import qemu as qemu_device  # an emulated device's modules: only where one is configured

        return qemu_device.unavailable_reason(command, backend, settings.device_cache)
    return None


def resolve_tested(settings: Settings, models: ModelKeys, name: str | None, test_dir: Path | None) -> Model:
    """The model an ``edge`` marker's ``model=`` names, claimed by its key (two places with one key
    are an error naming both)."""
    if not name:
        raise EdgeUsageError("the edge marker needs a model: @pytest.mark.edge(model='name-or-path')")
    return models.claim(resolve_model(name, search_dirs(settings, test_dir), all_artifact_suffixes(),
                                      key_bases(settings), keyword="model"))


def plan_tensor_test(args: Sequence[Any], kwargs: Mapping[str, Any], settings: Settings, models: ModelKeys,
                     test_dir: Path) -> tuple[Model, list[Plan]]:
    """An ``edge`` marker resolved for the test in ``test_dir`` (as ``plan_decoder_test`` resolves an
    ``edge_llm`` one): its model (and ``reference=``'s) claimed by their keys, and one plan per
    backend. An error is an EdgeError, the test's alone."""
    marker = parse_marker(tuple(args), kwargs)
    model = resolve_tested(settings, models, marker.model, test_dir)
    test_plans = plans(settings, marker, model, test_dir)
    if test_plans and test_plans[0].reference is not None:  # its key is one place too
        models.claim(test_plans[0].reference)
    return model, test_plans


def plans(settings: Settings, marker: MarkerSpec, model: Model, test_dir: Path) -> list[Plan]:
    """One plan per backend; ``reference=`` is resolved here, so an unknown reference is a
    collection error."""
    reference = resolve_reference(settings, marker, model, test_dir)
    return [plan_for(settings, marker, model, name, test_dir, reason, reference)
            for name, reason in backend_choices(settings, marker, model)]
