"""ExecuTorch intermediates through ETDump, for triage (docs/triage.md): the ``.pte`` run
once more with an event tracer and a debug buffer, the logged tensors mapped to the execution plan's
values, and non-delegated kernels re-run with PyTorch on the inputs they received. Runs in the
executorch worker only, on a mismatch."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np

from ..intermediates import EtdumpEvent, EtdumpRecord, Intermediates
from .dtypes import INTERMEDIATE_TYPES

if TYPE_CHECKING:
    import torch

# ---------------------------------------------------------------- intermediates through ETDump
#
# With a debug buffer the Python bindings set EventTracerDebugLogLevel::kIntermediateOutputs, and
# the runtime then logs (runtime/executor/method.cpp, executorch 1.5):
#  - for a KernelCall (a non-delegated operator): its out tensor(s), from the generated kernel wrapper;
#  - for a DelegateCall: every argument, inputs and outputs alike (the runtime cannot tell them
#    apart); XNNPACK logs nothing inside a partition, only one profiling event per XNNPACK operator;
#  - the program outputs once more, flagged as outputs.
# Prim ops (et_view, sym_size) and moves log nothing.

_ALIGNMENT = 64  # the debug buffer's data sink aligns every tensor to 64 bytes
# EValue kinds the ETDump generator can log: any other among a delegate's arguments aborts the process.
_LOGGABLE = {"Tensor", "TensorList", "Int", "Double", "Bool"}


def _nbytes(tensor: Any) -> int:
    count = int(np.prod(tensor.sizes, dtype=np.int64)) if len(tensor.sizes) else 1
    dtype = INTERMEDIATE_TYPES.get(int(tensor.scalar_type))
    return count * (np.dtype(dtype).itemsize if dtype else 8)


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGNMENT) * _ALIGNMENT + _ALIGNMENT


@dataclass
class _Step:
    """One instruction of the plan: the values it passes (``args``, in order), the tensors it writes
    first (``outputs``) and reads (``inputs``), and what it calls: an operator (name, overload) for a
    KernelCall, a delegate's short name (XNNPACK) for a DelegateCall."""

    instruction: int
    kind: str  # the instruction's kind: "KernelCall", "DelegateCall", "MoveCall", ...
    args: list[int]
    outputs: list[int]
    inputs: list[int]
    operator: tuple[str, str] = ("", "")
    delegate: str = ""


# What an operator's argument is when PyTorch re-runs it (_aten_reference): a value of the plan decoded.
_Argument = Union["torch.Tensor", "torch.dtype", int, float, bool, str, None, list[Any]]


