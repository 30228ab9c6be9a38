"""``tosa-ref``: the numerics of the Ethos-U path, on the TOSA reference model (docs/npu.md).

ExecuTorch's Arm backend lowers each Ethos-U partition to a TOSA graph, and vela compiles that graph
into the NPU's command stream; the TOSA reference model (``tosa-tools``) computes that graph as the
TOSA specification defines it, bit-exact for the integer profile. So the delegate's ``.tosa`` run on
it gives the outputs the NPU is specified to give, judged against the golden like any backend's.

tosa-tools pins NumPy below 2.2 (and ml-dtypes, flatbuffers), so it never joins the main environment:
the reference model runs in a child process of its own environment's Python, named by
``PYTEST_EDGE_TOSA_PYTHON`` (``tox -e tosa`` makes one), as tflite-runtime's NumPy 1.x environment
runs as a device. Arrays travel through the child's pipes as ``.npz`` bytes, never pickled.

A delegate's graph takes and gives int8: the program around it quantizes the float input and
dequantizes the output on the CPU. Their scale and zero point are read from the ExecuTorch program
beside the graph (``<stem>.pte``), so the backend's inputs and outputs are the program's, in float.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import BackendError
from ..base import LoadedModel, TensorBackend, TensorSpec
from ..shapes import LoadShapes
from . import TOSA_PYTHON_VARIABLE

PYTHON_VARIABLE = TOSA_PYTHON_VARIABLE  # the manifest's (__init__.py): tosa-ref is registered where it is set
_LENGTH = struct.Struct("<Q")
# What the child runs: read a graph's path, then answer each .npz of inputs with one of outputs
# (an empty one and the message on a failure), until its input closes.
_CHILD = r"""
import io, os, struct, sys
import numpy as np
import tosa_reference_model as reference
LENGTH = struct.Struct("<Q")
# The reference model prints on file descriptor 1 (a spec version warning): the answers get their
# own copy of it, and 1 goes to standard error.
source, sink = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
graph = open(sys.argv[1], "rb").read()
def read():
    head = source.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    return source.read(LENGTH.unpack(head)[0])
def write(arrays, message=""):
    buffer = io.BytesIO()
    np.savez(buffer, *arrays, message=np.array(message))
    data = buffer.getvalue()
    sink.write(LENGTH.pack(len(data)) + data)
    sink.flush()
while True:
    data = read()
    if data is None:
        break
    with np.load(io.BytesIO(data), allow_pickle=False) as feeds:
        inputs = [feeds[f"arr_{i}"] for i in range(len(feeds.files))]
    try:
        outputs, status = reference.run(graph, inputs)
        if status != reference.GraphStatus.TOSA_VALID:
            write([], f"the reference model says {status.name}")
            continue
        write(outputs)
    except Exception as error:
        write([], f"{type(error).__name__}: {error}")
