"""Backend registry: built-in runtimes plus those registered under the ``pytest_edge.backends``
entry-point group. An entry point names a callable that returns a list of :class:`Backend`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from functools import lru_cache

from .base import Backend, Coverage, LoadedModel, TensorSpec

__all__ = ["Backend", "Coverage", "LoadedModel", "TensorSpec", "all_backends", "get_backend",
           "UnknownBackend"]

ENTRY_POINT_GROUP = "pytest_edge.backends"
_BUILTIN = (
    "pytest_edge.backends.ort_backend:backends",
    "pytest_edge.backends.litert_backend:backends",
    "pytest_edge.backends.executorch_backend:backends",
)


class UnknownBackend(KeyError):
    pass


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@lru_cache(maxsize=1)
def all_backends() -> dict[str, Backend]:
    """Every registered backend by name, built-ins first, in a stable order."""
    factories = [_load(t) for t in _BUILTIN]
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.value not in _BUILTIN:
            factories.append(entry.load())
    registry: dict[str, Backend] = {}
    for factory in factories:
        for backend in factory():
            registry.setdefault(backend.name, backend)
    return registry


def get_backend(name: str) -> Backend:
    registry = all_backends()
    if name in registry:
        return registry[name]
    from .ort_backend import backend_for

    backend = backend_for(name)
    if backend is None:
        raise UnknownBackend(f"unknown backend {name!r}; known: {', '.join(registry)}")
    return backend
