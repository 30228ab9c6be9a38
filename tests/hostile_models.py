"""Hostile ``.tflite`` files for the tests of what reads and compiles them (tests/test_ethos_u.py):
each is a model the converter wrote (``fixtures/quant_probe_int8.tflite``: three FullyConnected
layers, int8) with one field of its flatbuffer changed in place, so every other byte is the
converter's. Located with vela's own flatbuffer classes (the tables' field offsets of the tflite
schema)."""

from __future__ import annotations

import struct
from pathlib import Path

from edge_helpers import FIXTURES

SOURCE = FIXTURES / "quant_probe_int8.tflite"
# Field offsets of the tflite schema's tables (their vtable slots).
_TENSOR_SHAPE, _OPERATOR_OPCODE, _OPERATOR_INPUTS, _SUBGRAPH_OPERATORS, _BUFFER_DATA = 4, 4, 6, 10, 4


def _model(data: bytes):  # type: ignore[no-untyped-def]
    from ethosu.vela.tflite.Model import Model

    return Model.GetRootAsModel(data, 0)


def _vector(table, slot: int) -> int:  # type: ignore[no-untyped-def]
    """The byte position of the length of ``table``'s vector field ``slot``."""
    offset = table._tab.Offset(slot)
    assert offset, f"no field at slot {slot}"
    return table._tab.Vector(offset) - 4


def truncated(size: int = 600) -> bytes:
    """The model's first ``size`` bytes: a download cut short."""
    return SOURCE.read_bytes()[:size]


def huge_intermediate(elements: int = 2**31 - 1) -> bytes:
    """The first layer's output declared ``[1, elements]`` (a 5.5 KB model whose intermediate tensor
    needs gigabytes: what a compiler allocates for it is bounded by nothing but its memory limit)."""
    data = bytearray(SOURCE.read_bytes())
    graph = _model(bytes(data)).Subgraphs(0)
    tensor = graph.Tensors(graph.Operators(0).Outputs(0))
    at = _vector(tensor, _TENSOR_SHAPE)
    assert struct.unpack_from("<I", data, at)[0] == 2
    struct.pack_into("<i", data, at + 8, elements)
    return bytes(data)


def short_buffer(length: int = 3) -> bytes:
    """The first layer's weights (32 x 16 int8: 512 bytes) with a buffer that says it holds ``length``."""
    data = bytearray(SOURCE.read_bytes())
    model = _model(bytes(data))
    graph = model.Subgraphs(0)
    weights = graph.Tensors(graph.Operators(0).Inputs(1))
    struct.pack_into("<I", data, _vector(model.Buffers(weights.Buffer()), _BUFFER_DATA), length)
    return bytes(data)


def no_operators() -> bytes:
    """The graph with its operators vector emptied: a model with nothing to compile."""
    data = bytearray(SOURCE.read_bytes())
    struct.pack_into("<I", data, _vector(_model(bytes(data)).Subgraphs(0), _SUBGRAPH_OPERATORS), 0)
    return bytes(data)


def tensor_out_of_range(index: int = 999) -> bytes:
    """The first operator's first input is tensor ``index`` of the graph's ten."""
    data = bytearray(SOURCE.read_bytes())
    operator = _model(bytes(data)).Subgraphs(0).Operators(0)
    struct.pack_into("<i", data, _vector(operator, _OPERATOR_INPUTS) + 4, index)
    return bytes(data)


def opcode_out_of_range(index: int = 77) -> bytes:
    """tiny_cnn_int8 (several operator codes) with its first operator whose code is not the first
    naming operator code ``index``."""
    data = bytearray((FIXTURES / "tiny_cnn_int8.tflite").read_bytes())
    graph = _model(bytes(data)).Subgraphs(0)
    operator = next(graph.Operators(o) for o in range(graph.OperatorsLength())
                    if graph.Operators(o)._tab.Offset(_OPERATOR_OPCODE))
    struct.pack_into("<I", data, operator._tab.Pos + operator._tab.Offset(_OPERATOR_OPCODE), index)
    return bytes(data)


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path