"""


def tosa_python() -> Path | None:
    value = os.environ.get(PYTHON_VARIABLE)
    return Path(value) if value else None


@lru_cache(maxsize=4)
def _version(python: str) -> str | None:
    done = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('tosa-tools'))"],
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else None


class Quantization:
    """The scale and zero point of an int8 tensor at the delegate's boundary, and the float tensor's shape."""

    def __init__(self, scale: float, zero_point: int, shape: tuple[int, ...]) -> None:
        self.scale, self.zero_point, self.shape = scale, zero_point, shape


def boundary_quantization(pte: Path, tosa: Path) -> tuple[list[Quantization], list[Quantization]]:
    """The quantization of each program input into the delegate and of each output out of it, read
    from the program's own quantize/dequantize kernel calls; a BackendError naming both files where
    the program is not one Ethos-U delegate between them."""
    from .pte import ETHOS_U_DELEGATE

    if not pte.is_file():
        raise BackendError(f"{tosa} (tosa-ref): its inputs and outputs are the delegate's int8; their scale and "
                           f"zero point are read from the ExecuTorch program beside it ({pte.name}), which is not "
                           "there (docs/npu.md)")
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(pte.read_bytes()).program.execution_plan[0]
    calls = [i.instr_args for i in plan.chains[0].instructions]
    delegates = [c for c in calls if type(c).__name__ == "DelegateCall"]
    kernels = [(plan.operators[c.op_index].name, list(c.args)) for c in calls if type(c).__name__ == "KernelCall"]

    def value(index: int):
        return plan.values[index].val

    def quantization(args: list[int], float_index: int) -> Quantization:
        return Quantization(float(value(args[1]).double_val), int(value(args[2]).int_val),
                            tuple(int(d) for d in value(float_index).sizes))

    inputs, outputs = [], []
    for index in plan.inputs:
        found = [args for name, args in kernels if name == "quantized_decomposed::quantize_per_tensor"
                 and args[0] == index]
        if len(found) == 1:
            inputs.append(quantization(found[0], index))
    for index in plan.outputs:
        found = [args for name, args in kernels if name == "quantized_decomposed::dequantize_per_tensor"
                 and args[-1] == index]
        if len(found) == 1:
            outputs.append(quantization(found[0], index))
    whole = (len(delegates) == 1 and plan.delegates[delegates[0].delegate_index].id == ETHOS_U_DELEGATE
             and len(kernels) == len(plan.inputs) + len(plan.outputs)
             and (len(inputs), len(outputs)) == (len(plan.inputs), len(plan.outputs)))
    if not whole:
        raise BackendError(f"{tosa} (tosa-ref): {pte.name} beside it is not one Ethos-U delegate between its inputs' "
                           f"quantize and its outputs' dequantize (kernels: {', '.join(n for n, _ in kernels)}): "
                           "the graph alone is not the program")
    return inputs, outputs


class TosaReferenceModel(LoadedModel):
    def __init__(self, path: Path, python: Path) -> None:
        self.path = path
        self.quantized_inputs, self.quantized_outputs = boundary_quantization(path.with_suffix(".pte"), path)
        self.inputs = [TensorSpec(f"input_{i}", q.shape, "float32") for i, q in enumerate(self.quantized_inputs)]
        self.outputs = [TensorSpec(f"output_{i}", q.shape, "float32") for i, q in enumerate(self.quantized_outputs)]
        self.child = subprocess.Popen([str(python), "-c", _CHILD, str(path)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def _ask(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        buffer = io.BytesIO()
        np.savez(buffer, *arrays)
        data = buffer.getvalue()
        try:
            assert self.child.stdin is not None and self.child.stdout is not None
            self.child.stdin.write(_LENGTH.pack(len(data)) + data)
            self.child.stdin.flush()
            head = self.child.stdout.read(_LENGTH.size)
            answer = self.child.stdout.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""
        except (BrokenPipeError, struct.error):
            answer = b""
        if not answer:
            said = self.child.stderr.read().decode(errors="replace") if self.child.poll() is not None else ""
            raise BackendError(f"{self.path} (tosa-ref): the reference model's process ended: {said.strip()[-600:]}")
        with np.load(io.BytesIO(answer), allow_pickle=False) as found:
            message = str(found["message"])
            if message:
                raise BackendError(f"{self.path} (tosa-ref): {message}")
            return [found[f"arr_{i}"] for i in range(len(found.files) - 1)]

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        quantized = [np.clip(np.round(np.asarray(x, np.float32) / q.scale) + q.zero_point, -128, 127).astype(np.int8)
                     for x, q in zip(feeds, self.quantized_inputs)]
        raw = self._ask(quantized)
        return [((np.asarray(y, np.float32) - q.zero_point) * q.scale).astype(np.float32).reshape(q.shape)
                for y, q in zip(raw, self.quantized_outputs)]

    def precision(self) -> str:
        return "int8 (the TOSA reference model on the delegate's graph)"

    def __del__(self) -> None:
        child = getattr(self, "child", None)
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()


class TosaReferenceBackend(TensorBackend):
    name = "tosa-ref"
    suffix = ".tosa"
    runtime_module = "tosa_reference_model"
    distribution = "tosa-tools"
    threads_supported = False
    has_delegate = False

    def unavailable_reason(self) -> str | None:
        python = tosa_python()
        if python is None:
            return (f"the TOSA reference model runs in its own environment (tosa-tools pins NumPy < 2.2): set "
                    f"{PYTHON_VARIABLE} to its Python (tox -e tosa; docs/npu.md)")
        if not python.is_file():
            return f"{PYTHON_VARIABLE}={python}: no such file"
        if self.runtime_version() is None:
            return f"{PYTHON_VARIABLE}={python}: tosa-tools is not installed there"
        return None

    def missing_artifact(self, model_name: str) -> str:
        # Unregistered (no environment named), a model's .tosa is not searched for: say why.
        return self.unavailable_reason() or super().missing_artifact(model_name)

    def runtime_version(self) -> str | None:
        python = tosa_python()
        return _version(str(python)) if python is not None and python.is_file() else None

    def import_runtime(self) -> None:
        """Nothing to import here: the reference model lives in its own environment's process."""

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        python = tosa_python()
        if python is None or self.unavailable_reason():
            raise BackendError(f"{path} (tosa-ref): {self.unavailable_reason()}")
        return TosaReferenceModel(Path(path), python)