class _Layout:
    """The "forward" plan of a .pte as the runtime executes it: which value each instruction writes
    and reads, so that the logged tensors can be given value ids and producers."""

    def __init__(self, data: bytes) -> None:
        from executorch.exir._serialize._program import deserialize_pte_binary

        self.data = data
        self.program = deserialize_pte_binary(data).program
        self.plan = self.program.execution_plan[0]
        self.values = [v.val for v in self.plan.values]
        self.instructions = list(self.plan.chains[0].instructions) if self.plan.chains else []
        defined = set(self.plan.inputs) | {i for i, v in enumerate(self.values) if self._is_constant(v)}
        self.steps: list[_Step] = []
        for index, instruction in enumerate(self.instructions):
            args = instruction.instr_args
            kind = type(args).__name__
            arg_ids = list(getattr(args, "args", []))
            tensor_ids = [i for i in dict.fromkeys(arg_ids) if self.kind(i) == "Tensor"]
            # An instruction's outputs are the tensors no earlier instruction wrote (out variants
            # and delegate results are preallocated values written here first).
            outputs = [i for i in tensor_ids if i not in defined]
            defined.update(outputs)
            step = _Step(index, kind, arg_ids, outputs, [i for i in tensor_ids if i not in outputs])
            if kind == "KernelCall":
                operator = self.plan.operators[args.op_index]
                step.operator = (operator.name, operator.overload)
            elif kind == "DelegateCall":
                delegate = self.plan.delegates[args.delegate_index]
                step.delegate = delegate.id.removesuffix("Backend").upper() if delegate.id.endswith(
                    "Backend") else delegate.id
            self.steps.append(step)

    @staticmethod
    def _is_constant(value: Any) -> bool:
        return type(value).__name__ == "Tensor" and value.data_buffer_idx > 0 and value.allocation_info is None

    def kind(self, value_id: int) -> str:
        return type(self.values[value_id]).__name__

    def unloggable(self) -> str | None:
        """Why logging this program would abort the runtime, or None."""
        for step in self.steps:
            if step.kind == "DelegateCall":
                bad = sorted({self.kind(i) for i in step.args} - _LOGGABLE)
                if bad:
                    return (f"instruction {step.instruction} passes {', '.join(bad)} values to its delegate, which "
                            "ETDump cannot log (the runtime would abort)")
        return None

    def debug_buffer_size(self) -> int:
        """An upper bound of what the run logs: every argument of every call, the outputs again."""
        total = 1 << 20
        for step in self.steps:
            for value_id in step.args:
                value = self.values[value_id]
                if self.kind(value_id) == "Tensor":
                    total += _padded(_nbytes(value))
                elif self.kind(value_id) == "TensorList":
                    total += sum(_padded(_nbytes(self.values[i])) for i in value.items)
        for value_id in self.plan.outputs:
            if self.kind(value_id) == "Tensor":
                total += _padded(_nbytes(self.values[value_id]))
        return total

    def constant(self, value_id: int) -> np.ndarray | None:
        """A constant tensor (weights) of the program, from its constant segment or buffer."""
        tensor = self.values[value_id]
        dtype = INTERMEDIATE_TYPES.get(int(tensor.scalar_type))
        if dtype is None:
            return None
        nbytes, segment = _nbytes(tensor), self.program.constant_segment
        if segment.offsets:
            header = self.data[8:12] == b"eh00"
            base = int.from_bytes(self.data[24:32], "little") if header else 0
            start = base + self.program.segments[segment.segment_index].offset + segment.offsets[tensor.data_buffer_idx]
            raw = self.data[start:start + nbytes]
        elif tensor.data_buffer_idx < len(self.program.constant_buffer):
            raw = bytes(self.program.constant_buffer[tensor.data_buffer_idx].storage)[:nbytes]
        else:
            return None
        if len(raw) != nbytes:
            return None
        return np.frombuffer(raw, dtype=dtype).reshape(tuple(tensor.sizes)).copy()


def _debug_tensor(tensor: Any, buffer: bytes) -> np.ndarray | None:
    code = tensor.scalar_type.value if hasattr(tensor.scalar_type, "value") else tensor.scalar_type
    dtype = INTERMEDIATE_TYPES.get(int(code))
    if dtype is None:
        return None
    shape = tuple(int(d) for d in tensor.sizes)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    itemsize = np.dtype(dtype).itemsize
    if count == 0:
        return np.zeros(shape, dtype)
    offset = int(tensor.offset)
    if offset < 0 or offset + count * itemsize > len(buffer):
        return None
    flat = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
    strides = tuple(int(s) for s in tensor.strides)
    contiguous = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
    if not strides or strides == contiguous:
        return flat.reshape(shape).copy()
    # A dim order other than contiguous (channels last): the buffer holds the memory layout.
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * itemsize for s in strides)).copy()


def _record(data: bytes, feeds: Sequence[np.ndarray], buffer_size: int) -> tuple[bytes, bytes]:
    """ETDump and debug buffer of one "forward" run on a fresh program (not the measured one)."""
    import torch
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(data, enable_etdump=True, debug_buffer_size=buffer_size)
    method = program.load_method("forward")
    method.execute([torch.from_numpy(np.ascontiguousarray(x)) for x in feeds])
    with tempfile.TemporaryDirectory(prefix="pytest-edge-etdump-") as folder:
        etdump_path, buffer_path = Path(folder) / "run.etdp", Path(folder) / "run.bin"
        program.write_etdump_result_to_file(str(etdump_path), str(buffer_path))
        return etdump_path.read_bytes(), buffer_path.read_bytes()


