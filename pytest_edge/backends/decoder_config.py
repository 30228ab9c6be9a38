"""A decoder's configuration, read from what the field's exporters write beside the artifact: ONNX
Runtime GenAI's ``genai_config.json`` (model builder), the Hugging Face ``config.json`` of an Optimum
export folder, and only where the artifact carries none, a hand-written ``<stem>.json`` in this
project's own keys. It is what the bounds checks and the KV-cache estimate read."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

from ..errors import EdgeUsageError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}
# Bounds far above any decoder shipped to a device (Llama 3 405B: 126 layers, 128 heads, vocabulary
# 128256, 131072 tokens): a count past them is a broken or hostile file, refused before anything is
# built per layer (10**6 layers would make a 107 MB message and gigabytes of input names).
LIMITS = {"vocab_size": 2**22, "n_layers": 1024, "n_heads": 4096, "n_kv_heads": 4096, "head_dim": 2**16,
          "max_context": 2**24}


@dataclass(frozen=True)
class LlmConfig:
    vocab_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_context: int
    dtype: str = "float32"  # of the KV cache
    source: str = ""  # the file it was read from, said in records and messages
    # Sliding-window attention as the export's configuration says it (genai_config.json's
    # model.decoder.sliding_window): the window, the layers that attend only it, and the positions
    # their cache holds (the builder's ring: window_size + cache_slack), allocated whole. 0 / ():
    # every layer attends the whole context and its cache grows with it.
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    sliding_cache: int = 0

    def __post_init__(self) -> None:
        # asdict() -> JSON -> LlmConfig(**...) (the worker's Load) gives a list back.
        object.__setattr__(self, "sliding_layers", tuple(self.sliding_layers))

    @classmethod
    def load(cls, path: Path) -> "LlmConfig":
        """Read ``path``; a missing file or key is an EdgeUsageError naming the file."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise EdgeUsageError(f"{path}: no LLM configuration (a JSON file beside the model with "
                                 f"{', '.join(f.name for f in fields(cls))})") from None
        except (OSError, ValueError) as exc:
            raise EdgeUsageError(f"{path}: unreadable LLM configuration: {exc}") from None
        except RecursionError:
            raise EdgeUsageError(f"{path}: unreadable LLM configuration: {NESTED}") from None
        if not isinstance(data, dict):
            raise EdgeUsageError(f"{path}: an LLM configuration must be a JSON object")
        known = {f.name for f in fields(cls)} - {"source"}
        missing = sorted(known - _OPTIONAL - set(data))
        if missing:
            raise EdgeUsageError(f"{path}: LLM configuration lacks {', '.join(missing)}")
        dtype = data.get("dtype", "float32")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise EdgeUsageError(f"{path}: dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        counts = _ints(path, "the configuration", data, {k: k for k in LIMITS})
        window = {}
        if "sliding_window" in data:  # the project's keys for a window no export configuration gives
            size = data["sliding_window"]
            cache = data.get("sliding_cache", size)
            slack = cache - size if all(isinstance(v, int) and not isinstance(v, bool) for v in (size, cache)) else cache
            window = _genai_window(path, {"sliding_window": {
                "window_size": size, "layers": data.get("sliding_layers", list(range(counts["n_layers"]))),
                "cache_slack": slack}}, counts["n_layers"],
                where="sliding_window (window_size), sliding_layers (layers), sliding_cache (window_size + cache_slack)")
        return _checked(cls(**counts, dtype=dtype, **window, source=str(path)), path)

    def for_context(self, tokens: int) -> "LlmConfig":
        """This configuration as a runtime is loaded with for a run of ``tokens`` positions (the
        prompt and the new tokens; a sweep's length): the cache it sizes (llama.cpp's ``n_ctx``,
        GenAI's ``max_length``) is what the run needs, never the declared maximum, which a file may
        put at 2**24 (gigabytes of cache for a 4-token test). At most ``max_context``. A sliding
        window's ring holds the window (the attention kernel refuses less: ONNX Runtime's
        GroupQueryAttention needs a capacity of at least its ``local_window_size``, which the graph
        check holds the configuration to) and of its slack only what the run reaches: a
        ``cache_slack`` of 2**24 is not allocated for a short test."""
        tokens = max(1, int(tokens))
        ring = max(self.sliding_window, min(self.sliding_cache, tokens)) if self.sliding_cache else 0
        return replace(self, max_context=min(tokens, self.max_context), sliding_cache=ring)

    def kv_cache_bytes(self, tokens: int, batch: int = 1) -> int:
        """M_KV = 2 (K and V) x batch x kv_heads x head_dim x bytes x the positions each layer holds:
        ``tokens`` for a layer attending the whole context (2 x layers x batch x tokens x ... where no
        layer has a sliding window), the ring's ``sliding_cache`` positions for a sliding-window one."""
        windowed = len(self.sliding_layers) if self.sliding_cache else 0
        positions = (self.n_layers - windowed) * tokens + windowed * self.sliding_cache
        return 2 * batch * positions * self.n_kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]


