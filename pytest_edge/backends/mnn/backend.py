"""MNN: ``mnn`` (CPU, ``precision: high``, i.e. float32) and, by name, ``mnn-opencl`` and
``mnn-vulkan`` (its GPU forward types).

Artifacts are ``.mnn`` files, made by MNN's converter (``mnnconvert``, from the ``MNN`` wheel) from
the ``.onnx`` (fixtures/make_models.py). Inputs and outputs are the model's own, in NCHW as the
``.onnx`` had them, matched by position. The Express module API runs them (``MNN.nn``).

Coverage: on the CPU forward type every operator MNN runs is the CPU's, counted from one session
run with a per-operator callback (``runSessionWithCallBackInfo``; MNN's own graph after conversion:
tiny_cnn's CumSum became a While loop with Raster ops). On the GPU forward types it cannot be
read: MNN's Python API does not say which backend ran each operator (and a forward type a build
lacks falls back to the CPU as a whole, which is why those variants are probed before use).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence, TypedDict

import numpy as np

from ...errors import BackendError
from ..base import Backend, TensorBackend, Coverage, LoadedModel, TensorSpec, unusable_artifact
from ..shapes import InputShapes, LoadShapes
from ..native_output import native_stderr

_FORWARD_TYPES = {"mnn": "CPU", "mnn-opencl": "OPENCL", "mnn-vulkan": "VULKAN"}
_PROBE = """
import MNN.nn as nn
nn.create_runtime_manager(({"backend": %r, "precision": "high", "numThread": 1},))
"""


@lru_cache(maxsize=None)
def forward_type_missing(forward: str) -> str | None:
    """Why MNN cannot run on ``forward`` here, or None. MNN substitutes the CPU for a forward type
    its build or machine lacks and says so only on stdout ("Can't Find type=3 backend, use 0
    instead"): asked in a child process, whose output can be read."""
    done = subprocess.run([sys.executable, "-c", _PROBE % forward], capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    if done.returncode != 0 or "Can't Find type" in said:
        return f"MNN has no {forward} forward type here (its build or this machine lacks it; MNN would use the CPU)"
    return None


def _spec(var: Any, name: str) -> TensorSpec:
    import MNN.expr as F

    dtypes = {F.float: "float32", F.int: "int32", F.double: "float64", F.uint8: "uint8", F.int64: "int64"}
    shape = tuple(d if d >= 0 else None for d in var.shape)
    return TensorSpec(name, shape, dtypes.get(var.dtype, str(var.dtype)))


class _ModuleInfo(TypedDict):
    """The keys read of what ``MNN.nn`` module's ``get_info()`` returns."""

    inputs: list[Any]  # MNN.expr variables, one per input, in order
    inputNames: list[str]
    outputNames: list[str]


class _RuntimeConfig(TypedDict, total=False):
    """What ``MNN.nn.create_runtime_manager`` is given: the forward type, its precision, threads."""

    backend: str
    precision: str
    numThread: int


class MNNModel(LoadedModel):
    def __init__(self, module: Any, info: _ModuleInfo, forward: str, path: Path,
                 shapes: InputShapes) -> None:
        import MNN.expr as F

        self.module, self.forward, self.path, self._F = module, forward, path, F
        self._vars = info["inputs"]
        self.inputs = [_spec(v, n) for v, n in zip(self._vars, info["inputNames"])]
        wanted = shapes.for_inputs([s.name for s in self.inputs])
        self.inputs = [TensorSpec(s.name, tuple(wanted[s.name]), s.dtype) if s.name in wanted else s
                       for s in self.inputs]
        # Output shapes are what a run gives: one run on zeros where the input shapes are known.
        if any(s.is_dynamic for s in self.inputs):
            self.outputs = [TensorSpec(n, (), "float32") for n in info["outputNames"]]
            self._outputs_known = False
        else:
            probe = self.run([np.zeros(s.shape, s.dtype) for s in self.inputs])
            self.outputs = [TensorSpec(n, p.shape, p.dtype.name) for n, p in zip(info["outputNames"], probe)]
            self._outputs_known = True

    def _feed(self, feeds: Sequence[np.ndarray]) -> list[Any]:
        F = self._F
        values = []
        for var, value in zip(self._vars, feeds):
            value = np.ascontiguousarray(value, dtype=_spec(var, "").dtype)
            values.append(F.const(value, list(value.shape), F.NCHW, var.dtype))
        return values

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        outputs = self.module.forward(self._feed(feeds))
        return [np.array(self._F.convert(out, self._F.NCHW).read()).copy() for out in outputs]

    def bind(self, feeds: Sequence[np.ndarray]):
        module, values = self.module, self._feed(feeds)
        return lambda: [out.read() for out in module.forward(values)]

    def delegates(self) -> list[str]:
        return [self.forward]

    def coverage(self) -> Coverage | None:
        if self.forward != "CPU" or any(s.is_dynamic for s in self.inputs):
            return None
        import MNN

        interpreter = MNN.Interpreter(str(self.path))
        session = interpreter.createSession({"backend": "CPU", "precision": "high", "numThread": 1})
        for spec in self.inputs:
            interpreter.resizeTensor(interpreter.getSessionInput(session, spec.name), tuple(spec.shape))
        interpreter.resizeSession(session)
        ran: Counter[str] = Counter()

        def before(tensors: Any, info: Any) -> bool:
            ran[info.getType()] += 1
            return True

        interpreter.runSessionWithCallBackInfo(session, before, lambda tensors, info: True)
        total = sum(ran.values())
        return Coverage(total_ops=total, delegated_ops=total, fallback_ops=0, partitions=1 if total else 0,
                        delegates=["CPU"], method="runtime")


class MNNBackend(TensorBackend):
    runtime_module = "MNN"
    distribution = "MNN"
    suffix = ".mnn"

    def __init__(self, name: str = "mnn") -> None:
        self.name = name
        self.forward = _FORWARD_TYPES[name]
        self.reference_sibling = None if name == "mnn" else "mnn"

    @classmethod
    def variant(cls, name: str) -> Backend | None:
        return cls(name) if name in _FORWARD_TYPES else None

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason or self.name == "mnn":
            return reason
        return forward_type_missing(self.forward)

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        import MNN.nn as nn

        path = Path(path)
        with open(path, "rb") as f:
            problem = unusable_artifact(f.read(1024), path)
        if problem:
            raise BackendError(f"{self.name}: {problem}")
        if self.forward != "CPU":
            missing = forward_type_missing(self.forward)
            if missing:
                raise BackendError(f"{self.name}: {missing}")
        config: _RuntimeConfig = {"backend": self.forward, "precision": "high"}
        if threads:
            config["numThread"] = threads
        runtime = nn.create_runtime_manager((config,))
        try:
            with native_stderr() as said:
                module = nn.load_module_from_file(str(path), [], [], runtime_manager=runtime)
        except Exception as exc:  # noqa: BLE001 - MNN raises bare Exceptions for bad files
            # Its binding's own message is "<built-in function ...> returned a result with an
            # exception set": not worth quoting; what MNN printed is.
            module, detail = None, "the loader refused it" if "built-in function" in str(exc) else str(exc)
        else:
            detail = "MNN returned no module"
        if module is None:
            told = "; ".join(said.lines())
            raise BackendError(f"{self.name}: MNN cannot load {path}: {detail} (not an .mnn flatbuffer, "
                               "truncated, or from a newer converter)" + (f"; MNN said: {told}" if told else ""))
        return MNNModel(module, module.get_info(), self.forward, path, InputShapes.of(shapes))


def backends() -> list[Backend]:
    """``mnn`` (the CPU); the GPU forward types are named, not registered."""
    return [MNNBackend()]