def _is_output(entry: Any) -> bool:
    flag = getattr(entry, "output", None)
    return bool(getattr(flag, "bool_val", flag)) if flag is not None else False


def etdump_intermediates(data: bytes, feeds: Sequence[np.ndarray]) -> Intermediates:
    """What one ETDump run records: :class:`Intermediates` of method "etdump" (value ids "v12": a .pte
    has no tensor names) with :class:`EtdumpRecord` details: each operator call in execution order
    (a delegate partition's or a CPU kernel's, its logged inputs and outputs, and for a kernel
    PyTorch's own kernel re-run on the same inputs), the program's outputs as recorded, the calls
    that logged nothing; ``unavailable`` where the run cannot be recorded."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    layout = _Layout(data)
    # unnamed_because: why the triage cannot match a partition's inside against reference tensors.
    record = EtdumpRecord(unnamed_because="a .pte keeps no tensor names, the golden holds only the model's "
                                          "outputs, and no ETRecord is at hand",
                          partitions=sum(s.kind == "DelegateCall" for s in layout.steps),
                          kernels=sum(s.kind == "KernelCall" for s in layout.steps))
    result = Intermediates("etdump", delegated=record.partitions > 0, details=record)
    problem = layout.unloggable()
    if problem:
        result.unavailable = problem
        return result
    etdump_bytes, buffer = _record(data, feeds, layout.debug_buffer_size())
    etdump = deserialize_from_etdump_flatcc(etdump_bytes)
    run = next((r for r in reversed(etdump.run_data)
                if any(e.profile_event and e.profile_event.name == "Method::execute" for e in r.events)), None)
    if run is None:
        result.unavailable = "the ETDump holds no Method::execute block"
        return result
    logged: dict[int, list[np.ndarray | None]] = {}
    xnn_ops: dict[int, list[str]] = {}
    for event in run.events:
        profile, debug = event.profile_event, event.debug_event
        if profile is not None and profile.delegate_debug_id_str and profile.chain_index == 0:
            # "Fully Connected (NC, F32) GEMM #1": the operator XNNPACK ran, numbered per kind.
            name = profile.delegate_debug_id_str.rsplit(" #", 1)[0]
            xnn_ops.setdefault(profile.instruction_id, []).append(name)
        if debug is None or debug.debug_entry is None:
            continue
        entry = debug.debug_entry
        tensor = _debug_tensor(entry.tensor, buffer) if entry.tensor is not None else None
        if _is_output(entry):
            record.program_outputs.append(tensor)
        elif debug.chain_index == 0:
            logged.setdefault(debug.instruction_id, []).append(tensor)
    known: dict[int, np.ndarray] = {vid: np.asarray(x) for vid, x in zip(layout.plan.inputs, feeds)}
    for step in layout.steps:
        if step.kind not in ("KernelCall", "DelegateCall"):
            continue
        index = step.instruction
        entries = logged.get(index, [])
        if step.kind == "DelegateCall":
            ops = xnn_ops.get(index, [])
            label = (f"{step.delegate} partition at instruction {index}"
                     + (f" ({', '.join(dict.fromkeys(ops))})" if ops else ""))
            # Every argument is logged, in order: inputs and outputs are told apart by the plan.
            by_id = dict(zip(step.args, entries)) if len(entries) == len(step.args) else {}
        else:
            name, overload = step.operator
            label = f"{name}.{overload} at instruction {index} (ExecuTorch's CPU kernel)" if overload else \
                f"{name} at instruction {index} (ExecuTorch's CPU kernel)"
            by_id = dict(zip(step.outputs[-len(entries):], entries)) if entries else {}
        if not entries:
            record.unlogged.append(label)
            continue
        inputs = {vid: by_id.get(vid, known.get(vid)) for vid in step.inputs}
        outputs = {vid: by_id[vid] for vid in step.outputs if by_id.get(vid) is not None}
        event = EtdumpEvent(index, "delegate" if step.kind == "DelegateCall" else "kernel", label,
                            {f"v{k}": v for k, v in inputs.items() if v is not None},
                            {f"v{k}": v for k, v in outputs.items()})
        if step.kind == "KernelCall":
            event.reference, event.reference_note = _aten_reference(layout, step, known, outputs)
        known.update(outputs)
        record.events.append(event)
        for vid, value in outputs.items():
            key = f"v{vid}"
            result.order.append(key)
            result.producers[key] = label
            result.tensors[key] = value
            result.names[key] = f"value {vid}"
    return result


def _aten_reference(layout: _Layout, step: _Step, known: dict[int, np.ndarray],
                    outputs: dict[int, np.ndarray]) -> tuple[dict[str, np.ndarray], str | None]:
    """The same operator run by PyTorch's own kernel on the inputs ExecuTorch's kernel received:
    ``({value id: output}, None)``, or ``({}, why not)``."""
    import torch

    name, overload = step.operator
    namespace, _, op_name = name.partition("::")
    try:
        op = getattr(getattr(getattr(torch.ops, namespace), op_name), overload or "default")
    except (AttributeError, RuntimeError):
        return {}, f"PyTorch has no operator {name}.{overload}"
    schema = op._schema
    torch_dtypes = {code: getattr(torch, dtype) for code, dtype in INTERMEDIATE_TYPES.items()}

    def tensor(vid: int) -> torch.Tensor:
        if vid not in known:
            constant = layout.constant(vid)
            if constant is None:
                raise LookupError(f"value {vid} was not recorded")
            known[vid] = constant
        return torch.from_numpy(np.array(known[vid]))

    def decode(vid: int, type_name: str) -> _Argument:
        value, kind = layout.values[vid], layout.kind(vid)
        if kind == "Tensor":
            return tensor(vid)
        if kind == "Int":
            return torch_dtypes[value.int_val] if "ScalarType" in type_name else value.int_val
        if kind == "Double":
            return value.double_val
        if kind == "Bool":
            return value.bool_val
        if kind == "Null":
            return None
        if kind == "String":
            return value.string_val
        if kind == "IntList":
            return [layout.values[i].int_val for i in value.items]
        if kind in ("DoubleList", "BoolList"):
            return list(value.items)
        if kind == "TensorList":
            return [tensor(i) for i in value.items]
        if kind == "OptionalTensorList":
            return [None if i < 0 or layout.kind(i) == "Null" else tensor(i) for i in value.items]
        raise LookupError(f"argument of kind {kind}")

    positional: list[_Argument] = []
    keywords: dict[str, _Argument] = {}
    fresh: dict[int, torch.Tensor] = {}
    try:
        for argument, vid in zip(schema.arguments, step.args):
            written = argument.alias_info is not None and argument.alias_info.is_write
            if written and vid in outputs:
                # A fresh out tensor: PyTorch must not see ExecuTorch's result in it.
                dtype = torch.from_numpy(np.empty(0, outputs[vid].dtype)).dtype
                value = torch.empty(outputs[vid].shape, dtype=dtype)
                fresh[vid] = value
            else:
                value = decode(vid, str(argument.type))
            if argument.kwarg_only:
                keywords[argument.name] = value
            else:
                positional.append(value)
        op(*positional, **keywords)
    except Exception as exc:  # noqa: BLE001 - any failure only means no reference for this operator
        return {}, f"PyTorch could not re-run it ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return {f"v{vid}": t.numpy().copy() for vid, t in fresh.items()}, None
