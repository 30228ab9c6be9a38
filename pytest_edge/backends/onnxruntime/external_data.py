"""ONNX external data: the weight files an ``.onnx`` names beside itself (``model.onnx.data``, as
``torch.onnx.export`` of large models and ``onnx.save_model(save_as_external_data=True)`` write
them), read for :meth:`OnnxRuntime.external_locations` (the checks are ``external_data.py``'s).

The locations are read from the model's protobuf by a small wire-format reader (no ``onnx``
import, so the pytest process stays light): every ``TensorProto`` whose ``data_location`` is
EXTERNAL, wherever ONNX allows one (graph initializers, sparse initializers, node attributes,
subgraphs, functions, training graphs), names its file in the ``location`` entry of its
``external_data``.
"""

from __future__ import annotations

import mmap
from pathlib import Path

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
