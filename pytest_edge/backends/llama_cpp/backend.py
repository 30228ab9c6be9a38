"""llama.cpp: a ``.gguf`` through llama-cpp-python, as apps run it. ``Llama(model_path, n_ctx)``
with the KV cache llama.cpp allocates for ``n_ctx`` positions; ``eval`` feeds tokens at the next
positions and the last position's logits are read from the context (llama.cpp computes logits for
the last token of a batch only, as an app's generation loop does). Decoders only."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError
from ..base import Backend
from ..decoder import Decoder, DecoderOnlyBackend


class LlamaCppDecoder(Decoder):
    def __init__(self, path: Path, config: Any, threads: int, backend: str) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        try:
            self.model = llama_cpp.Llama(model_path=str(path), n_ctx=config.max_context, n_threads=threads,
                                         n_threads_batch=threads, verbose=False)
        except Exception as exc:  # noqa: BLE001 - llama-cpp-python raises ValueError for any load failure
            raise BackendError(f"{path} ({backend}): cannot load: {exc}") from None
        if self.model.n_vocab() != config.vocab_size:
            raise BackendError(f"{path} ({backend}): llama.cpp reads a vocabulary of {self.model.n_vocab()} "
                               f"tokens; its metadata ({config.source}) says {config.vocab_size}")
        self.config = config

    def reset(self) -> None:
        self.model.reset()

    def reset_runtime_timings(self) -> None:
        self.llama_cpp.llama_perf_context_reset(self.model.ctx)

    def runtime_timings(self) -> dict:
        """llama.cpp's own counters (``llama_perf_context``, what ``llama_perf_context_print`` and
        llama-bench report): prompt evaluation (batches of more than one token) and evaluation (one
        token at a time), their milliseconds and token counts."""
        perf = self.llama_cpp.llama_perf_context(self.model.ctx)
        return {"source": "llama_perf_context", "prompt_eval_ms": perf.t_p_eval_ms, "prompt_tokens": perf.n_p_eval,
                "eval_ms": perf.t_eval_ms, "eval_tokens": perf.n_eval}

    def step(self, ids: Sequence[int]) -> np.ndarray:
        self.model.eval(list(ids))
        logits = self.llama_cpp.llama_get_logits_ith(self.model.ctx, -1)
        return np.ctypeslib.as_array(logits, shape=(self.config.vocab_size,)).astype(np.float32).copy()


class LlamaCppBackend(DecoderOnlyBackend):
    name = "llama.cpp"
    suffix = ".gguf"
    runtime_module = "llama_cpp"
    distribution = "llama-cpp-python"
    kind = "llama.cpp runs decoder LLMs"
    kv_cache = "llama.cpp's own (float16 K and V for n_ctx positions, allocated at load)"

    def decoder_config(self, artifact: Path) -> Any:
        from .gguf import from_gguf

        return from_gguf(artifact)

    def open_decoder(self, path: Path, config: Any, threads: int) -> Decoder:
        return LlamaCppDecoder(path, config, threads, self.name)


def backends() -> list[Backend]:
    return [LlamaCppBackend()]
