"""ONNX external data: the weight files an ``.onnx`` names beside itself (``model.onnx.data``, as
``torch.onnx.export`` of large models and ``onnx.save_model(save_as_external_data=True)`` write
them) are part of the artifact.

The locations are read from the model's protobuf by a small wire-format reader (no ``onnx``
import, so the pytest process stays light): every ``TensorProto`` whose ``data_location`` is
EXTERNAL, wherever ONNX allows one (graph initializers, sparse initializers, node attributes,
subgraphs, functions, training graphs), names its file in the ``location`` entry of its
``external_data``. A location must stay inside the model's folder: an absolute path or one with a
``..`` component is refused before anything is opened (ONNX Runtime would read it). Symbolic links
inside the folder are followed, as for the model file itself (DVC and git-annex check out links).
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path, PurePosixPath, PureWindowsPath

from .errors import BackendError

SUFFIX = ".onnx"
# Which fields of which message hold the messages that can hold a TensorProto (onnx.proto).
_NESTED: dict[str, dict[int, str]] = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attribute"},
    "function": {7: "node", 11: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
}
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION, _EXTERNAL = 13, 14, 1
_MAX_DEPTH = 64  # subgraphs nest through attributes; deeper than this is no model anyone exported

_cache: dict[tuple[str, int, int], tuple[str, ...]] = {}


class _Malformed(Exception):
    """Not a protobuf this reader can walk: the runtime will say what is wrong with the file."""


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: memoryview):
    """(field number, wire type, value) of one message: an int for varints, a memoryview for
    length-delimited fields, None for the fixed-size ones (skipped)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _Malformed("length past the end")
            yield number, wire, data[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            yield number, wire, None
        else:  # groups (3, 4) are not used by onnx.proto
            raise _Malformed(f"wire type {wire}")
    if pos != len(data):
        raise _Malformed("field past the end")


def _walk(data: memoryview, kind: str, depth: int, found: list[str]) -> None:
    if depth > _MAX_DEPTH:
        raise _Malformed("nested too deeply")
    if kind == "tensor":
        external, location = False, None
        for number, wire, value in _fields(data):
            if number == _TENSOR_DATA_LOCATION and wire == 0:
                external = value == _EXTERNAL
            elif number == _TENSOR_EXTERNAL_DATA and wire == 2:
                entry = {n: bytes(v) for n, w, v in _fields(value) if w == 2}
                if entry.get(1) == b"location":
                    location = entry.get(2, b"").decode("utf-8", "replace")
        if external and location is not None and location not in found:
            found.append(location)
        return
    nested = _NESTED[kind]
    for number, wire, value in _fields(data):
        if wire == 2 and number in nested:
            _walk(value, nested[number], depth + 1, found)


def external_locations(model: Path) -> tuple[str, ...]:
    """The external-data locations an ``.onnx`` names, in the order first met; () for a model
    with its weights inside, and for a file this reader cannot walk (the runtime reports that)."""
    stat = model.stat()
    key = (str(model.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        found: list[str] = []
        if stat.st_size:
            with open(model, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    _walk(view, "model", 0, found)
                except _Malformed:
                    found = []
                finally:
                    view.release()
        _cache[key] = tuple(found)
    return _cache[key]


def location_problem(location: str) -> str | None:
    """Why ``location`` may not be opened (it leaves the model's folder), or None."""
    if not location or "\0" in location:
        return "is empty or holds a NUL byte"
    if PurePosixPath(location).is_absolute() or PureWindowsPath(location).is_absolute() or \
            PureWindowsPath(location).drive or re.match(r"[\\/]", location):
        return "is an absolute path"
    if ".." in re.split(r"[\\/]", location):
        return "has a '..' component"
    return None


def weights_file(model: Path) -> Path | None:
    """The weights file beside a model whose format keeps them apart under its own name: ncnn's
    ``m.ncnn.param`` -> ``m.ncnn.bin``, OpenVINO IR's ``m.xml`` -> ``m.bin``; None for the others."""
    if model.name.endswith(".ncnn.param"):
        return model.with_name(model.name.removesuffix(".param") + ".bin")
    return model.with_suffix(".bin") if model.suffix == ".xml" else None


def external_files(model: Path, backend: str | None = None) -> dict[str, Path]:
    """The external-data files of ``model`` by location, each checked: inside the model's folder
    (else refused unread) and present. {} for other formats and self-contained models.
    BackendError naming the model, the location and ``backend`` otherwise. An ncnn ``.param``'s
    or OpenVINO ``.xml``'s weights file counts as its external data (golden provenance, devices)."""
    model = Path(model)
    who = f"{backend}: " if backend else ""
    weights = weights_file(model)
    if weights is not None and model.is_file():
        if not weights.is_file():
            raise BackendError(f"{who}{model} keeps its weights in {weights}, which is missing; copy it beside "
                               f"the model (it is part of the artifact, like {model.name} itself)")
        return {weights.name: weights}
    if model.suffix != SUFFIX or not model.is_file():
        return {}
    files = {}
    for location in external_locations(model):
        problem = location_problem(location)
        if problem:
            raise BackendError(f"{who}{model} names external data at {location!r}, which {problem}: refused, "
                               f"not read (external data must lie in the model's folder, {model.parent})")
        path = model.parent / location
        if not path.is_file():
            raise BackendError(f"{who}{model} keeps its weights in the external data file {path}, which is "
                               f"missing; copy it beside the model (it is part of the artifact, like "
                               f"{model.name} itself)")
        files[location] = path
    return files


def artifact_digests(model: Path, sha256_file) -> dict[str, str]:
    """{file name: sha256} of an artifact and of its external-data files (by location), what a
    golden's provenance records: a change to the weights alone makes the golden stale."""
    digests = {model.name: sha256_file(model)}
    for location, path in external_files(model).items():
        digests[location] = sha256_file(path)
    return digests


# A weights file is dense: one whose disk blocks hold less than an eighth of its apparent size, past
# 64 MiB, is sparse (a hostile or broken file: 64 GB apparent, nothing written), and hashing or
# mapping it would read gigabytes of zeros.
SPARSE_MIN_BYTES = 64 * 2**20


def sparse_problem(path: Path) -> str | None:
    """Why ``path`` is refused unread as a sparse file, or None."""
    status = Path(path).stat()
    allocated = getattr(status, "st_blocks", None)
    if allocated is None or status.st_size <= SPARSE_MIN_BYTES or allocated * 512 * 8 >= status.st_size:
        return None
    return (f"{path} is sparse: {status.st_size / 2**30:.1f} GiB apparent, {allocated * 512 / 2**20:.1f} MiB on "
            "disk; a model's weights are written whole, so it is refused unread (not hashed, not loaded)")


def artifact_files(model: Path, backend: str | None = None) -> list[Path]:
    """The artifact and its external-data files, each checked (:func:`external_files`) and none of
    them sparse; BackendError naming the file and ``backend`` otherwise."""
    files = [Path(model), *external_files(model, backend).values()]
    for path in files:
        problem = sparse_problem(path)
        if problem:
            raise BackendError(f"{backend + ': ' if backend else ''}{problem}")
    return files
