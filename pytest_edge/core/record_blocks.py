"""The blocks of a :class:`~pytest_edge.core.record.Record` that the package builds itself, typed
(issue #48: untyped JSON objects only where JSON enters or leaves): who the model is, which runtime
and plugin ran it, what it was fed, and on which device.

Each is a frozen codec dataclass whose JSON is the report's block as it has always been written
(docs/reports.md: the names are fixed; a figure not known is null). Each is read ``lenient``: a
stored report is untrusted and another version's, so a key missing or a value that does not fit
is the field's default, never an error, and keys this version does not know are kept and written
back after the others (``rest``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__, codec
from ..backends.tensors import Coverage
from ..errors import EdgeError
from ..files import relative_path, sha256_file
from ..measurement.machine import Machine, read_object
from .external_data import identity_files
from .sizes import RuntimePackage


@dataclass(frozen=True)
class ModelIdentity(codec.StoredBlock):
    """A record's ``model``: its name (the model's key: ``a/net``, unique per model, so two models
    never share a row or a stored baseline), the artifact relative to the project, its sha256, and
    where the artifact is made of more files than one (external data, a GenAI folder's
    configuration) ``files``: each one's sha256 by name, the model file's among them."""

    name: str = ""
    artifact: str | None = None
    sha256: str | None = None
    files: dict[str, str] | None = codec.optional()

    @classmethod
    def of(cls, name: str, artifact: Path | None, rootdir: Path) -> "ModelIdentity":
        """The identity of ``artifact`` (None: a test whose artifact was not found) under ``name``."""
        sha256 = sha256_file(artifact) if artifact and artifact.is_file() else None
        files = None
        if sha256 is not None:
            try:
                parts = identity_files(artifact)  # type: ignore[arg-type]
            except (EdgeError, OSError):
                parts = {}  # a missing data file is the test's error, said where it is loaded
            if len(parts) > 1:
                files = {file: sha256_file(path) for file, path in parts.items()}
        return cls(name, relative_path(artifact, rootdir) if artifact else None, sha256, files)

    def identity(self) -> tuple[str, ...]:
        """The sha256 of every file of the artifact: what an acceptance must list to hold for it;
        () where the record names no artifact."""
        if self.files:
            return tuple(str(digest) for digest in self.files.values())
        return (self.sha256,) if isinstance(self.sha256, str) else ()

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> "ModelIdentity":
        return codec.from_json(cls, data, "a record's model")


@codec.layout(rest="details", lenient=True)
@dataclass(frozen=True)
class RuntimeIdentity:
    """A record's ``runtime``: the runtime's distribution and version; for a tensor model the
    delegates it ran on and, where the worker could sum it, its installed package; then what the
    backend adds about this model (``details``: a toolkit's build options, written last)."""

    name: str | None = None
    version: str | None = None
    delegates: list[str] | None = codec.optional()  # a decoder's and speech's: none
    # core.sizes.runtime_package() as the worker measured it (bytes, or none and the reason); only the
    # worker that reads coverage sums it.
    package: RuntimePackage | None = codec.optional()
    details: dict[str, Any] = field(default_factory=dict)  # Backend.runtime_details(), and another version's keys

    @property
    def package_bytes(self) -> int | None:
        """The installed package's size in bytes; None where not summed (``package.reason`` says why)."""
        return self.package.bytes if self.package is not None else None

    @property
    def label(self) -> str:
        """``name version``, as a budget's message names the runtime."""
        return f"{self.name} {self.version or ''}".strip()

    @classmethod
    def from_json(cls, data: Any) -> "RuntimeIdentity":
        """The block as JSON gives it: the worker's reply (the pipe) or a stored report."""
        return codec.from_json(cls, data, "a record's runtime")


@dataclass(frozen=True)
class PluginIdentity(codec.StoredBlock):
    """A record's ``plugin``: the pytest-edge that wrote it."""

    name: str = "pytest-edge"
    version: str | None = None

    @classmethod
    def this(cls) -> "PluginIdentity":
        """This pytest-edge."""
        return cls("pytest-edge", __version__)


@dataclass(frozen=True)
class InputTensor(codec.StoredBlock):
    """One input of a tensor model (or a decoder's ``input_ids``) as it was fed: its shape, its
    dtype, and where a dynamic dimension's size came from (``shape_from``, only where one was)."""

    shape: list[int | str | None] = field(default_factory=list)
    dtype: str | None = None
    shape_from: str | None = codec.optional()


@dataclass(frozen=True)
class AudioInput(codec.StoredBlock):
    """A speech check's ``input``: the audio files it transcribed, relative to the project."""

    audio: list[str] = field(default_factory=list)


# A record's ``input``: a tensor model's (and a decoder's) tensors by name, or a speech check's audio.
RecordInput = dict[str, InputTensor] | AudioInput


def read_input(data: Any) -> RecordInput | None:
    """A stored record's ``input``: audio where it holds a list of files under ``audio`` (a tensor
    named so holds an object), else tensors by name, each read leniently; None for no object."""
    if not isinstance(data, Mapping):
        return None
    if isinstance(data.get("audio"), list):
        return codec.from_json(AudioInput, data, "a record's input")
    return {str(name): codec.from_json(InputTensor, spec, f"a record's input {name}") for name, spec in data.items()}


@dataclass(frozen=True)
class DeviceRun(codec.StoredBlock):
    """A record's ``device``: the device it ran on (its name in the backend, ``litert@pi5``) and
    the machine its worker described (arch, CPU, OS, ``emulated``: as that worker's reply says)."""

    name: str | None = None
    # The device worker's hello's machine (and a farm place's); None: not known (a null where a
    # stored block's machine is no object, as before it was typed).
    machine: Machine | None = codec.json_field(default=None, decode=lambda value: read_object(
        Machine, value, "a record's device machine"))


@dataclass(frozen=True)
class RecordCoverage(codec.StoredBlock):
    """A record's ``coverage``: :class:`~pytest_edge.backends.tensors.Coverage` as the record keeps
    it. The strict type reads the worker's reply; a stored report's block is read leniently and
    keeps its ``fallback`` as written (the gate reads that key), so a record writes back what it read."""

    total_ops: int | None = None
    delegated_ops: int | None = None
    fallback_ops: int | None = None
    partitions: int | None = None
    # The operators on the CPU and the delegate's, by name: None (and left out) where a stored block
    # has none, which the gate reads as "placement not known", never as "none on the CPU".
    fallback_op_names: dict[str, int] | None = codec.optional()
    delegates: list[str] = field(default_factory=list)
    method: str | None = None
    approximate: bool | None = None
    delegated_op_ids: list[str] | None = codec.optional()
    fallback_reasons: dict[str, str] | None = codec.optional()
    fallback: float | None = None

    @classmethod
    def of(cls, coverage: Coverage) -> "RecordCoverage":
        """The runtime's (or compiler's) coverage as the record keeps it: its JSON, fallback rounded."""
        return codec.from_json(cls, codec.to_json(coverage), "a record's coverage")


def read_block(kind: type, data: Any) -> Any:
    """A block given as its JSON (a stored record, a test's literal) read as ``kind``; a block
    already typed as it is; None as None."""
    if data is None or isinstance(data, kind):
        return data
    return codec.from_json(kind, data, f"a record's {kind.__name__}")


__all__ = ["AudioInput", "DeviceRun", "InputTensor", "ModelIdentity", "PluginIdentity", "RecordCoverage", "RecordInput",
           "RuntimeIdentity", "read_block", "read_input"]
