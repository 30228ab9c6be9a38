"""Backend registry: built-in runtimes plus those registered under the ``pytest_edge.backends``
entry-point group. An entry point names a callable that returns a list of :class:`Backend`.
"""

from __future__ import annotations

import importlib.metadata
import os
from functools import lru_cache

from ..errors import UnknownBackend
from .base import Backend, Coverage, Intermediates, LoadedModel, TensorSpec

__all__ = ["Backend", "Coverage", "Intermediates", "LoadedModel", "TensorSpec", "all_backends", "get_backend",
           "reference_order", "split_device", "UnknownBackend"]

ENTRY_POINT_GROUP = "pytest_edge.backends"
# Entry points (by name, comma-separated) whose backends are not run by default: known by name
# only, like a variant (pytest-edge's own suite counts outcomes over the three original runtimes).
DISABLE_ENV = "PYTEST_EDGE_DISABLE_BACKENDS"


@lru_cache(maxsize=4)
def _disabled_backends(setting: str) -> dict[str, Backend]:
    """The backends of the entry points ``setting`` (DISABLE_ENV's value) names."""
    disabled = {n.strip() for n in setting.split(",") if n.strip()}
    found: dict[str, Backend] = {}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in disabled:
            for backend in entry.load()():
                found.setdefault(backend.name, backend)
    return found


@lru_cache(maxsize=1)
def all_backends() -> dict[str, Backend]:
    """Every registered backend by name. Built-in runtimes register exactly as third-party ones do,
    through the entry-point group (pyproject.toml). Ordered (test ids, tables) by reference
    priority, then name; backends without one after those with one."""
    found: dict[str, Backend] = {}
    disabled = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in disabled:
            continue
        for backend in entry.load()():
            found.setdefault(backend.name, backend)
    ranked = sorted(found.values(), key=lambda b: (b.reference_priority is None, b.reference_priority or 0, b.name))
    return {b.name: b for b in ranked}


def split_device(name: str) -> tuple[str, str | None]:
    """``litert@pi5`` -> (``litert``, ``pi5``); ``litert`` and ``litert@local`` -> (``litert``, None)."""
    base, _, device = name.partition("@")
    return base, (device if device and device != "local" else None)


def get_backend(name: str) -> Backend:
    """The backend named ``name`` (a device suffix ``@pi5`` names where it runs, not what it is):
    registered, or a variant a registered runtime knows."""
    name = split_device(name)[0]
    registry = all_backends()
    if name in registry:
        return registry[name]
    disabled = _disabled_backends(os.environ.get(DISABLE_ENV, ""))
    if name in disabled:
        return disabled[name]
    for runtime in dict.fromkeys(type(b) for b in [*registry.values(), *disabled.values()]):
        backend = runtime.variant(name)
        if backend is not None:
            return backend
    raise UnknownBackend(f"unknown backend {name!r}; known: {', '.join(registry)}")


def reference_order(preferred: str | None = None) -> list[str]:
    """Candidates to record goldens: ``preferred`` (the configured one), then by each backend's
    reference_priority, then every other backend."""
    registry = all_backends()
    ranked = sorted((b.reference_priority, n) for n, b in registry.items() if b.reference_priority is not None)
    return list(dict.fromkeys([*([preferred] if preferred else []), *(n for _, n in ranked), *registry]))
