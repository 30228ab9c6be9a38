"""ExecuTorch through ``executorch.runtime``; coverage read from the ``.pte`` file itself."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .base import Backend, Coverage, LoadedModel, TensorSpec

# c10::ScalarType codes as MethodMeta reports them.
_SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                 6: "float32", 7: "float64", 11: "bool"}


def _specs(meta, count: int, getter: str, prefix: str) -> list[TensorSpec]:
    specs = []
    for i in range(count):
        info = getattr(meta, getter)(i)
        dtype = _SCALAR_TYPES.get(int(info.dtype()), f"scalar_type_{int(info.dtype())}")
        # A .pte has no tensor names: positions are the names (input_0, output_0, ...).
        specs.append(TensorSpec(f"{prefix}_{i}", tuple(int(d) for d in info.sizes()), dtype))
    return specs


class ExecuTorchModel(LoadedModel):
    def __init__(self, data: bytes) -> None:
        from executorch.runtime import Runtime

        self._data = data
        self.program = Runtime.get().load_program(data)
        self.method = self.program.load_method("forward")
        if self.method is None:
            raise ValueError("the program has no 'forward' method")
        meta = self.method.metadata
        self.inputs = _specs(meta, meta.num_inputs(), "input_tensor_meta", "input")
        self.outputs = _specs(meta, meta.num_outputs(), "output_tensor_meta", "output")
        self._coverage: Coverage | None = None

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        import torch

        outputs = self.method.execute([torch.from_numpy(np.ascontiguousarray(x)) for x in feeds])
        return [o.numpy().copy() if hasattr(o, "numpy") else np.asarray(o) for o in outputs]

    def bind(self, feeds: Sequence[np.ndarray]):
        import torch

        method, tensors = self.method, [torch.from_numpy(np.ascontiguousarray(x)) for x in feeds]
        return lambda: method.execute(tensors)

    def coverage(self) -> Coverage | None:
        if self._coverage is None:
            from .pte_coverage import pte_coverage

            self._coverage = pte_coverage(self._data)
        return self._coverage

    def delegates(self) -> list[str]:
        coverage = self.coverage()
        return coverage.delegates if coverage else []


class ExecuTorchBackend(Backend):
    name = "executorch"
    suffix = ".pte"
    runtime_module = "executorch.runtime"
    distribution = "executorch"

    def import_runtime(self) -> None:
        # Runtime.get() loads the kernel library and the .pte reader pulls in exir: both belong to
        # the runtime's baseline, not to the first model's memory.
        from executorch.exir._serialize._program import deserialize_pte_binary  # noqa: F401
        from executorch.runtime import Runtime

        from .pte_coverage import xnnpack_node_names

        Runtime.get()
        xnnpack_node_names()

    def load(self, path: Path, *, threads: int | None, shapes: dict[str, tuple[int, ...]]) -> LoadedModel:
        if threads:
            from executorch.extension.pybindings import portable_lib

            portable_lib._unsafe_reset_threadpool(threads)
        return ExecuTorchModel(Path(path).read_bytes())


def backends() -> list[Backend]:
    return [ExecuTorchBackend()]
