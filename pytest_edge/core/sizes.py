"""What a deployment ships, in bytes: the model artifact (with its external data) and the
runtime's installed package (docs/measurement.md, "Sizes")."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from .. import codec
from ..errors import BackendError
from .external_data import external_files
from ..installed import NotInstalled, recorded_files

# Native libraries: the part of a runtime's package an app would ship (.so, .dylib, .dll, .pyd).
NATIVE_SUFFIXES = (".so", ".dylib", ".dll", ".pyd")


def artifact_bytes(artifact: Path, backend: str | None = None) -> int:
    """The artifact's size: the model file plus the external data files it names (an ONNX model's
    ``.data``, an ncnn ``.bin``, an OpenVINO ``.bin``), since the app ships them all. A missing
    external file is a BackendError naming the model and ``backend`` (as loading it would be)."""
    artifact = Path(artifact)
    return artifact.stat().st_size + sum(p.stat().st_size for p in external_files(artifact, backend).values())


def artifact_size(artifact: Path, backend: str | None = None) -> tuple[int | None, str | None]:
    """:func:`artifact_bytes` for the record and the size budgets: ``(bytes, None)``, or ``(None,
    why)`` where a file of the artifact is gone since it was loaded (removed or replaced while the
    test measured), so that the record says so instead of the check ending in a traceback."""
    try:
        return artifact_bytes(artifact, backend), None
    except (OSError, BackendError) as exc:
        detail = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, f"its size could not be read after it was loaded ({detail})"


def _providing(module: str | None) -> list[str]:
    """The installed distributions that provide the top-level package of ``module``."""
    if not module:
        return []
    import importlib.metadata  # here: only where the distribution itself is not installed

    try:
        return sorted(set(importlib.metadata.packages_distributions().get(module.split(".")[0], [])))
    except Exception:  # noqa: BLE001 - a broken metadata folder elsewhere: the reason says not found
        return []


@codec.layout(lenient=True)
@dataclass(frozen=True)
class RuntimePackage:
    """A runtime's installed package as the worker summed it (a record's ``runtime.package``): its
    bytes, files and native libraries' bytes; or no bytes and the ``reason``; and the distribution
    that provides the runtime where it is another than the backend's (``onnxruntime-gpu``)."""

    bytes: int | None = None
    files: int | None = codec.optional()
    native_bytes: int | None = codec.optional()
    reason: str | None = codec.optional()
    distribution: str | None = codec.optional()


@functools.lru_cache(maxsize=None)
def runtime_package(distribution: str, module: str | None = None) -> RuntimePackage:
    """The installed package of ``distribution`` (e.g. ``onnxruntime``), summed from the files its
    installer recorded (RECORD), or no bytes and the reason where the files are not known.
    Dependencies (NumPy, torch) are not counted: what an app ships is the runtime, not the Python it
    was tested from. Where ``distribution`` is not installed but another one provides the runtime's
    ``module`` (``onnxruntime-gpu`` provides ``onnxruntime``), that one is summed and named
    (``distribution``). Once per process."""
    try:
        recorded = recorded_files(distribution)
    except NotInstalled:
        others = [d for d in _providing(module) if d != distribution]
        if len(others) == 1:
            return replace(runtime_package(others[0]), distribution=others[0])
        found = f" (the {module} module comes from {', '.join(others)})" if others else ""
        return RuntimePackage(reason=f"{distribution} is not installed as a Python distribution here{found}")
    if not recorded or not recorded[1]:
        return RuntimePackage(reason=f"{distribution} was installed without a file list (no RECORD), "
                                     "so its size cannot be summed")
    # os.stat on joined strings: a PackagePath's locate() and Path.stat() per file took 11 ms of a
    # worker's first load for onnxruntime's 631 files, on the first check's path (this: about 3).
    root, entries = recorded
    total = native = counted = 0
    for entry in entries:
        try:
            size = os.stat(os.path.join(root, entry)).st_size
        except OSError:  # listed but removed since (a pruned __pycache__)
            continue
        total += size
        counted += 1
        name = entry.rpartition("/")[2]
        if name.endswith(NATIVE_SUFFIXES) or ".so." in name:
            native += size
    return RuntimePackage(total, counted, native)