# Keys a hand-written configuration may leave out.
_OPTIONAL = {"dtype", "sliding_window", "sliding_layers", "sliding_cache"}


def config_path(artifact: Path) -> Path:
    """The hand-written configuration of an artifact that carries none: ``<stem>.json`` beside it."""
    return Path(artifact).with_suffix(".json")


GENAI_CONFIG = "genai_config.json"
# json.loads recurses per level: a file of 100 000 '[' is a RecursionError, said as what it is.
NESTED = "nested deeper than the JSON reader's recursion limit (a broken or hostile file)"
HF_CONFIG = "config.json"
_TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EdgeUsageError(f"{path}: unreadable decoder configuration: {exc}") from None
    except RecursionError:
        raise EdgeUsageError(f"{path}: unreadable decoder configuration: {NESTED}") from None
    if not isinstance(data, dict):
        raise EdgeUsageError(f"{path}: a decoder configuration must be a JSON object")
    return data


def _ints(path: Path, where: str, values: dict, keys: dict[str, str]) -> dict[str, int]:
    """``keys`` (ours -> theirs) read as positive integers from ``values``; missing ones named."""
    missing = [theirs for theirs in keys.values() if isinstance(values.get(theirs), bool)
               or not isinstance(values.get(theirs), int) or values[theirs] <= 0]
    if missing:
        given = ", ".join(f"{theirs}={repr(values.get(theirs))[:40]}" for theirs in missing if theirs in values)
        raise EdgeUsageError(f"{path}: {where} needs {', '.join(missing)} (positive integers), which the KV-cache "
                             "estimate and the prompt bounds need" + (f"; it has {given}" if given else ""))
    return {ours: int(values[theirs]) for ours, theirs in keys.items()}


