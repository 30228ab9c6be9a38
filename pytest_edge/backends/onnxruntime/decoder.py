"""ONNX Runtime's decoder LLMs: the KV cache as graph inputs and outputs, as the field's exporters
write it (ONNX Runtime GenAI's model builder, Hugging Face Optimum, this project's own tiny decoder).
``input_ids`` and ``past_key_values.N.key/value`` in, ``logits`` and ``present.N.key/value`` out,
plus ``attention_mask`` and ``position_ids`` where the graph declares them (fed as a full mask and
the next positions). Inputs are fed by name; the cache lives in NumPy. A sliding-window layer of
the builder's (``GroupQueryAttention`` with ``sliding_window_cache``: Gemma-2/3, a Mistral or Phi-3
with a window) keeps its cache in a ring of fixed size (its past's sequence axis is named
``past_sliding_length``): it is fed zeros of the ring's size (``genai_config.json``'s
``window_size + cache_slack``) at the start, the kernel writing and evicting in place, as
ONNX Runtime GenAI's generator feeds it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError
from ..decoder import Decoder, not_a_decoder

# The KV-cache names of the field's ONNX decoder exports: ONNX Runtime GenAI's model builder and
# Hugging Face Optimum both write past_key_values.N.key/value in and present.N.key/value out.
_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)$")
_PRESENT = re.compile(r"present\.(\d+)\.(key|value)$")
_ORT_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _ring(shape: Sequence[Any]) -> bool:
    """A past input whose sequence axis the builder names for a sliding-window ring
    (``past_sliding_length``; a growing cache's is ``past_sequence_length``)."""
    return len(shape) == 4 and isinstance(shape[2], str) and "sliding" in shape[2]


def graph_disagreement(path: Path, config: Any) -> list[str]:
    """Where ``config`` (genai_config.json, config.json, a ``<stem>.json``) contradicts the graph it
    is run with: its layers (the past_key_values.N inputs), KV heads and head size (a past input's
    static axes: [batch, kv_heads, positions, head_size]) and vocabulary (the logits' last axis),
    each said with both figures; a figure the graph leaves symbolic is not compared. The KV-cache
    estimate and the prompt bounds are read from the configuration, the runtime follows the graph:
    they must be one network (a configuration of 1024 layers for a 2-layer graph made the record's
    estimate 512x), and its sliding window (the attention nodes' ``local_window_size``: a declared
    window of 2**24 over a graph attending 8 positions sized the ring cache by 2**24)."""
    from .graph_io import attention_windows, graph_io

    found = graph_io(Path(path))
    if found is None:
        return []
    inputs, outputs = found
    past = {n: dims for n, dims in inputs.items() if _PAST.match(n)}
    graph: dict[str, int] = {}
    if past:
        graph["n_layers"] = len({int(_PAST.match(n).group(1)) for n in past})
        dims = next(iter(past.values())) or ()
        if len(dims) == 4:
            for name, size in (("n_kv_heads", dims[1]), ("head_dim", dims[3])):
                if isinstance(size, int) and size > 0:
                    graph[name] = size
    logits = outputs.get("logits") or ()
    if logits and isinstance(logits[-1], int) and logits[-1] > 0:
        graph["vocab_size"] = logits[-1]
    windows = attention_windows(Path(path))
    # The builder gives every sliding layer one window. A configuration that declares none is not
    # compared here: its ring caches are refused below naming the layer and the missing key.
    if windows and len(windows) == 1 and getattr(config, "sliding_window", None):
        graph["sliding_window"] = next(iter(windows))
    return [f"{name} {getattr(config, name)} (configuration) but {size} (graph)" for name, size in graph.items()
            if getattr(config, name, None) != size]


def refuse_disagreement(path: Path, config: Any, backend: str) -> None:
    """BackendError naming the file, the configuration and each figure they disagree on (:func:`graph_disagreement`)."""
    differ = graph_disagreement(path, config)
    if differ:
        raise BackendError(f"{path} ({backend}): its configuration ({getattr(config, 'source', '') or 'given'}) does "
                           f"not describe this graph: {'; '.join(differ)}")


class OrtDecoder(Decoder):
    def __init__(self, path: Path, config: Any, threads: int, backend: str = "onnxruntime-cpu") -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes
            raise BackendError(f"{path} ({backend}): cannot load: {exc}") from None
        refuse_disagreement(path, config, backend)
        self.config, self.path, self.backend = config, path, backend
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
            raise not_a_decoder(path, backend, expected, f"inputs {list(inputs)} and outputs {outputs}")
        self.logits_index = outputs.index("logits")
        self.feeds_mask, self.feeds_positions = "attention_mask" in inputs, "position_ids" in inputs
        self.cache_dtype = _ORT_FLOATS.get(inputs[self.past_names[0]].type, np.float32)
        # The positions each past input starts with: 0 (the cache grows), or a ring's whole size.
        rings = {int(_PAST.match(n).group(1)) for n in self.past_names if _ring(inputs[n].shape)}
        unsized = sorted(rings - set(config.sliding_layers)) if config.sliding_cache else sorted(rings)
        if unsized:
            shape = next(inputs[n].shape for n in self.past_names if int(_PAST.match(n).group(1)) == unsized[0])
            raise not_a_decoder(
                path, backend, "the size of each sliding-window ring cache in the configuration (genai_config.json's "
                "model.decoder.sliding_window: window_size, layers, cache_slack, as the model builder writes it)",
                f"layer(s) {unsized} with a ring cache (past shape {shape}) that "
                f"{config.source or 'the configuration'} gives no size for")
        self.start = {n: config.sliding_cache if int(_PAST.match(n).group(1)) in rings else 0 for n in self.past_names}
        self.reset()

    def reset(self) -> None:
        c = self.config
        try:
            self.past = {n: np.zeros((1, c.n_kv_heads, size, c.head_dim), self.cache_dtype)
                         for n, size in self.start.items()}
        except MemoryError:  # a ring of the graph's own window (one of 2**24 positions: gigabytes)
            raise BackendError(f"{self.path} ({self.backend}): its KV cache of {max(self.start.values())} positions "
                               f"per layer (sliding window {c.sliding_window}, {c.source or 'the configuration'}) "
                               "does not fit in this process's memory") from None
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
