"""llama.cpp: a ``.gguf`` through llama-cpp-python, as apps run it. ``Llama(model_path, n_ctx)``
with the KV cache llama.cpp allocates for ``n_ctx`` positions; each step is llama.cpp's own loop
(``llama_decode`` of ``llama_batch_get_one``, as its ``simple`` example and llama-bench feed tokens:
the positions follow the cache's) and the last position's logits are read from the context
(llama.cpp computes logits for the last token of a batch only, as an app's generation loop does).
Not ``Llama.eval``: its Python bookkeeping per call (a ctypes loop filling the batch, the token
history) cost more than the whole decode step of a small decoder, time llama.cpp's own counters
do not see, so tokens/s could not be compared with them. Decoders only."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError
from ..base import Backend
from ..decoder import Decoder, DecoderRuntime, RuntimeCounters
from .gguf import split_shards


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
        self.path, self.backend = path, backend
        self._memory = llama_cpp.llama_get_memory(self.model.ctx)
        self._tokens = (llama_cpp.llama_token * config.max_context)()  # the batch's ids
        self._one = llama_cpp.llama_batch_get_one(self._tokens, 1)  # a decode step's batch, made once
        # a prompt's batch, made once over the same ids, its n_tokens set per call (feed says why)
        self._many = llama_cpp.llama_batch_get_one(self._tokens, 1)
        self._logits = np.empty(config.vocab_size, np.float32)
        self._address = self._logits.ctypes.data  # once: ndarray.ctypes costs ~10 us a call
        self._fed = 0
        self._n_batch = self.model.n_batch  # llama_decode takes at most this many tokens a call
        self._ctx, self._synchronize = self.model.ctx, llama_cpp.llama_synchronize
        self._llama_decode, self._context = llama_cpp.llama_decode, len(self._tokens)

    def reset(self) -> None:
        self.model.reset()
        self.llama_cpp.llama_memory_clear(self._memory, True)
        self._fed = 0

    def reset_runtime_timings(self) -> None:
        self.llama_cpp.llama_perf_context_reset(self.model.ctx)

    def runtime_timings(self) -> RuntimeCounters:
        """llama.cpp's own counters (``llama_perf_context``, what ``llama_perf_context_print`` and
        llama-bench report): prompt evaluation (batches of more than one token) and evaluation (one
        token at a time), their milliseconds and token counts."""
        perf = self.llama_cpp.llama_perf_context(self.model.ctx)
        return RuntimeCounters("llama_perf_context", prompt_eval_ms=perf.t_p_eval_ms, prompt_tokens=perf.n_p_eval,
                               eval_ms=perf.t_eval_ms, eval_tokens=perf.n_eval)

    def _decode(self, batch: Any, count: int) -> None:
        code = self._llama_decode(self._ctx, batch)
        if code != 0:
            raise BackendError(f"{self.path} ({self.backend}): llama_decode returned {code} at position {self._fed}")
        self._fed += count

    def step(self, ids: Sequence[int]) -> np.ndarray:
        self.feed(ids)
        return self.logits()

    def feed(self, ids: Sequence[int]) -> None:
        """llama_decode of the tokens, then llama_synchronize, as llama-bench's tg and pp do: where
        llama.cpp's own counters stop (its synchronize adds the time since the decode began). Each
        Python operation here is time llama.cpp's counters do not see, so both paths are short: one
        token (the decode step, ~40 us on this repo's decoders) sets the one id of a batch made once;
        a prompt is copied into the batch's ids by one ctypes slice assignment (~1.5 us for 64 ids,
        where a list of int() and a cast pointer per call cost ~7.7 us: docs/llm.md)."""
        n = len(ids)
        if n == 1 and self._fed < self._context:
            self._tokens[0] = ids[0]
            code = self._llama_decode(self._ctx, self._one)
            if code:
                raise BackendError(f"{self.path} ({self.backend}): llama_decode returned {code} at position {self._fed}")
            self._fed += 1
            self._synchronize(self._ctx)
            return
        if not 0 < n <= self._context - self._fed:
            raise BackendError(f"{self.path} ({self.backend}): {n} tokens after {self._fed} do not fit the "
                               f"context of {self._context} positions")
        try:
            self._tokens[:n] = ids  # ctypes takes Python's and NumPy's integers (by __index__)
        except TypeError as exc:
            raise BackendError(f"{self.path} ({self.backend}): token ids must be integers: {exc}") from None
        if n <= self._n_batch:
            self._many.n_tokens = n
            self._decode(self._many, n)
        else:  # a prompt longer than a batch, as Llama.eval splits it
            address = ctypes.addressof(self._tokens)
            for start in range(0, n, self._n_batch):
                count = min(self._n_batch, n - start)
                pointer = ctypes.cast(address + start * ctypes.sizeof(self.llama_cpp.llama_token),
                                      ctypes.POINTER(self.llama_cpp.llama_token))
                self._decode(self.llama_cpp.llama_batch_get_one(pointer, count), count)
        self._synchronize(self._ctx)

    def logits(self) -> np.ndarray:
        ctypes.memmove(self._address, self.llama_cpp.llama_get_logits_ith(self._ctx, -1), self._logits.nbytes)
        return self._logits.copy()


class LlamaCppDecoders(DecoderRuntime):
    kv_cache = "llama.cpp's own (float16 K and V for n_ctx positions, allocated at load)"

    def config_of(self, artifact: Path) -> Any:
        from .gguf import from_gguf

        return from_gguf(artifact)

    def open(self, path: Path, config: Any, threads: int) -> Decoder:
        return LlamaCppDecoder(path, config, threads, LlamaCppBackend.name)


class LlamaCppBackend(Backend):
    """llama.cpp runs decoder LLMs only (edge_llm tests): no tensor models, no delegate."""

    name = "llama.cpp"
    suffix = ".gguf"
    runtime_module = "llama_cpp"
    distribution = "llama-cpp-python"
    has_delegate = False
    decoders = LlamaCppDecoders()

    def external_locations(self, artifact: Path) -> tuple[str, ...]:
        """A split GGUF's other shards (llama.cpp's gguf-split and gguf-py name them
        ``<prefix>-%05d-of-%05d.gguf``; llama.cpp loads the model from the first and finds the rest
        by that name): part of the artifact. Naming another shard than the first is refused."""
        return split_shards(Path(artifact), self.name)


def backends() -> list[Backend]:
    return [LlamaCppBackend()]
