"""An ExecuTorch ``.pte``'s execution plans read from the flatbuffer alone (schema/program.fbs of
executorch 1.x), without the runtime or the exporter: each method's name, its values (tensors with
their sizes and dtype, constant ints and bools), inputs, outputs and kernel calls. Enough for what
ExecuTorch's LLM export writes into the file: the metadata methods (``get_max_seq_len`` ... a
method with no inputs returning one constant) and the operators the attention calls with the KV
cache; and for delegate coverage, each delegate call and its payload (inline, or in a segment after
the flatbuffer). Importing ``executorch.exir`` for this would cost every process that reads a .pte
~4 s and ~140 MB."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from flatbuffers import encode, number_types, table

# Union member indices (0 is NONE) of program.fbs.
_KERNEL_TYPES = {1: "Null", 2: "Int", 3: "Bool", 4: "Double", 5: "Tensor", 6: "String", 7: "IntList",
                 8: "DoubleList", 9: "BoolList", 10: "TensorList", 11: "OptionalTensorList"}
_KERNEL_CALL, _DELEGATE_CALL = 1, 2  # InstructionArguments.KernelCall, .DelegateCall
INLINE, SEGMENT = 0, 1  # DataLocation of a delegate's processed payload
MAX_PLANS = 4096
MAX_VALUES = 1 << 22
# What reading a broken flatbuffer raises: offsets past the end, wrong types under a union.
UNREADABLE = (ValueError, IndexError, TypeError, struct.error)


@dataclass(frozen=True)
class TensorValue:
    sizes: tuple[int, ...]
    scalar_type: int
    static: bool  # TensorShapeDynamism.STATIC: the sizes are the tensor's, not an upper bound
    planned: bool  # memory-planned (allocation_info): allocated at load, not a constant


@dataclass
class Plan:
    """One method of the program."""

    name: str
    values: list[object]  # TensorValue, int, bool, or the kernel type's name for others
    inputs: list[int]
    outputs: list[int]
    operators: list[str] = field(default_factory=list)
    kernel_calls: list[tuple[str, list[int]]] = field(default_factory=list)  # (operator, value indices)
    delegates: list[str] = field(default_factory=list)  # each BackendDelegate's id (EthosUBackend, ...)
    # Each delegate's payload, parallel to ``delegates``: (DataLocation, index into the program's
    # inline data or its segments).
    delegate_data: list[tuple[int, int]] = field(default_factory=list)
    delegate_calls: list[int] = field(default_factory=list)  # each DelegateCall's delegate index
    # Each delegate's compile specs (key -> value bytes), parallel to ``delegates``.
    delegate_specs: list[dict[str, bytes]] = field(default_factory=list)

    def tensor(self, index: int) -> TensorValue | None:
        value = self.values[index] if 0 <= index < len(self.values) else None
        return value if isinstance(value, TensorValue) else None

    def constant(self) -> int | bool | None:
        """What a metadata method returns: no inputs, one constant int or bool out."""
        if self.inputs or len(self.outputs) != 1 or not 0 <= self.outputs[0] < len(self.values):
            return None
        value = self.values[self.outputs[0]]
        return value if isinstance(value, (int, bool)) else None


def _bounded(count: int, limit: int, end: int, size: int) -> None:
    """A vector longer than its limit or than the file: a broken or hostile program, refused before
    one entry is read."""
    if count > limit or end > size:
        raise ValueError(f"a vector of {count} entries past its bounds")


class _Table(table.Table):
    """A flatbuffer table that counts what it reads against one budget for the whole file (a list,
    shared by every table of it): vectors may point at the same bytes, so a few kilobytes can
    describe millions of entries (an 8 KB file read as 10**6 kernel calls in 25 s); a file read
    honestly never holds more entries than it has 4-byte words."""

    def __init__(self, buf: bytes, pos: int, budget: list[int]) -> None:
        super().__init__(buf, pos)
        self.budget = budget

    def _take(self, count: int) -> None:
        self.budget[0] -= count
        if self.budget[0] < 0:
            raise ValueError("its vectors point at each other: more entries than the file has words")

    def field(self, slot: int) -> int:
        return self.Offset(4 + 2 * slot)

    def scalar(self, slot: int, flags, default=0):
        offset = self.field(slot)
        return self.Get(flags, self.Pos + offset) if offset else default

    def child(self, slot: int) -> "_Table | None":
        offset = self.field(slot)
        return _Table(self.Bytes, self.Indirect(self.Pos + offset), self.budget) if offset else None

    def vector_bytes(self, slot: int) -> bytes:
        offset = self.field(slot)
        if not offset:
            return b""
        start, count = self.Vector(offset), self.VectorLen(offset)
        _bounded(count, len(self.Bytes), start + count, len(self.Bytes))
        return bytes(self.Bytes[start:start + count])

    def string(self, slot: int) -> str:
        offset = self.field(slot)
        return self.String(self.Pos + offset).decode("utf-8", "replace") if offset else ""

    def ints(self, slot: int, flags, width: int, limit: int = MAX_VALUES) -> list[int]:
        offset = self.field(slot)
        if not offset:
            return []
        start, count = self.Vector(offset), self.VectorLen(offset)
        _bounded(count, limit, start + count * width, len(self.Bytes))
        self._take(count)
        return [self.Get(flags, start + i * width) for i in range(count)]

    def tables(self, slot: int, limit: int = MAX_VALUES) -> list["_Table"]:
        offset = self.field(slot)
        if not offset:
            return []
        start, count = self.Vector(offset), self.VectorLen(offset)
        _bounded(count, limit, start + count * 4, len(self.Bytes))
        self._take(count)
        return [_Table(self.Bytes, self.Indirect(start + i * 4), self.budget) for i in range(count)]


def _value(evalue: _Table) -> object:
    kind = _KERNEL_TYPES.get(evalue.scalar(0, number_types.Uint8Flags), "None")
    val = evalue.child(1)
    if val is None:
        return kind
    if kind == "Int":
        return int(val.scalar(0, number_types.Int64Flags))
    if kind == "Bool":
        return bool(val.scalar(0, number_types.BoolFlags, False))
    if kind == "Tensor":
        return TensorValue(tuple(val.ints(2, number_types.Int32Flags, 4, 64)), val.scalar(0, number_types.Int8Flags),
                           val.scalar(8, number_types.Int8Flags) == 0, val.field(6) != 0)
    return kind


def read_plans(data: bytes) -> list[Plan]:
    """Every execution plan of the program in ``data`` (a .pte checked by ``pte_problem``); one of
    :data:`UNREADABLE` where the flatbuffer is not one."""
    program = _program(data)
    plans = []
    for plan in program.tables(1, MAX_PLANS):  # Program.execution_plan
        operators = [op.string(0) for op in plan.tables(6)]
        delegates = plan.tables(7)
        found = Plan(plan.string(0), [_value(v) for v in plan.tables(2)],
                     plan.ints(3, number_types.Int32Flags, 4), plan.ints(4, number_types.Int32Flags, 4), operators,
                     delegates=[delegate.string(0) for delegate in delegates],
                     delegate_data=[_data_reference(delegate.child(1)) for delegate in delegates],
                     delegate_specs=[{spec.string(0): spec.vector_bytes(1) for spec in delegate.tables(2)}
                                     for delegate in delegates])
        for chain in plan.tables(5):
            for instruction in chain.tables(2):
                kind = instruction.scalar(0, number_types.Uint8Flags)
                call = instruction.child(1)
                if call is None:
                    continue
                if kind == _KERNEL_CALL:
                    op = call.scalar(0, number_types.Int32Flags)  # 0, the default, is not stored
                    if 0 <= op < len(operators):
                        found.kernel_calls.append((operators[op], call.ints(1, number_types.Int32Flags, 4)))
                elif kind == _DELEGATE_CALL:
                    found.delegate_calls.append(call.scalar(0, number_types.Int32Flags))
        plans.append(found)
    return plans


def forward_plan(plans: list[Plan]) -> Plan | None:
    """The plan pytest-edge runs: the "forward" method, else the program's first; None for none."""
    return next((p for p in plans if p.name == "forward"), plans[0] if plans else None)


