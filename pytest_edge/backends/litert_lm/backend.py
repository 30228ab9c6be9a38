"""LiteRT-LM (``litert-lm-api``): a ``.litertlm`` as Google's on-device LLM apps run it, through its
``Engine`` and ``Session``: ``run_prefill`` of the prompt's text, then ``run_decode_async``, one
streamed chunk per token. The engine's own loop does the sampling (greedy: the file's ``TOP_P``
sampler with ``k=1``) and the KV cache; its benchmark counters (``BenchmarkInfo``: time to first
token, prefill and decode tokens/s) are recorded beside ours as ``runtime_timings``.

The Session's API is text in, text out: it exposes no logits and takes no token ids. So the prompt's
ids are made text with the file's own tokenizer (``Engine.detokenize``) and must come back from
``Engine.tokenize`` unchanged, else the test's error says the tokenizer cannot carry them; the
generated text is tokenized back the same way. Without logits, the first-step logits and the
teacher-forced figures are not measured on this backend (an ``OwnLoopDecoder``; the record
says why). Decoders only."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ...errors import BackendError, EdgeUsageError
from ...files import sha256_file, user_cache
from ..base import Backend
from ..decoder import DecoderRuntime, Generation, OwnLoopDecoder, RuntimeCounters

BACKEND = "litert-lm"
WHY_NO_LOGITS = "LiteRT-LM's Session takes text and returns text: it exposes no logits"


def tflite_section(path: Path) -> bytes:
    """The prefill/decode ``.tflite`` a ``.litertlm`` packs (its ``TFLiteModel`` section of model type
    ``tf_lite_prefill_decode``), read with litert-lm-builder's header reader; an EdgeUsageError naming
    the file where it is not a LiteRT-LM file or holds no such section."""
    import io

    from litert_lm_builder import litertlm_peek
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    try:
        header = litertlm_peek.read_litertlm_header(str(path), io.StringIO())
        sections = header.SectionMetadata()
        found = [sections.Objects(i) for i in range(sections.ObjectsLength() if sections else 0)]
    except Exception as exc:  # noqa: BLE001 - a damaged header raises anything from the flatbuffer reader
        raise EdgeUsageError(f"{path} ({BACKEND}): not a readable .litertlm: {type(exc).__name__}: "
                             f"{ascii(str(exc))[1:-1][:200]}") from None
    for section in found:
        if section.DataType() == schema.AnySectionDataType.TFLiteModel \
                and litertlm_peek.get_model_type(section) in ("tf_lite_prefill_decode", None):
            begin, end, size = section.BeginOffset(), section.EndOffset(), path.stat().st_size
            # The header's offsets are the file's word, not ours: checked before anything is read
            # (an end of 2**62 would allocate that much, a negative span raise from read()).
            if not 0 <= begin < end <= size:
                raise EdgeUsageError(f"{path} ({BACKEND}): its .tflite section spans bytes {begin}-{end}, not inside "
                                     f"the {size}-byte file: a damaged or truncated .litertlm")
            with open(path, "rb") as stream:
                stream.seek(begin)
                data = stream.read(end - begin)
            if len(data) != end - begin or not data:
                raise EdgeUsageError(f"{path} ({BACKEND}): truncated: its .tflite section spans bytes "
                                     f"{section.BeginOffset()}-{section.EndOffset()} of a {path.stat().st_size}-byte file")
            return data
    raise EdgeUsageError(f"{path} ({BACKEND}): holds no prefill/decode .tflite section "
                         f"({len(found)} sections): not a LiteRT-LM decoder")


def from_litertlm(path: Path) -> Any:
    """The configuration of the packed ``.tflite``, read from its signatures as the ``litert`` backend
    reads a generative ``.tflite`` (litert/decoder.py), its source naming the ``.litertlm``."""
    from ..litert.decoder import from_tflite

    with tempfile.TemporaryDirectory() as work:
        tflite = Path(work) / "model.tflite"
        tflite.write_bytes(tflite_section(path))
        try:
            config = from_tflite(tflite)
        except EdgeUsageError as exc:
            from ..litert.decoder import BACKEND as LITERT

            raise EdgeUsageError(str(exc).replace(f"{tflite} ({LITERT})", f"{path} ({BACKEND}, its .tflite section)")
                                 .replace(str(tflite), f"{path} (its .tflite section)")) from None
    if config is None:
        return None
    return dataclasses.replace(config, source=f"{path} (its .tflite section's prefill/decode signatures)")


def xnnpack_cache_dir(path: Path, backend: str = BACKEND) -> Path:
    """The folder the engine keeps the XNNPACK weight cache of ``path`` in: pytest-edge's cache, one
    folder per model content, never beside the user's model (where the engine writes it by default,
    ``<name>_<mtime>_<size>.xnnpack_cache``: a name two exports of one size can share in one folder)."""
    folder = user_cache("litert-lm") / sha256_file(path)[:16]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendError(f"{path} ({backend}): cannot create the folder of its XNNPACK cache, {folder}: "
                           f"{exc.strerror or exc}; set XDG_CACHE_HOME to a writable folder") from None
    return folder


class LiteRtLmDecoder(OwnLoopDecoder):
    why_no_logits = WHY_NO_LOGITS

    def __init__(self, path: Path, config: Any, threads: int, backend: str = BACKEND) -> None:
        import litert_lm

        litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
        self.path, self.backend, self.config = path, backend, config
        cache = xnnpack_cache_dir(path, backend)
        try:
            self.engine = litert_lm.Engine(str(path), backend=litert_lm.Backend.CPU(thread_count=threads),
                                           max_num_tokens=config.max_context, enable_benchmark=True,
                                           cache_dir=str(cache))
        except Exception as exc:  # noqa: BLE001 - the engine raises RuntimeError for any load failure
            raise BackendError(f"{path} ({backend}): cannot load: {exc}") from None
        self.session: Any = None
        self._timings: list[Any] = []

    def reset(self) -> None:
        if self.session is not None:
            self.session.close()
        self.session = None

    def __del__(self) -> None:
        self.reset()  # the session before the engine, which warns of sessions still alive

    def _text(self, ids: Sequence[int]) -> str:
        """The prompt as text the file's tokenizer gives back as exactly ``ids``."""
        text = self.engine.detokenize([int(i) for i in ids])
        back = self.engine.tokenize(text)
        if back != [int(i) for i in ids]:
            raise BackendError(f"{self.path} ({self.backend}): its tokenizer does not carry token ids through text "
                               f"(ids {list(ids)[:8]} -> {text[:40]!r} -> {back[:8]}): LiteRT-LM's Session takes "
                               f"text only, so these prompts cannot be given to it")
        return text

    def generate_own(self, prompt: Sequence[int], new_tokens: int,
                     clock: Callable[[], float] = time.perf_counter) -> Generation:
        """The engine's own greedy loop: prefill, then decoding with a stream callback, as an app
        streams tokens; TTFT is prefill in to the first token's callback, each later callback a TPOT
        sample. The time is read inside the callback, on the engine's thread: ``run_decode_async``'s
        Python iterator hands chunks over a queue, whose arrival times clump (2 us apart where the
        engine counts ~50 us a token)."""
        import threading

        from litert_lm._ffi import STREAM_CALLBACK_TYPE

        self.reset()
        text = self._text(prompt)
        self.session = self.engine.create_session(apply_prompt_template=False, max_output_tokens=new_tokens)
        lib, stamps, chunks, errors, done = self.session._lib, [], [], [], threading.Event()

        def on_chunk(_data: Any, chunk: Any) -> None:
            now = clock()
            error = lib.litert_lm_stream_chunk_get_error(chunk)
            if error:
                message = error.decode("utf-8", "replace")
                if "Max number of tokens reached" not in message and "CANCELLED" not in message:
                    errors.append(message)
                done.set()
                return
            piece = lib.litert_lm_stream_chunk_get_text(chunk)
            if piece:
                stamps.append(now)
                chunks.append(piece.decode("utf-8"))
            if lib.litert_lm_stream_chunk_is_final(chunk):
                done.set()

        callback = STREAM_CALLBACK_TYPE(on_chunk)  # kept alive until the engine is done with it
        start = clock()
        self.session.run_prefill([text])
        if lib.litert_lm_session_run_decode_async(self.session._ptr, callback, None) != 0:
            raise BackendError(f"{self.path} ({self.backend}): litert_lm_session_run_decode_async failed")
        if not done.wait(60.0):
            raise BackendError(f"{self.path} ({self.backend}): no final token within 60 s")
        if errors:
            raise BackendError(f"{self.path} ({self.backend}): decoding failed: {errors[0][:300]}")
        tokens = self.engine.tokenize("".join(chunks))
        if len(tokens) != new_tokens or len(stamps) != new_tokens:
            raise BackendError(f"{self.path} ({self.backend}): asked for {new_tokens} tokens, the session gave "
                               f"{len(stamps)} chunks making {len(tokens)} tokens ({''.join(chunks)[:60]!r})")
        self._timings.append(self.session.get_benchmark_info())
        steps = [b - a for a, b in zip(stamps, stamps[1:])]
        return Generation(list(prompt), tokens, None, stamps[0] - start, steps)

    def reset_runtime_timings(self) -> None:
        self._timings = []

    def runtime_timings(self) -> RuntimeCounters | None:
        """LiteRT-LM's own ``BenchmarkInfo`` of the generations since the last reset, in the keys
        llama.cpp's counters are recorded in (milliseconds and tokens of prefill and of decode), with
        its own time to first token."""
        if not self._timings:
            return None
        prompt_tokens = sum(t.last_prefill_token_count for t in self._timings)
        eval_tokens = sum(t.last_decode_token_count for t in self._timings)
        return RuntimeCounters("litert_lm BenchmarkInfo",
                               prompt_eval_ms=sum(t.last_prefill_token_count / t.last_prefill_tokens_per_second * 1000
                                                  for t in self._timings if t.last_prefill_tokens_per_second),
                               prompt_tokens=prompt_tokens,
                               eval_ms=sum(t.last_decode_token_count / t.last_decode_tokens_per_second * 1000
                                           for t in self._timings if t.last_decode_tokens_per_second),
                               eval_tokens=eval_tokens,
                               ttft_ms=sum(t.time_to_first_token_in_second * 1000 for t in self._timings))


class LiteRtLmDecoders(DecoderRuntime):
    kv_cache = ("LiteRT-LM's own (the packed .tflite's external cache of kv_cache_max_len positions, "
                "allocated at load)")
    why_no_logits = WHY_NO_LOGITS

    def config_of(self, artifact: Path) -> Any:
        return from_litertlm(artifact)

    def open(self, path: Path, config: Any, threads: int) -> OwnLoopDecoder:
        return LiteRtLmDecoder(path, config, threads, BACKEND)


class LiteRtLmBackend(Backend):
    """LiteRT-LM runs decoder LLMs only (edge_llm tests): no tensor models, no delegate."""

    name = BACKEND
    suffix = ".litertlm"
    runtime_module = "litert_lm"
    distribution = "litert-lm-api"
    has_delegate = False
    device_why_not = "the emulated device installs no litert-lm-api"
    decoders = LiteRtLmDecoders()

    def unavailable_reason(self) -> str | None:
        missing = super().unavailable_reason()
        if missing is None:
            import importlib.util

            if importlib.util.find_spec("litert_lm_builder") is None:
                return "litert-lm-builder not installed (it reads a .litertlm's sections)"
        return missing


def backends() -> list[Backend]:
    return [LiteRtLmBackend()]
