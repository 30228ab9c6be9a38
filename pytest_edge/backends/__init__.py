"""Backend registry: built-in runtimes plus those registered under the ``pytest_edge.backends``
entry-point group. An entry point names a callable that returns a list of :class:`Backend`, or of
:class:`Declared` (a manifest: the backend's names, suffixes and roles, with where its module is),
whose module is imported only when the backend itself is used: a session that runs ONNX Runtime
does not import the other runtimes' modules to learn their names.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import UnknownBackend
from .base import Backend, Coverage, Declared, LoadedModel, TensorBackend, TensorSpec
from .shapes import InputShapes

__all__ = ["Backend", "Coverage", "Decoder", "InputShapes", "Intermediates", "LoadedModel", "TensorBackend", "TensorSpec",
           "all_backends",
           "compile_targets", "decoder_backends", "speech_backends", "format_backend", "get_backend", "predicted_targets", "recording_suffixes",
           "reference_order", "split_device", "tensor_backends", "UnknownBackend", "Declared", "backend_source"]

ENTRY_POINT_GROUP = "pytest_edge.backends"


if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from .decoder import Decoder
    from .intermediates import Intermediates


def __getattr__(name: str) -> Any:
    # A decoder's interface and triage's intermediates, imported where they are used (a worker
    # serving edge_llm, a mismatch), not by every session that names the registry.
    if name == "Decoder":
        from .decoder import Decoder

        return Decoder
    if name == "Intermediates":
        from .intermediates import Intermediates

        return Intermediates
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@lru_cache(maxsize=1)
def _entry_points() -> tuple[EntryPoint, ...]:
    import importlib.metadata  # here: a worker told its backend's source never reads the metadata

    return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


@lru_cache(maxsize=None)
def _loaded(source: str) -> tuple[Backend, ...]:
    """The backends ``source`` ("module:callable", an entry point's value) returns, its module imported."""
    module, _, attribute = source.partition(":")
    found = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return tuple(found())


class DeclaredBackend:
    """A registered backend known by its manifest (:class:`Declared`): what the manifest declares
    is answered from it; anything else imports the backend's module and asks the backend, so it
    acts as the backend does (``get_backend`` gives the backend itself)."""

    def __init__(self, declared: Declared) -> None:
        self.__dict__.update({name: getattr(declared, name) for name in declared.__dataclass_fields__})
        self.declared = declared

    def artifact_suffixes(self) -> tuple[str, ...]:
        return self.declared.artifact_suffixes()

    def backend(self) -> Backend:
        """The backend itself, from its module (imported on first need)."""
        for backend in _loaded(self.declared.load):
            if backend.name == self.declared.name:
                return backend
        raise UnknownBackend(f"{self.declared.load} registers no backend {self.declared.name!r}, which its "
                             "manifest declares")

    def __getattr__(self, attribute: str) -> Any:  # only what the manifest does not declare
        if attribute.startswith("__") or attribute == "declared":  # copy's and pickle's probes, a bare instance
            raise AttributeError(attribute)
        return getattr(self.backend(), attribute)

    def __repr__(self) -> str:
        return f"<{self.declared.name}, declared; from {self.declared.load}>"


@lru_cache(maxsize=None)
def _registered_by(index: int) -> tuple[tuple[Backend, str], ...]:
    """The backends the ``index``-th entry point registers, each with the source that gives it
    (its entry point's value, or its manifest's ``load``): a manifest's are :class:`DeclaredBackend`,
    a third-party callable's are its backends, its module imported."""
    entry_point = _entry_points()[index]
    found: list[tuple[Any, str]] = []
    for item in entry_point.load()():
        if isinstance(item, Declared):
            found.append((DeclaredBackend(item), item.load))
        else:
            found.append((item, entry_point.value))
    return tuple(found)


def _registered() -> Iterator[Backend]:
    """Every registered backend in entry-point order, each entry point's module imported only when
    the iteration reaches it (a manifest's: the manifest only)."""
    for index in range(len(_entry_points())):
        yield from (backend for backend, _ in _registered_by(index))


def _itself(backend: Backend) -> Backend:
    return backend.backend() if isinstance(backend, DeclaredBackend) else backend


def backend_source(name: str) -> str | None:
    """Where the registered backend ``name`` comes from ("module:callable"): a worker given it
    imports that module alone, without reading the entry points. None: not registered (a variant)."""
    name = split_device(name)[0]
    for index in range(len(_entry_points())):
        for backend, source in _registered_by(index):
            if backend.name == name:
                return source
    return None


@lru_cache(maxsize=1)
def all_backends() -> dict[str, Backend]:
    """Every registered backend by name. Built-in runtimes register exactly as third-party ones do,
    through the entry-point group (pyproject.toml). Ordered (test ids, tables) by reference
    priority, then name; backends without one after those with one. Every registered runtime is in:
    a project narrows the set in its own files (edge_backends, a marker's backends=/skip_backends=)."""
    found: dict[str, Backend] = {}
    for backend in _registered():
        found.setdefault(backend.name, backend)
    ranked = sorted(found.values(), key=lambda b: (b.reference_priority is None, b.reference_priority or 0, b.name))
    return {b.name: b for b in ranked}


def tensor_backends() -> dict[str, Backend]:
    """The registered backends that run tensor models (edge tests): all but the decoder-only ones
    and the compile-time targets (those are in a test only where named: compile_targets)."""
    return {name: b for name, b in all_backends().items() if b.runs_tensors and not b.compile_only and not b.named_only}


def compile_targets() -> dict[str, Backend]:
    """The registered targets a test has only where named (docs/npu.md), never defaults: the
    compile-time ones (an NPU's compiler) and those that run tensors but only where named (an NPU's
    simulator, ``named_only``)."""
    return {name: b for name, b in all_backends().items() if b.compile_only or b.named_only}


def decoder_backends() -> dict[str, Backend]:
    """The registered backends of decoder LLMs (edge_llm tests): those with the capability
    (``Backend.decoders``), in registry order."""
    return {name: b for name, b in all_backends().items() if b.decoders is not None}


def speech_backends() -> dict[str, Backend]:
    """The registered backends that recognize speech (edge_asr tests: ``Backend.speech``), in
    registry order: the first available one records the goldens."""
    return {name: b for name, b in all_backends().items() if b.speech is not None}


def all_artifact_suffixes() -> list[str]:
    """Every tensor backend's artifact suffixes, in registry order: what a model's stem is
    searched with (resolve_model drops repeats)."""
    return [s for b in tensor_backends().values() for s in b.artifact_suffixes()]


def recording_suffixes() -> tuple[str, ...]:
    """The artifact suffixes of the tensor backends that record goldens when nothing else is named
    (those with a ``reference_priority``), in that order: the formats ``pytest-edge init`` looks for."""
    ranked = sorted((b for b in tensor_backends().values() if b.reference_priority is not None),
                    key=lambda b: b.reference_priority)
    return tuple(dict.fromkeys(s for b in ranked for s in b.artifact_suffixes()))


def predicted_targets() -> tuple[str, ...]:
    """Every ``target=`` a registered backend predicts coverage for (``predicts_targets``), in
    registry order: what the marker's ``target=`` and ``inspect --target`` accept."""
    return tuple(dict.fromkeys(t for b in all_backends().values() for t in b.predicts_targets))


def format_backend(artifact: Path) -> Backend | None:
    """The backend whose format ``artifact`` is, by its longest registered suffix ("m.ncnn.param" is
    an ".ncnn.param"): the first in registry order whose own suffix it is, else the first that reads
    it; None for a file no backend reads. What the format's files are is asked of it."""
    name = Path(artifact).name
    registry = all_backends().values()
    suffix = max((s for b in registry for s in b.artifact_suffixes() if name.endswith(s) and name != s),
                 key=len, default=None)
    if suffix is None:
        return None
    readers = [b for b in registry if suffix in b.artifact_suffixes()]
    return next((b for b in readers if b.suffix == suffix), readers[0])


def split_device(name: str) -> tuple[str, str | None]:
    """``litert@pi5`` -> (``litert``, ``pi5``); ``litert`` and ``litert@local`` -> (``litert``, None)."""
    base, _, device = name.partition("@")
    return base, (device if device and device != "local" else None)


def get_backend(name: str, source: str | None = None) -> Backend:
    """The backend named ``name`` (a device suffix ``@pi5`` names where it runs, not what it is):
    registered, or a variant a registered runtime knows. ``source`` (``backend_source``'s) is where
    it comes from: a worker given it imports that module only and reads no entry points."""
    name = split_device(name)[0]
    if source is not None:
        for backend in _loaded(source):
            if backend.name == name:
                return backend
    # The first registration of a name is the registry's (all_backends keeps the first), so the
    # search stops there; a manifest's backend is imported alone, the others stay declared.
    for backend in _registered():
        if backend.name == name:
            return _itself(backend)
    registry = all_backends()
    for runtime in dict.fromkeys(type(_itself(b)) for b in registry.values()):
        backend = runtime.variant(name)
        if backend is not None:
            return backend
    raise UnknownBackend(f"unknown backend {name!r}; known: {', '.join(registry)}")


def reference_order(preferred: str | None = None) -> list[str]:
    """Candidates to record goldens: ``preferred`` (the configured one), then by each backend's
    reference_priority, then every other backend."""
    registry = tensor_backends()
    ranked = sorted((b.reference_priority, n) for n, b in registry.items() if b.reference_priority is not None)
    return list(dict.fromkeys([*([preferred] if preferred else []), *(n for _, n in ranked), *registry]))
