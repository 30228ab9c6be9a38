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

from ..protobuf_wire import Malformed, fields

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


def _walk(data: memoryview, kind: str, depth: int, found: list[str]) -> None:
    if depth > _MAX_DEPTH:
        raise Malformed("nested too deeply")
    if kind == "tensor":
        external, location = False, None
        for number, wire, value in fields(data):
            if number == _TENSOR_DATA_LOCATION and wire == 0:
                external = value == _EXTERNAL
            elif number == _TENSOR_EXTERNAL_DATA and wire == 2:
                entry = {n: bytes(v) for n, w, v in fields(value) if w == 2}
                if entry.get(1) == b"location":
                    location = entry.get(2, b"").decode("utf-8", "replace")
        if external and location is not None and location not in found:
            found.append(location)
        return
    nested = _NESTED[kind]
    for number, wire, value in fields(data):
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
                except Malformed:
                    found = []
                finally:
                    view.release()
        _cache[key] = tuple(found)
    return _cache[key]
