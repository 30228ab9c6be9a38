"""An ``.onnx`` graph's inputs and outputs (name and dimensions) read from the model's protobuf by
the wire-format reader of :mod:`.external_data` (no ``onnx`` import, no weights read): what a
decoder's configuration is checked against where another runtime (ONNX Runtime GenAI) loads the
graph itself. ``ModelProto.graph`` (7) -> ``GraphProto.input`` (11) / ``output`` (12) ->
``ValueInfoProto`` name (1), type (2) -> ``TypeProto.tensor_type`` (1) -> ``shape`` (2) -> ``dim``
(1): ``dim_value`` (1) or ``dim_param`` (2). The attention window of its ``GroupQueryAttention``
nodes: ``GraphProto.node`` (1) -> ``NodeProto`` op_type (4), attribute (5) -> ``AttributeProto``
name (1), i (3)."""

from __future__ import annotations

import mmap
from pathlib import Path

from ..protobuf_wire import Malformed, fields

Dim = int | str | None  # a static size, a named (symbolic) one, or unknown
Signature = dict[str, tuple[Dim, ...] | None]  # name -> dims (None: no shape given)


def _value_info(data: memoryview) -> tuple[str, tuple[Dim, ...] | None]:
    name, dims = "", None
    for number, wire, value in fields(data):
        if number == 1 and wire == 2:
            name = bytes(value).decode("utf-8", "replace")
        elif number == 2 and wire == 2:
            for t_number, t_wire, tensor in fields(value):
                if t_number != 1 or t_wire != 2:
                    continue
                for s_number, s_wire, shape in fields(tensor):
                    if s_number != 2 or s_wire != 2:
                        continue
                    found: list[Dim] = []
                    for d_number, d_wire, dim in fields(shape):
                        if d_number != 1 or d_wire != 2:
                            continue
                        size: Dim = None
                        for v_number, v_wire, v in fields(dim):
                            if v_number == 1 and v_wire == 0:
                                size = v
                            elif v_number == 2 and v_wire == 2:
                                size = bytes(v).decode("utf-8", "replace")
                        found.append(size)
                    dims = tuple(found)
    return name, dims


def _graph(view: memoryview) -> tuple[Signature, Signature]:
    inputs: Signature = {}
    outputs: Signature = {}
    for number, wire, graph in fields(view):
        if number != 7 or wire != 2:
            continue
        for g_number, g_wire, value in fields(graph):
            if g_wire == 2 and g_number in (11, 12):
                name, dims = _value_info(value)
                (inputs if g_number == 11 else outputs)[name] = dims
    return inputs, outputs


def graph_io(model: Path) -> tuple[Signature, Signature] | None:
    """(inputs, outputs) of the model's main graph; None where this reader cannot walk the file
    (the runtime says what is wrong with it)."""
    if not Path(model).stat().st_size:
        return None
    with open(model, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            return _graph(view)  # its slices of the map are gone when it returns, before the map closes
        except Malformed:
            return None
        finally:
            view.release()


def _windows(view: memoryview) -> set[int]:
    found: set[int] = set()
    for number, wire, graph in fields(view):
        if number != 7 or wire != 2:
            continue
        for g_number, g_wire, node in fields(graph):
            if g_number != 1 or g_wire != 2:
                continue
            op_type, window = "", None
            for n_number, n_wire, value in fields(node):
                if n_number == 4 and n_wire == 2:
                    op_type = bytes(value).decode("utf-8", "replace")
                elif n_number == 5 and n_wire == 2:
                    name, size = "", None
                    for a_number, a_wire, a_value in fields(value):
                        if a_number == 1 and a_wire == 2:
                            name = bytes(a_value).decode("utf-8", "replace")
                        elif a_number == 3 and a_wire == 0:
                            size = a_value - 2**64 if a_value >= 2**63 else a_value  # int64, -1 for none
                    if name == "local_window_size":
                        window = size
            if op_type == "GroupQueryAttention" and window is not None and window > 0:
                found.add(window)
    return found


def attention_windows(model: Path) -> set[int] | None:
    """The sliding windows (``local_window_size`` > 0) of the main graph's GroupQueryAttention nodes:
    what the runtime attends and what a ring cache must hold at least, whatever the configuration
    says. {} where none has one; None where this reader cannot walk the file."""
    if not Path(model).stat().st_size:
        return None
    with open(model, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            return _windows(view)
        except Malformed:
            return None
        finally:
            view.release()
