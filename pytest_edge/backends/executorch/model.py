"""A .pte loaded in ExecuTorch's runtime (:class:`ExecuTorchModel`): what the backend loads and
triage quant runs."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import BackendError
from ..base import Coverage, Intermediates, LoadedModel, TensorSpec
from .dtypes import SCALAR_TYPES
from .runtime import explain_error, import_runtime_alone, load_failure_hint, load_program, pte_problem
from .runtime import register_quantized_kernels


def _specs(meta, count: int, getter: str, prefix: str) -> list[TensorSpec]:
    specs = []
    for i in range(count):
        info = getattr(meta, getter)(i)
        dtype = SCALAR_TYPES.get(int(info.dtype()), f"scalar_type_{int(info.dtype())}")
        # A .pte has no tensor names: positions are the names (input_0, output_0, ...).
        specs.append(TensorSpec(f"{prefix}_{i}", tuple(int(d) for d in info.sizes()), dtype))
    return specs


class ExecuTorchModel(LoadedModel):
    def __init__(self, data: bytes, path: Path | str = "<bytes>") -> None:
        import_runtime_alone()
        register_quantized_kernels()
        self._data = data
        problem = pte_problem(data, Path(path))
        if problem:
            raise BackendError(problem)
        try:
            self.program = load_program(data, path)
            methods = sorted(self.program.method_names)
            self.method = self.program.load_method("forward") if "forward" in methods else None
        except RuntimeError as exc:  # the bindings give only a hex code
            raise BackendError(f"ExecuTorch could not load {path}: {explain_error(str(exc))}"
                               f"{load_failure_hint(data, path)}") from exc
        if self.method is None:  # a speech program (encoder, text_decoder) is an edge_asr model
            speech = " (a Whisper program: test it with edge_asr, docs/speech.md)" if "text_decoder" in methods else ""
            raise BackendError(f"{path} has no 'forward' method; its methods: {', '.join(methods) or 'none'}{speech}")
        meta = self.method.metadata
        self.inputs = _specs(meta, meta.num_inputs(), "input_tensor_meta", "input")
        self.outputs = _specs(meta, meta.num_outputs(), "output_tensor_meta", "output")
        self._coverage: Coverage | None = None

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        import torch

        try:
            outputs = self.method.execute([torch.from_numpy(np.ascontiguousarray(x)) for x in feeds])
        except RuntimeError as exc:
            raise RuntimeError(explain_error(str(exc))) from exc
        return [o.numpy().copy() if hasattr(o, "numpy") else np.asarray(o) for o in outputs]

    def bind(self, feeds: Sequence[np.ndarray]):
        import torch

        method, tensors = self.method, [torch.from_numpy(np.ascontiguousarray(x)) for x in feeds]
        return lambda: method.execute(tensors)

    def coverage(self) -> Coverage | None:
        if self._coverage is None:
            from .coverage import pte_coverage

            self._coverage = pte_coverage(self._data)
        return self._coverage

    def delegates(self) -> list[str]:
        coverage = self.coverage()
        return coverage.delegates if coverage else []

    def intermediates(self, feeds: Sequence[np.ndarray]) -> Intermediates | None:
        """One run of this .pte with ETDump and a debug buffer: see etdump_intermediates."""
        from .etdump import etdump_intermediates  # only on a mismatch

        return etdump_intermediates(self._data, feeds)
