"""TensorFlow Lite Micro: ``tflite-micro`` runs a ``.tflite`` (int8 or float) under the
microcontroller runtime's own kernels, through the ``tflite-micro`` wheel's Python interpreter
(``tflite_micro.runtime.Interpreter``: the same C++ interpreter, op resolver and allocator a Cortex-M
build links, compiled for this machine).

- **The tensor arena** is what TFLM's own ``RecordingMicroAllocator`` reports after the tensors are
  allocated (``print_allocations``: ``Arena allocation total/head/tail N bytes`` and what the tail
  holds), read from its output, never estimated here: the RAM a microcontroller must give the model
  (the record's ``arena`` block, the ``max_arena_kb`` budget). It does not depend on the arena the
  interpreter was given, which only has to be large enough: this backend starts at ten times the
  model's size (the wheel's own default, at least 64 KiB) and grows it where TFLM says it is missing
  bytes. The model is read in place (flash on a device): its size is the arena block's ``flash_bytes``.
- **Signature**: the interpreter's input and output details (shapes are fixed: TFLM never resizes),
  named by the model's only signature where it has one, as LiteRT names them, else by tensor name.
- **Stateful models** (resource variables, CALL_ONCE) keep their state between invocations and are
  reset (``Interpreter.reset``) before each golden case: a case's steps run in order.
- **Coverage**: every operator of the main subgraph runs on TFLM's kernels; there is no delegate
  (``has_delegate`` False, as ``litert-ref``).
- **Does not convert**: an operator TFLM has no kernel for, or whose types its kernel refuses at
  prepare time (a FULLY_CONNECTED with an INT64 input), is TFLM's own outcome with its own words
  (errors.DoesNotConvert): the ``.tflite`` is LiteRT's artifact, borrowed.
"""

from __future__ import annotations

import importlib
import re
import struct
from collections import Counter
from pathlib import Path
from typing import Any, Sequence, TypedDict

import numpy as np

from ...errors import BackendError, DoesNotConvert
from ..arena import TensorArena
from ..base import Backend, TensorBackend, Coverage, LoadedModel, TensorSpec, unusable_artifact
from ..native_output import native_stderr
from ..shapes import InputShapes, LoadShapes

NAME = "tflite-micro"
# The arena the interpreter is first given: the wheel's own default (ten times the model), at least
# this much; grown where TFLM says how many bytes are missing, up to MAX_ARENA.
MIN_ARENA = 64 * 1024
MAX_ARENA = 1 << 30
_MISSING = re.compile(r"missing:?\s*(\d+)", re.IGNORECASE)
_ARENA_LINE = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")
_ALLOCATION_LINE = re.compile(r"'([^']+)' used (\d+) bytes")
# What TFLM prints when an operator cannot run: no kernel registered for it, or its kernel refusing
# the operator's types or shapes while preparing.
_OPERATOR_REFUSED = re.compile(r"Didn't find op|failed to prepare|Failed to get registration|not supported|"
                               r"Unsupported|Type .* not", re.IGNORECASE)


def _said(text: str, limit: int = 4) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines[:limit]) or "nothing on stderr"


