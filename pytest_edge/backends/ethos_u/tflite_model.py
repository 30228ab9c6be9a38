"""A ``.tflite`` read by vela's own flatbuffer classes, checked before anything trusts it (docs/npu.md).

Read for two things: the model handed to vela, checked for consistency first (a flatbuffer cut or
damaged, no operator, an operator code, tensor or buffer index out of range, a constant whose buffer
is not the size its shape and type say), so a broken file is "not a valid model: <file>: <why>"
before the compiler sees it; and vela's optimised output, whose every subgraph's operators are the
placement (the operators left on the CPU are those that are not an ``ethos-u`` command stream).
Every read of the flatbuffer is guarded: a ``struct.error`` of a truncated file is that message too.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BackendError
from ..toolprocess import checked_file

# A flatbuffer addresses 2 GiB; a .tflite over that keeps its buffers outside (Buffer.offset/size).
MAX_MODEL_BYTES = 2**31
# Bytes per element of each TensorType (tflite schema); None: variable (STRING, RESOURCE, VARIANT).
_ITEM = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: None, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8, 13: None, 14: None,
         15: 4, 16: 2, 17: 0.5, 18: 2}
QUANTIZED_TYPES = (9, 3, 7)  # INT8, UINT8, INT16
_DAMAGED = (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError, AttributeError)


@dataclass(frozen=True)
class Operator:
    """One operator of a subgraph: its index there, its type (the builtin opcode's name, CALL_ONCE,
    or a custom operator's code, ``ethos-u``) and its tensors' names."""

    index: int
    opcode: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def signature(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """What identifies it across vela's rewriting: its type and tensors' names."""
        return self.opcode, self.inputs, self.outputs

    @property
    def label(self) -> str:
        """The name it is known by: its first output tensor's (as vela's reports name operators), else
        its first input's (ASSIGN_VARIABLE's variable), else none (CALL_ONCE: its type names it)."""
        return (self.outputs or self.inputs or ("",))[0]


@dataclass
class Subgraph:
    name: str
    operators: list[Operator] = field(default_factory=list)


@dataclass
class TfliteModel:
    path: Path
    subgraphs: list[Subgraph]
    quantized: bool  # any int8, uint8 or int16 tensor

    @property
    def operator_count(self) -> int:
        return sum(len(graph.operators) for graph in self.subgraphs)


def _opcode_names() -> dict[int, str]:
    from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator

    return {value: name for name, value in vars(BuiltinOperator).items() if not name.startswith("_")}


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def read_model(path: Path, what: str = "not a valid model", max_tensor_bytes: int | None = None) -> TfliteModel:
    """``path`` read and checked; a BackendError ``"<what>: <path>: <why>"`` where it is no consistent
    .tflite, or (``max_tensor_bytes``) one of its tensors would need more than that."""
    checked_file(path, "model", MAX_MODEL_BYTES)
    data = path.read_bytes()
    try:
        return _read(path, data, max_tensor_bytes)
    except _INVALID as problem:
        raise BackendError(f"{what}: {path}: {problem}") from None
    except _DAMAGED as error:
        raise BackendError(f"{what}: {path}: its flatbuffer is cut short or damaged "
                           f"({type(error).__name__}: {error})") from None


class _INVALID(Exception):
    pass


def _read(path: Path, data: bytes, max_tensor_bytes: int | None) -> TfliteModel:
    from ethosu.vela.tflite.Model import Model

    if len(data) < 8:
        raise _INVALID(f"{len(data)} bytes, too short for a flatbuffer")
    root = struct.unpack_from("<I", data, 0)[0]
    if root + 4 > len(data):
        raise _INVALID(f"its root table lies at byte {root}, past its end ({len(data)} bytes)")
    model = Model.GetRootAsModel(data, 0)
    names = _opcode_names()
    codes = []
    for index in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(index)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        custom = _text(code.CustomCode())
        codes.append(custom if custom else names.get(builtin, f"BUILTIN_{builtin}"))
    buffers = [model.Buffers(b) for b in range(model.BuffersLength())]
    sizes = []
    for number, buffer in enumerate(buffers):
        offset, size = (buffer.Offset(), buffer.Size()) if buffer is not None else (0, 0)
        if offset > 1 and offset + size > len(data):
            raise _INVALID(f"buffer {number} lies at bytes {offset}..{offset + size}, past its end ({len(data)} bytes)")
        sizes.append(size if offset > 1 else (buffer.DataLength() if buffer is not None else 0))
    if model.SubgraphsLength() < 1:
        raise _INVALID("it has no subgraph")
    graphs, quantized = [], False
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        tensors = graph.TensorsLength()
        tensor_names = []
        for t in range(tensors):
            tensor = graph.Tensors(t)
            tensor_names.append(_text(tensor.Name()) or f"tensor {t}")
            quantized = quantized or tensor.Type() in QUANTIZED_TYPES
            if not 0 <= tensor.Buffer() < max(len(buffers), 1):
                raise _INVALID(f"subgraph {s}: tensor {tensor_names[-1]!r} names buffer {tensor.Buffer()} of "
                               f"{len(buffers)}")
            shape = [tensor.Shape(d) for d in range(tensor.ShapeLength())]
            if any(d < -1 for d in shape):
                raise _INVALID(f"subgraph {s}: tensor {tensor_names[-1]!r} has the shape {shape}")
            held = sizes[tensor.Buffer()] if buffers else 0
            item = _ITEM.get(tensor.Type())
            if max_tensor_bytes is not None and item is not None and math.prod(max(d, 1) for d in shape) * item > \
                    max_tensor_bytes:
                raise _INVALID(f"subgraph {s}: tensor {tensor_names[-1]!r} of shape {shape} needs "
                               f"{math.prod(max(d, 1) for d in shape) * item:.0f} bytes, more than the "
                               f"{max_tensor_bytes} a tensor of a model for this target may have")
            if held and item is not None and -1 not in shape:
                elements = math.prod(shape)
                wanted = {math.ceil(elements * item), elements} if item < 1 else {elements * item}
                if held not in wanted:
                    raise _INVALID(f"subgraph {s}: tensor {tensor_names[-1]!r} of shape {shape} needs "
                                   f"{min(wanted)} bytes, and its buffer {tensor.Buffer()} holds {held}")
        for kind, count, at in (("input", graph.InputsLength(), graph.Inputs),
                                ("output", graph.OutputsLength(), graph.Outputs)):
            for i in range(count):
                if not 0 <= at(i) < tensors:
                    raise _INVALID(f"subgraph {s}: {kind} {i} is tensor {at(i)} of {tensors}")
        operators = []
        for o in range(graph.OperatorsLength()):
            op = graph.Operators(o)
            if not 0 <= op.OpcodeIndex() < len(codes):
                raise _INVALID(f"subgraph {s}: operator {o} has the operator code {op.OpcodeIndex()} of {len(codes)}")
            ends = []
            for kind, count, at in (("input", op.InputsLength(), op.Inputs), ("output", op.OutputsLength(), op.Outputs)):
                found = []
                for i in range(count):
                    index = at(i)
                    if index == -1 and kind == "input":  # an optional input left out
                        continue
                    if not 0 <= index < tensors:
                        raise _INVALID(f"subgraph {s}: operator {o} ({codes[op.OpcodeIndex()]}) has the {kind} "
                                       f"tensor {index} of {tensors}")
                    found.append(tensor_names[index])
                ends.append(tuple(found))
            operators.append(Operator(o, codes[op.OpcodeIndex()], ends[0], ends[1]))
        graphs.append(Subgraph(_text(graph.Name()) or f"subgraph {s}", operators))
    made = TfliteModel(path, graphs, quantized)
    if made.operator_count == 0:
        raise _INVALID("it has no operator (nothing to compile; 0 operators is no coverage)")
    return made
