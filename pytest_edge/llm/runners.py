"""Greedy generation on each runtime in its own LLM export convention.

A runner holds one loaded decoder and its cache; ``step(ids)`` feeds tokens at the next positions
and returns the logits of the last one. Runtimes are imported inside the runners, so the measuring
subprocess pays only for the one it runs.

* ``onnxruntime-cpu``: ``input_ids`` plus ``past_key_values.{i}.key/value`` in, ``logits`` plus
  ``present.{i}.key/value`` out (ONNX Runtime's generative layout); the cache lives in NumPy.
* ``executorch``: ``forward(tokens [1, seq], input_pos [seq])`` with the cache as the program's
  mutable buffers (executorch's LLM export); a new prompt restarts at position 0 and the causal
  mask hides what the last one left beyond it.
* ``onnxruntime-genai``: ONNX Runtime GenAI's own generator over a model builder folder.
* ``llama.cpp``: a ``.gguf`` through llama-cpp-python, llama.cpp's own KV cache.
* ``litert`` is named with the reason it cannot run here.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import BackendError, EdgeUsageError
from .config import LlmConfig


class Runner(Protocol):
    backend: str

    def reset(self) -> None: ...

    def step(self, ids: Sequence[int]) -> np.ndarray: ...


def _signature_error(path: Path, backend: str, expected: str, found: str) -> BackendError:
    return BackendError(f"{path} ({backend}): not a decoder in this runtime's LLM convention: expected "
                        f"{expected}; found {found}")


# The KV-cache names of the field's ONNX decoder exports: ONNX Runtime GenAI's model builder and
# Hugging Face Optimum both write past_key_values.N.key/value in and present.N.key/value out.
_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)$")
_PRESENT = re.compile(r"present\.(\d+)\.(key|value)$")
_ORT_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class OrtRunner:
    """An ONNX decoder with its KV cache as inputs and outputs, as the field's exporters write it
    (ONNX Runtime GenAI's model builder, Hugging Face Optimum, this project's own tiny decoder):
    ``input_ids`` and ``past_key_values.N.key/value`` in, ``logits`` and ``present.N.key/value`` out,
    plus ``attention_mask`` and ``position_ids`` where the graph declares them (fed as a full mask
    and the next positions). Inputs are fed by name in the order the graph declares them."""

    backend = "onnxruntime-cpu"

    def __init__(self, path: Path, config: LlmConfig, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes
            raise BackendError(f"{path} ({self.backend}): cannot load: {exc}") from None
        self.config = config
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.past_names = [n for n in inputs if _PAST.match(n)]
        present = {_PRESENT.match(n).groups(): i for i, n in enumerate(outputs) if _PRESENT.match(n)}
        layers = sorted({int(_PAST.match(n).group(1)) for n in self.past_names})
        # Each past input's present output, by layer and key/value (the builder lists keys, then values).
        self.present_index = [present.get(_PAST.match(n).groups()) for n in self.past_names]
        extra = sorted(set(inputs) - {"input_ids", "attention_mask", "position_ids", *self.past_names})
        if ("input_ids" not in inputs or "logits" not in outputs or not self.past_names or extra
                or None in self.present_index or layers != list(range(config.n_layers))):
            expected = ("inputs input_ids, [attention_mask], [position_ids], past_key_values.N.key/value for "
                        f"N in 0..{config.n_layers - 1} (n_layers from {config.source or 'the configuration'}); "
                        "outputs logits, present.N.key/value")
            raise _signature_error(path, self.backend, expected, f"inputs {list(inputs)} and outputs {outputs}")
        self.logits_index = outputs.index("logits")
        self.feeds_mask, self.feeds_positions = "attention_mask" in inputs, "position_ids" in inputs
        self.cache_dtype = _ORT_FLOATS.get(inputs[self.past_names[0]].type, np.float32)
        self.reset()

    def reset(self) -> None:
        c = self.config
        empty = np.zeros((1, c.n_kv_heads, 0, c.head_dim), self.cache_dtype)
        self.past = dict.fromkeys(self.past_names, empty)
        self.position = 0

    def step(self, ids: Sequence[int]) -> np.ndarray:
        feeds: dict[str, np.ndarray] = {"input_ids": np.asarray([ids], np.int64), **self.past}
        total = self.position + len(ids)
        if self.feeds_mask:
            feeds["attention_mask"] = np.ones((1, total), np.int64)
        if self.feeds_positions:
            feeds["position_ids"] = np.arange(self.position, total, dtype=np.int64)[None]
        out = self.session.run(None, feeds)
        self.past = {name: out[i] for name, i in zip(self.past_names, self.present_index)}
        self.position = total
        return np.asarray(out[self.logits_index][0, -1], np.float32)


class ExecuTorchRunner:
    backend = "executorch"

    def __init__(self, path: Path, config: LlmConfig, threads: int = 1) -> None:
        from executorch.runtime import Runtime

        try:
            self._data = Path(path).read_bytes()  # the program points into these bytes: keep them alive
            self.program = Runtime.get().load_program(self._data)
            self.method = self.program.load_method("forward")
        except (RuntimeError, OSError) as exc:
            raise BackendError(f"{path} ({self.backend}): cannot load: {exc}") from None
        meta = self.method.metadata
        found = [(str(meta.input_tensor_meta(i).dtype()), len(meta.input_tensor_meta(i).sizes()))
                 for i in range(meta.num_inputs())]
        if len(found) != 2 or meta.num_outputs() != 1:
            raise _signature_error(path, self.backend,
                                   "forward(tokens [1, seq], input_pos [seq]) -> logits, the KV cache in "
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


def _not_a_builder_folder(artifact: Path) -> str | None:
    from .config import GENAI_CONFIG, genai_decoder

    if genai_decoder(Path(artifact).parent) == Path(artifact):
        return None
    return (f"onnxruntime-genai runs a model builder folder: no {GENAI_CONFIG} beside {Path(artifact).name} "
            "naming it")


class GenAIRunner:
    """ONNX Runtime GenAI's own generator over a model builder folder (how apps run these exports):
    ``og.Model`` reads ``genai_config.json`` beside the decoder, ``Generator.append_tokens`` runs the
    prompt (or the next token) and ``get_logits`` gives the last position's logits. Greedy, no
    sampling; the KV cache is the generator's own."""

    backend = "onnxruntime-genai"

    def __init__(self, path: Path, config: LlmConfig, threads: int = 1) -> None:
        import json

        import onnxruntime_genai as og

        folder = Path(path).parent
        if not (folder / "genai_config.json").is_file():
            raise BackendError(f"{path} ({self.backend}): no genai_config.json beside it: onnxruntime-genai runs "
                               "a model builder folder")
        try:
            og_config = og.Config(str(folder))
            og_config.overlay(json.dumps({"model": {"decoder": {"session_options": {
                "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
            self.og, self.model = og, og.Model(og_config)
        except Exception as exc:  # noqa: BLE001 - onnxruntime-genai raises its own classes
            raise BackendError(f"{path} ({self.backend}): cannot load: {exc}") from None
        self.config = config
        self.reset()

    def reset(self) -> None:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.config.max_context, do_sample=False)
        self.generator = self.og.Generator(self.model, params)

    def step(self, ids: Sequence[int]) -> np.ndarray:
        self.generator.append_tokens(list(ids))
        return np.asarray(self.generator.get_logits(), np.float32).reshape(-1, self.config.vocab_size)[-1].copy()


class LlamaCppRunner:
    """A ``.gguf`` on llama.cpp through llama-cpp-python, as apps run it: ``Llama(model_path, n_ctx)``
    with the KV cache llama.cpp allocates for ``n_ctx`` positions; ``eval`` feeds tokens at the next
    positions, and the last position's logits are read from the context (llama.cpp computes logits
    for the last token of a batch only, as an app's generation loop does)."""

    backend = "llama.cpp"

    def __init__(self, path: Path, config: LlmConfig, threads: int = 1) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        try:
            self.model = llama_cpp.Llama(model_path=str(path), n_ctx=config.max_context, n_threads=threads,
                                         n_threads_batch=threads, verbose=False)
        except Exception as exc:  # noqa: BLE001 - llama-cpp-python raises ValueError for any load failure
            raise BackendError(f"{path} ({self.backend}): cannot load: {exc}") from None
        if self.model.n_vocab() != config.vocab_size:
            raise BackendError(f"{path} ({self.backend}): llama.cpp reads a vocabulary of {self.model.n_vocab()} "
                               f"tokens; its metadata ({config.source}) says {config.vocab_size}")
        self.config = config

    def reset(self) -> None:
        self.model.reset()

    def step(self, ids: Sequence[int]) -> np.ndarray:
        self.model.eval(list(ids))
        logits = self.llama_cpp.llama_get_logits_ith(self.model.ctx, -1)
        return np.ctypeslib.as_array(logits, shape=(self.config.vocab_size,)).astype(np.float32).copy()


@dataclass(frozen=True)
class LlmBackend:
    name: str
    suffix: str
    runner: Callable[[Path, LlmConfig, int], Runner] | None
    module: str | None  # the runtime's import name; None where there is no runner
    why_not: str | None = None  # why it cannot run here, whatever is installed
    # Why this runtime cannot take a given artifact of its suffix (None: it can).
    refuses: Callable[[Path], str | None] | None = None

    def unavailable_reason(self) -> str | None:
        if self.why_not:
            return self.why_not
        import importlib.util

        if importlib.util.find_spec(self.module) is None:
            return f"{self.module} is not installed"
        return None


LLM_BACKENDS: dict[str, LlmBackend] = {b.name: b for b in (
    LlmBackend("onnxruntime-cpu", ".onnx", OrtRunner, "onnxruntime"),
    LlmBackend("executorch", ".pte", ExecuTorchRunner, "executorch"),
    LlmBackend("onnxruntime-genai", ".onnx", GenAIRunner, "onnxruntime_genai", refuses=_not_a_builder_folder),
    LlmBackend("litert", ".tflite", None, None,
               "LiteRT decoders need prefill/decode signatures from litert-torch's generative converter, "
               "which is not installed here: no runner yet"),
    LlmBackend("llama.cpp", ".gguf", LlamaCppRunner, "llama_cpp"),
)}


def open_runner(backend: str, path: Path, config: LlmConfig, threads: int = 1) -> Runner:
    spec = LLM_BACKENDS.get(backend)
    if spec is None:
        raise EdgeUsageError(f"unknown LLM backend {backend!r}; known: {', '.join(LLM_BACKENDS)}")
    reason = spec.unavailable_reason()
    if reason or spec.runner is None:
        raise BackendError(f"{path} ({backend}): {reason}")
    return spec.runner(path, config, threads)


def check_prompt(prompt: Sequence[int], new_tokens: int, config: LlmConfig, where: str) -> list[int]:
    """The prompt as ints, refused before any runtime sees it: empty, an id out of the vocabulary,
    or longer (with the new tokens) than the model's context."""
    ids = [int(t) for t in prompt]
    if not ids:
        raise EdgeUsageError(f"{where}: an empty prompt (at least one token id is needed)")
    bad = [t for t in ids if not 0 <= t < config.vocab_size]
    if bad:
        raise EdgeUsageError(f"{where}: token id {bad[0]} is outside the vocabulary [0, {config.vocab_size})")
    if len(ids) + new_tokens > config.max_context:
        raise EdgeUsageError(f"{where}: the prompt's {len(ids)} tokens + {new_tokens} new tokens = "
                             f"{len(ids) + new_tokens} exceed the model's maximum context of {config.max_context}")
    return ids


@dataclass
class Generation:
    prompt: list[int]
    tokens: list[int]  # the new tokens, greedy
    first_logits: np.ndarray  # the logits the first new token was chosen from
    prefill_s: float  # prompt in, first token out (TTFT)
    step_s: list[float] = field(default_factory=list)  # each later token (TPOT samples)


def generate(runner: Runner, prompt: Sequence[int], new_tokens: int,
             clock: Callable[[], float] = time.perf_counter) -> Generation:
    """Greedy decoding of ``new_tokens`` after ``prompt`` (the first from the prefill)."""
    runner.reset()
    start = clock()
    logits = runner.step(list(prompt))
    token = int(np.argmax(logits))
    prefill_s = clock() - start
    result = Generation(list(prompt), [token], np.asarray(logits, np.float32).copy(), prefill_s)
    for _ in range(new_tokens - 1):
        start = clock()
        token = int(np.argmax(runner.step([token])))
        result.step_s.append(clock() - start)
        result.tokens.append(token)
    return result
