"""ExecuTorch's decoder LLMs as its LLM export writes them: ``forward(tokens [1, seq], input_pos
[seq]) -> logits``, the KV cache in the program's mutable buffers (static: ``max_context``
positions allocated at load). A new prompt restarts at position 0; the causal mask hides what the
last one left beyond it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError
from ..decoder import Decoder, not_a_decoder


class ExecuTorchDecoder(Decoder):
    def __init__(self, path: Path, config: Any, threads: int, backend: str = "executorch") -> None:
        from executorch.runtime import Runtime

        try:
            self._data = Path(path).read_bytes()  # the program points into these bytes: keep them alive
            self.program = Runtime.get().load_program(self._data)
            self.method = self.program.load_method("forward")
        except (RuntimeError, OSError) as exc:
            raise BackendError(f"{path} ({backend}): cannot load: {exc}") from None
        meta = self.method.metadata
        found = [(str(meta.input_tensor_meta(i).dtype()), len(meta.input_tensor_meta(i).sizes()))
                 for i in range(meta.num_inputs())]
        if len(found) != 2 or meta.num_outputs() != 1:
            raise not_a_decoder(path, backend, "forward(tokens [1, seq], input_pos [seq]) -> logits, the KV cache in "
                                "mutable buffers", f"{meta.num_inputs()} inputs (dtype, rank) {found} and "
                                f"{meta.num_outputs()} outputs")
        self.config = config
        self.position = 0

    def reset(self) -> None:
        self.position = 0

    def step(self, ids: Sequence[int]) -> np.ndarray:
        import torch

        positions = torch.arange(self.position, self.position + len(ids))
        out = self.method.execute([torch.tensor([list(ids)], dtype=torch.long), positions])
        self.position += len(ids)
        return out[0][0, -1].numpy().copy()