def _program(data: bytes) -> _Table:
    # The bytes as they are (no copy: a decoder's worker holds the file once, inside its measured peak).
    return _Table(data, encode.Get(number_types.UOffsetTFlags.packer_type, data, 0), [len(data) // 4])


def _data_reference(processed: _Table | None) -> tuple[int, int]:
    if processed is None:
        return (INLINE, -1)
    return (processed.scalar(0, number_types.Int8Flags), processed.scalar(1, number_types.Uint32Flags))


def delegate_payload(data: bytes, reference: tuple[int, int]) -> bytes:
    """A delegate's processed payload (``Plan.delegate_data``): inline in the flatbuffer, or a segment
    after it, at the extended header's segment base offset, as the runtime finds it. One of
    :data:`UNREADABLE` where the reference points outside the file."""
    location, index = reference
    program = _program(data)
    entries = program.tables(3 if location == INLINE else 4)  # backend_delegate_data, segments
    if not 0 <= index < len(entries):
        raise IndexError(f"delegate data {index} of {len(entries)}")
    if location == INLINE:
        return entries[index].vector_bytes(0)
    if location != SEGMENT or data[8:12] != b"eh00" or len(data) < 32:
        raise ValueError(f"delegate data in location {location} without the extended header that places it")
    base = int.from_bytes(data[24:32], "little")
    segment = entries[index]
    offset, size = segment.scalar(0, number_types.Uint64Flags), segment.scalar(1, number_types.Uint64Flags)
    if base + offset + size > len(data):
        raise ValueError(f"a delegate segment of {size} bytes at {base + offset} past the file's {len(data)}")
    return bytes(data[base + offset:base + offset + size])