def from_genai_config(path: Path) -> LlmConfig:
    """ONNX Runtime GenAI's ``genai_config.json`` (its model builder writes it beside ``model.onnx``):
    ``model.vocab_size``, ``model.context_length`` and ``model.decoder``'s layer and head counts."""
    data = _json(path)
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
    top = _ints(path, "model", model, {"vocab_size": "vocab_size", "max_context": "context_length"})
    heads = _ints(path, "model.decoder", decoder, {"n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                                                   "n_kv_heads": "num_key_value_heads", "head_dim": "head_size"})
    return _checked(LlmConfig(**top, **heads, **_genai_window(path, decoder, heads["n_layers"]), source=str(path)),
                    path)


def _genai_window(path: Path, decoder: dict, n_layers: int, where: str = "model.decoder.sliding_window") -> dict:
    """``model.decoder.sliding_window`` of a builder export (Gemma-2/3, Mistral, Phi-3 with a window,
    ...): ``window_size``, ``layers`` (the ones whose cache is a ring of ``window_size +
    cache_slack`` positions) and ``cache_slack``; none: {}."""
    window = decoder.get("sliding_window")
    if window is None:
        return {}
    if not isinstance(window, dict):
        raise EdgeUsageError(f"{path}: {where} must be an object (window_size, layers, cache_slack)")
    size = _ints(path, where, window, {"window_size": "window_size"})["window_size"]
    layers, slack = window.get("layers", list(range(n_layers))), window.get("cache_slack", 0)
    if (not isinstance(layers, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers
                                            for i in layers)):
        raise EdgeUsageError(f"{path}: {where}.layers must list layer indices in 0..{n_layers - 1}, "
                             f"not {repr(layers)[:80]}")
    if isinstance(slack, bool) or not isinstance(slack, int) or slack < 0:
        raise EdgeUsageError(f"{path}: {where}.cache_slack must be a non-negative integer, not {slack!r}")
    if size > LIMITS["max_context"] or slack > LIMITS["max_context"]:
        raise EdgeUsageError(f"{path}: {where} says a window of {size:,} (+{slack:,}): a broken file?")
    return {"sliding_window": size, "sliding_layers": tuple(sorted(set(layers))), "sliding_cache": size + slack}


def from_hf_config(path: Path) -> LlmConfig:
    """A Hugging Face ``config.json`` (an Optimum ONNX export folder has one beside ``model.onnx``):
    ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (default: the attention
    heads), ``head_dim`` (default: ``hidden_size / num_attention_heads``), ``max_position_embeddings``,
    ``vocab_size``; the cache's dtype from ``torch_dtype``/``dtype``."""
    data = _json(path)
    values = dict(data)
    values.setdefault("num_key_value_heads", data.get("num_attention_heads"))
    if not isinstance(values.get("head_dim"), int):
        hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            values["head_dim"] = hidden // heads
    read = _ints(path, "the configuration", values, {
        "vocab_size": "vocab_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
        "n_kv_heads": "num_key_value_heads", "head_dim": "head_dim", "max_context": "max_position_embeddings"})
    dtype = _TORCH_DTYPES.get(str(data.get("torch_dtype") or data.get("dtype") or "float32"), "float32")
    return _checked(LlmConfig(**read, dtype=dtype, source=str(path)), path)


def _checked(config: LlmConfig, path: Path) -> LlmConfig:
    """Every source's configuration within :data:`LIMITS`, its heads grouped evenly."""
    empty = [f"{name} {getattr(config, name)}" for name in LIMITS if getattr(config, name) < 1]
    if empty:
        raise EdgeUsageError(f"{path}: the decoder configuration says {', '.join(empty)}: each must be at least 1")
    absurd = [f"{name} {getattr(config, name):,}" for name, limit in LIMITS.items() if getattr(config, name) > limit]
    if absurd:
        raise EdgeUsageError(f"{path}: the decoder configuration says {', '.join(absurd)}, past what any decoder "
                             f"has (at most {', '.join(f'{n} {v:,}' for n, v in LIMITS.items())}): a broken file?")
    if config.sliding_window > config.max_context:
        raise EdgeUsageError(f"{path}: the decoder configuration says a sliding window of {config.sliding_window:,} "
                             f"positions, larger than its context of {config.max_context:,}: no position could fall "
                             "out of it (a broken file? its ring cache would be allocated whole)")
    if config.n_heads % config.n_kv_heads:
        raise EdgeUsageError(f"{path}: {config.n_heads} attention heads are not a multiple of {config.n_kv_heads} "
                             "key/value heads")
    return config


def genai_decoder(folder: Path) -> Path | None:
    """The decoder ``.onnx`` a GenAI folder's ``genai_config.json`` names, where it has one."""
    path = Path(folder) / GENAI_CONFIG
    if not path.is_file():
        return None
    model = _json(path).get("model")
    decoder = model.get("decoder") if isinstance(model, dict) else None
    name = decoder.get("filename") if isinstance(decoder, dict) else None
    if not isinstance(name, str) or Path(name).name != name:
        raise EdgeUsageError(f"{path}: model.decoder.filename must name a file in that folder, not {name!r}")
    return Path(folder) / name


def configuration_files(artifact: Path) -> dict[str, Path]:
    """The exporter's configuration a runtime reads with ``artifact`` where it is part of the export
    (a GenAI folder's ``genai_config.json`` naming it: its generator reads it), by name; {} else or
    where that file is unreadable (it is judged where it is read)."""
    artifact = Path(artifact)
    config = artifact.parent / GENAI_CONFIG
    try:
        named = genai_decoder(artifact.parent) if config.is_file() else None
    except EdgeUsageError:
        named = None
    return {GENAI_CONFIG: config} if named is not None and named.name == artifact.name else {}


def read_config(artifact: Path, metadata: Callable[[Path], LlmConfig | None] | None = None) -> LlmConfig:
    """The decoder configuration of ``artifact``, from what its exporter wrote: ``genai_config.json``
    naming it, the artifact's own metadata (``metadata``: the runtime's reader, e.g. a GGUF's keys),
    then a hand-written ``<stem>.json`` (the artifact's own file), then a Hugging Face
    ``config.json`` beside it. None of them: an error naming every file looked for and the keys."""
    artifact = Path(artifact)
    folder = artifact.parent
    if genai_decoder(folder) == artifact:
        return from_genai_config(folder / GENAI_CONFIG)
    if metadata is not None:
        found = metadata(artifact)
        if found is not None:
            return found
    # A file named after the artifact is its own; a folder's config.json may describe another export
    # of the network (its max_position_embeddings is rarely an export's cache length).
    own = config_path(artifact)
    if own.is_file():
        return LlmConfig.load(own)
    if (folder / HF_CONFIG).is_file():
        return from_hf_config(folder / HF_CONFIG)
    raise EdgeUsageError(
        f"{artifact}: no decoder configuration: looked for {folder / GENAI_CONFIG} (ONNX Runtime GenAI's model "
        f"builder), {folder / HF_CONFIG} (a Hugging Face / Optimum export folder), the artifact's own metadata, "
        f"and a hand-written {own} with "
        f"{', '.join(f.name for f in fields(LlmConfig) if f.name != 'source' and f.name not in _OPTIONAL)}"
        f" (optional: dtype, sliding_window, sliding_layers, sliding_cache)")
