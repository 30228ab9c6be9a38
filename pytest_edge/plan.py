"""``Plan``: one test's model on one backend, resolved at collection from the marker and the
settings. It is the ``edge_model`` parametrization value, the fixture holds it, and it is the one
argument the core takes: what to compare with which tolerance, which budgets, how to measure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .backends import all_backends, get_backend, split_device
from .errors import EdgeUsageError
from .compare import resolve_tolerance
from .marker import MarkerSpec
from .models import Model
from .settings import Settings


@dataclass(frozen=True)
class Plan:
    model: Model
    backend: str
    test_dir: Path
    marker: MarkerSpec = field(compare=False)
    unavailable: str | None = None  # why the backend cannot run here (a skip, or a --edge-require failure)
    required: bool = False
    threads: int = 1
    warmup: int = 5
    runs: int = 50
    measure: bool = False  # time and measure memory after the golden check
    defaults: dict[str, Any] = field(default_factory=dict, compare=False)  # tolerances before overrides

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.marker.shapes

    @property
    def artifact(self) -> Path | None:
        return self.model.artifact(get_backend(self.backend).suffix)

    def tolerance(self, output: str, backend: str | None = None) -> dict[str, Any]:
        """The tolerances for one output on ``backend`` (this plan's by default), overrides applied."""
        return resolve_tolerance(self.defaults, self.marker.tolerances, backend or self.backend, output)

    def on(self, backend: str) -> "Plan":
        """The same test on another backend (the golden's reference, a delegate's sibling)."""
        return replace(self, backend=backend, unavailable=None, required=False)


def plan_for(settings: Settings, marker: MarkerSpec, model: Model, backend: str, test_dir: Path,
             unavailable: str | None = None) -> Plan:
    return Plan(
        model=model, backend=backend, test_dir=test_dir, marker=marker, unavailable=unavailable,
        required=backend in settings.require,
        threads=marker.threads or settings.threads,
        warmup=marker.warmup if marker.warmup is not None else settings.warmup,
        runs=marker.runs if marker.runs is not None else settings.runs,
        measure=(settings.measure or marker.needs_measurement or settings.baseline is not None
                 or settings.baseline_models is not None),
        defaults={"atol": marker.atol if marker.atol is not None else settings.atol,
                  "rtol": marker.rtol if marker.rtol is not None else settings.rtol,
                  "min_cosine": marker.min_cosine, "min_snr_db": marker.min_snr_db,
                  "topk_agreement": marker.topk_agreement})


def backend_choices(settings: Settings, marker: MarkerSpec, model: Model) -> list[tuple[str, str | None]]:
    """Every backend for a test, with the reason it cannot run here, or None where it can: the
    registered ones and any named on the command line or in the marker, narrowed by
    --edge-backends, backends= and skip_backends=. A misspelt name raises UnknownBackend."""
    registry = all_backends()
    named = [*(settings.backends or []), *(marker.backends or []), *marker.skip_backends, *settings.require]
    for name in named:
        get_backend(name)
    names = list(registry) + [n for n in named if n not in registry]
    if settings.backends is not None:
        names = [n for n in names if n in settings.backends]
    if marker.backends is not None:
        names = [n for n in names if n in marker.backends]
    choices = []
    for name in dict.fromkeys(names):
        if name in marker.skip_backends:
            continue
        backend = get_backend(name)
        device = split_device(name)[1]
        if device is not None and device not in settings.devices:
            raise EdgeUsageError(f"{name}: no device {device!r} in edge_devices (known: "
                                 f"{', '.join(settings.devices) or 'none'})")
        if model.artifact(backend.suffix) is None:
            choices.append((name, f"no {backend.suffix} artifact for {model.name}"))
        else:
            # A device's runtimes are the device's to say: its worker reports what it lacks.
            choices.append((name, None if device else backend.unavailable_reason()))
    return choices


def plans(settings: Settings, marker: MarkerSpec, model: Model, test_dir: Path) -> list[Plan]:
    return [plan_for(settings, marker, model, name, test_dir, reason)
            for name, reason in backend_choices(settings, marker, model)]