class _Graph:
    """What the .tflite says about itself, read with the wheel's flatbuffer schema (bounds-checked in
    Python, so a truncated or corrupt file is an error here, before TFLM's C++ reads it)."""

    def __init__(self, content: bytes, path: Path, schema: Any) -> None:
        model = schema.Model.GetRootAsModel(content, 0)
        operators = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
        main = model.Subgraphs(0)
        self.subgraphs = model.SubgraphsLength()
        tensor_names = [(main.Tensors(i).Name() or b"").decode("utf-8", "replace") for i in range(main.TensorsLength())]
        self.input_tensors = [int(main.Inputs(i)) for i in range(main.InputsLength())]
        self.output_tensors = [int(main.Outputs(i)) for i in range(main.OutputsLength())]
        # Names as LiteRT gives them: the only signature's ('x', not 'serving_default_x:0').
        by_index: dict[int, str] = {}
        if model.SignatureDefsLength() == 1 and model.SignatureDefs(0).SubgraphIndex() == 0:
            signature = model.SignatureDefs(0)
            for i in range(signature.InputsLength()):
                by_index[signature.Inputs(i).TensorIndex()] = signature.Inputs(i).Name().decode("utf-8", "replace")
            for i in range(signature.OutputsLength()):
                by_index[signature.Outputs(i).TensorIndex()] = signature.Outputs(i).Name().decode("utf-8", "replace")
        self.input_names = [by_index.get(t) or tensor_names[t] for t in self.input_tensors]
        self.output_names = [by_index.get(t) or tensor_names[t] for t in self.output_tensors]
        codes = []
        for i in range(model.OperatorCodesLength()):
            code = model.OperatorCodes(i)
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            custom = code.CustomCode()
            codes.append(custom.decode("utf-8", "replace") if custom else operators.get(builtin, f"BUILTIN_{builtin}"))
        # Each operator of the main subgraph by its type and first output tensor's name, as LiteRT's
        # coverage names it ("CONV_2D Identity"), in execution order.
        self.operators: list[tuple[str, str]] = []
        for i in range(main.OperatorsLength()):
            op = main.Operators(i)
            kind = codes[op.OpcodeIndex()]
            first = int(op.Outputs(0)) if op.OutputsLength() else -1
            self.operators.append((kind, f"{kind} {tensor_names[first]}" if 0 <= first < len(tensor_names)
                                   else f"{kind} #{i}"))
        # Every constant's bytes inside the file (or, past 2 GiB, where the file says they lie): TFLM
        # reads them in place, unchecked.
        for i in range(model.BuffersLength()):
            buffer = model.Buffers(i)
            if buffer.Offset() > 1:
                if buffer.Offset() + buffer.Size() > len(content):
                    raise ValueError(f"buffer {i} lies past the end of the file")
            elif buffer.DataLength():
                buffer.DataAsNumpy()  # a view: ValueError where its bytes run past the end
        # int8/uint8 tensors with a scale: a quantized model, whatever its I/O types.
        self.quantized: str | None = None
        types = {value: name for name, value in vars(schema.TensorType).items() if not name.startswith("_")}
        for i in range(main.TensorsLength()):
            tensor = main.Tensors(i)
            quantization = tensor.Quantization()
            if quantization is not None and quantization.ScaleLength() and types.get(tensor.Type()) in ("INT8", "UINT8"):
                self.quantized = types[tensor.Type()].lower()
                break


def read_graph(content: bytes, path: Path, schema: Any) -> _Graph:
    """The model's graph as the file says it; a BackendError naming ``path`` and the backend for
    a file that is no TFLite flatbuffer, or a truncated or corrupt one."""
    if content[4:8] != b"TFL3":
        raise BackendError(f"{NAME}: {path} is not a TFLite flatbuffer (bytes 4-8 are {content[4:8]!r}, a .tflite "
                           f"has b'TFL3'); re-export it")
    try:
        graph = _Graph(content, path, schema)
    except (struct.error, IndexError, ValueError, TypeError, AttributeError) as exc:
        raise BackendError(f"{NAME}: {path} is not a valid TFLite flatbuffer: it has the TFL3 identifier but its "
                           f"tables cannot be read ({exc}): truncated or corrupt ({len(content)} bytes); re-export "
                           f"or re-download it") from exc
    if graph.subgraphs < 1:
        raise BackendError(f"{NAME}: {path} has no subgraph; re-export it")
    return graph


def read_arena(text: str, reported_by: str, flash_bytes: int) -> TensorArena | None:
    """The arena in TFLM's own report (``print_allocations``' lines); None where it has none."""
    figures = {kind: int(value) for kind, value in _ARENA_LINE.findall(text)}
    if set(figures) != {"total", "head", "tail"}:
        return None
    return TensorArena(figures["total"], figures["head"], figures["tail"], reported_by,
                       {what: int(used) for what, used in _ALLOCATION_LINE.findall(text)}, flash_bytes)


class _TensorDetail(TypedDict):
    """The keys read of what ``tflite_micro.runtime.Interpreter.get_input_details(i)`` (and
    ``get_output_details(i)``) return."""

    shape: np.ndarray
    dtype: type[np.generic]


