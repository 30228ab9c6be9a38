"""ExecuTorch's decoder LLMs as its LLM export writes them: ``forward(tokens [1, seq], input_pos)
-> logits``, the KV cache in the program's mutable buffers (static: ``max_context`` positions
allocated at load). Two position conventions: export_llama's, ``input_pos`` of shape ``[1]`` holding
the first position of the tokens (what ExecuTorch's runners pass: ``torch.tensor([pos])``), and one
position per token (``input_pos [seq]``, this project's hand-built ``tiny_llm.pte``). The logits
are of the last token (export_llama's ``[1, vocab]``) or of every token (``[1, seq, vocab]``). A new
prompt restarts at position 0; the causal mask hides what the last one left beyond it."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError
from ..decoder import Decoder, not_a_decoder
from .llm_metadata import DECODER_SIGNATURE


@lru_cache(maxsize=1)
def load_llm_custom_ops() -> None:
    """Register ExecuTorch's LLM kernels (``llama::custom_sdpa``, ``llama::update_cache`` ...),
    which ``--use_sdpa_with_kv_cache`` exports call, from the library the executorch package ships,
    as an app links them. Not through ``extension.llm.custom_ops.custom_ops``: that module also
    imports torch's inductor for export-time lowerings the runtime does not need."""
    import executorch
    import torch

    libraries = [lib for folder in executorch.__path__
                 for lib in (Path(folder) / "extension" / "llm" / "custom_ops").glob("*custom_ops_aot_lib.*")]
    if libraries:
        torch.ops.load_library(str(libraries[0]))


class ExecuTorchDecoder(Decoder):
    def __init__(self, path: Path, config: Any, threads: int, backend: str = "executorch") -> None:
        from executorch.runtime import Runtime  # noqa: F401 - as it was imported before the program loads

        from .runtime import explain_error, load_failure_hint, load_program, pte_problem, register_quantized_kernels
        from .program import UNREADABLE, read_plans

        try:
            self._data = Path(path).read_bytes()  # the program points into these bytes: keep them alive
        except OSError as exc:
            raise BackendError(f"{path} ({backend}): cannot load: {exc}") from None
        problem = pte_problem(self._data, Path(path))  # bad identifier bytes abort the runtime itself
        if problem:
            raise BackendError(f"{problem} ({backend})")
        try:
            operators = next((p.operators for p in read_plans(self._data) if p.name == "forward"), [])
        except UNREADABLE:
            operators = []  # the runtime says what is wrong with it below
        if any(op.startswith("llama::") for op in operators):
            load_llm_custom_ops()
        register_quantized_kernels()
        try:
            self.program = load_program(self._data, path)
            self.method = self.program.load_method("forward")
        except (RuntimeError, OSError) as exc:
            raise BackendError(f"{path} ({backend}): cannot load: {explain_error(str(exc))}"
                               f"{load_failure_hint(self._data, path)}") from None
        meta = self.method.metadata
        inputs = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
        found = [(str(t.dtype()), list(t.sizes())) for t in inputs]
        if len(inputs) != 2 or meta.num_outputs() != 1 or [len(t.sizes()) for t in inputs] != [2, 1]:
            raise not_a_decoder(path, backend, DECODER_SIGNATURE,
                                f"{meta.num_inputs()} inputs (dtype, sizes) {found} and {meta.num_outputs()} outputs")
        tokens, positions = (list(t.sizes()) for t in inputs)
        # The most tokens one call takes (the upper bound of a dynamic dimension): a longer prompt
        # is fed in chunks, as ExecuTorch's text prefiller does; 1 (a static-shape export): token by token.
        self.chunk = max(1, tokens[1])
        self.start_position_only = positions == [1]
        self.config = config
        self.position = 0

    def reset(self) -> None:
        self.position = 0

    def step(self, ids: Sequence[int]) -> np.ndarray:
        import torch

        ids = list(ids)
        logits = None
        for start in range(0, len(ids), self.chunk):
            chunk = ids[start:start + self.chunk]
            positions = (torch.tensor([self.position], dtype=torch.long) if self.start_position_only
                         else torch.arange(self.position, self.position + len(chunk)))
            out = self.method.execute([torch.tensor([chunk], dtype=torch.long), positions])[0]
            self.position += len(chunk)
            logits = out[0, -1] if out.dim() == 3 else out[-1]
        assert logits is not None, "step() needs at least one token"
        return logits.float().numpy().copy()