class TFLMModel(LoadedModel):
    def __init__(self, interpreter: Any, graph: _Graph, arena: TensorArena | None, path: Path) -> None:
        self.interpreter, self.graph, self._arena, self.path = interpreter, graph, arena, path
        self.inputs = [self._spec(interpreter.get_input_details(i), name) for i, name in enumerate(graph.input_names)]
        self.outputs = [self._spec(interpreter.get_output_details(i), name) for i, name in enumerate(graph.output_names)]

    @staticmethod
    def _spec(detail: _TensorDetail, name: str) -> TensorSpec:
        return TensorSpec(name, tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"]).name)

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        interpreter = self.interpreter
        for index, value in enumerate(feeds):
            interpreter.set_input(np.ascontiguousarray(value), index)
        with native_stderr() as said:
            try:
                interpreter.invoke()
            except RuntimeError as exc:
                failed: Exception | None = exc
            else:
                failed = None
        if failed is not None:
            raise BackendError(f"{NAME}: TFLM failed to invoke {self.path}: {failed} (TFLM said: {_said(said.text)})")
        return [np.array(interpreter.get_output(index), copy=True) for index in range(len(self.outputs))]

    def bind(self, feeds: Sequence[np.ndarray]):
        interpreter, values, count = self.interpreter, [np.ascontiguousarray(v) for v in feeds], len(self.outputs)

        def infer():
            for index, value in enumerate(values):
                interpreter.set_input(value, index)
            interpreter.invoke()
            return [interpreter.get_output(index) for index in range(count)]
        return infer

    def reset(self) -> None:
        # Resource variables (a streaming model's state) back to what CALL_ONCE gives them.
        self.interpreter.reset()

    def arena(self) -> TensorArena | None:
        return self._arena

    def precision(self) -> str:
        return self.graph.quantized or super().precision()

    def coverage(self) -> Coverage | None:
        # No delegate: every operator of the main subgraph runs on TFLM's own kernels.
        ops = self.graph.operators
        return Coverage(total_ops=len(ops), delegated_ops=0, fallback_ops=len(ops), partitions=0,
                        fallback_op_names=dict(Counter(kind for kind, _ in ops)), delegates=[], method="runtime",
                        fallback_reasons={op_id: "" for _, op_id in ops})


class TFLMBackend(TensorBackend):
    name = NAME
    suffix = ".tflite"
    runtime_module = "tflite_micro"
    distribution = "tflite-micro"
    threads_supported = False  # one thread, as on a microcontroller
    has_delegate = False

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        runtime = importlib.import_module(self.runtime_module).runtime  # the package's alias of its interpreter module
        path = Path(path)
        content = path.read_bytes()
        problem = unusable_artifact(content, path)
        if problem:
            raise BackendError(f"{NAME}: {problem}")
        graph = read_graph(content, path, runtime.schema_fb)
        wanted = InputShapes.of(shapes).for_inputs(graph.input_names)
        arena_size = max(10 * len(content), MIN_ARENA)
        while True:
            with native_stderr() as said:
                try:
                    interpreter = runtime.Interpreter.from_bytes(content, arena_size=arena_size)
                except (RuntimeError, ValueError) as exc:
                    failed: Exception | None = exc
                else:
                    failed = None
            if failed is None:
                break
            missing = _MISSING.search(said.text)
            if missing and arena_size < MAX_ARENA:
                arena_size = min(MAX_ARENA, max(2 * arena_size, arena_size + int(missing.group(1)) + 4096))
                continue
            told = _said(said.text)
            if missing:
                raise BackendError(f"{NAME}: {path} needs a tensor arena of more than {MAX_ARENA >> 20} MiB "
                                   f"(TFLM said: {told})") from failed
            if _OPERATOR_REFUSED.search(said.text):
                raise DoesNotConvert(f"does not convert here: TFLM cannot run {path}: an operator of the model has no "
                                     f"TFLM kernel, or its kernel refuses the operator's types (TFLM said: {told})"
                                     ) from failed
            raise BackendError(f"{NAME}: TFLM cannot load {path}: {failed} (TFLM said: {told})") from failed
        model = TFLMModel(interpreter, graph, self._arena(interpreter, len(content)), path)
        for spec in model.inputs:
            if spec.name in wanted and tuple(wanted[spec.name]) != spec.shape:
                raise BackendError(f"{NAME}: {path}: input {spec.name!r} has the fixed shape {spec.shape} and TFLM "
                                   f"cannot resize it to {tuple(wanted[spec.name])} (shapes=)")
        return model

    def _arena(self, interpreter: Any, flash_bytes: int) -> TensorArena | None:
        with native_stderr() as said:
            interpreter.print_allocations()
        return read_arena(said.text, f"{self.distribution} {self.runtime_version() or ''} (RecordingMicroAllocator)"
                          .replace("  ", " "), flash_bytes)


def backends() -> list[Backend]:
    return [TFLMBackend()]
