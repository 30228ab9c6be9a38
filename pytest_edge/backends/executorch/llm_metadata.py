"""The decoder configuration ExecuTorch's LLM export (``export_llama`` / ``export_llm``) writes into
the ``.pte`` itself, read from the file without the runtime (program.py).

The export adds one method per figure, with no inputs and one constant out (``get_vocab_size``,
``get_n_layers``, ``get_max_seq_len``: tokens one ``forward`` call takes, ``get_max_context_len``:
positions the KV cache holds, ``use_kv_cache``, ``enable_dynamic_shape`` ...). It writes no head
counts; those come from ``get_n_heads``/``get_n_kv_heads``/``get_head_dim`` methods where an export
adds them (ExecuTorch's Qualcomm and Gemma exporters write the last two; ``--metadata`` adds any),
else from the operators the attention calls with the cache: ``llama::custom_sdpa(query [1, seq,
heads, head_dim], k_cache [1, max_context, kv_heads, head_dim], v_cache, ...)`` (and
``llama::sdpa_with_kv_cache``), what ``--use_sdpa_with_kv_cache`` exports. An export without either
(a plain ``-kv`` export decomposes attention into aten ops) carries no head counts: the KV-cache
estimate needs them, so a hand-written ``<stem>.json`` is read instead, or the error says so."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ...errors import EdgeUsageError, visible
from ..decoder import not_a_decoder
from ..decoder_config import LlmConfig, _checked, config_path
from .dtypes import SCALAR_TYPES
from .program import UNREADABLE, Plan, TensorValue, read_plans

BACKEND = "executorch"
# The methods export_llama writes whose presence marks a .pte as its export.
EXPORT_METHODS = ("get_vocab_size", "get_n_layers", "get_max_seq_len")
# The SDPA operators that read the KV cache, with the argument positions of query and k_cache.
SDPA_OPERATORS = {"llama::custom_sdpa": (0, 1), "llama::sdpa_with_kv_cache": (0, 3)}
_CACHE_DTYPES = {6: "float32", 5: "float16", 15: "bfloat16", 1: "int8"}  # ScalarType -> DTYPE_BYTES keys
DECODER_SIGNATURE = "forward(tokens int64 [1, seq], input_pos int64 [1] or [seq]) -> float logits"


def _dtype(scalar_type: int) -> str:
    return {**SCALAR_TYPES, 15: "bfloat16"}.get(scalar_type, f"scalar_type_{scalar_type}")


def _forward(plans: list[Plan], path: Path) -> Plan:
    forward = next((p for p in plans if p.name == "forward"), None)
    if forward is None:
        raise EdgeUsageError(str(not_a_decoder(path, BACKEND, DECODER_SIGNATURE,
                                               f"no forward method (methods: {_listed([p.name for p in plans])})")))
    return forward


def signature_problem(forward: Plan) -> str | None:
    """How ``forward`` differs from a decoder's signature (two int64 inputs of rank 2 and 1, one
    float output of rank 2 or 3); None where it is one."""
    inputs = [forward.tensor(i) for i in forward.inputs]
    outputs = [forward.tensor(i) for i in forward.outputs]

    def shown(tensors: list[TensorValue | None]) -> str:
        return ", ".join("not a tensor" if t is None else f"{_dtype(t.scalar_type)} {list(t.sizes)}" for t in tensors)

    found = f"{len(inputs)} inputs ({shown(inputs)}) and {len(outputs)} outputs ({shown(outputs)})"
    if len(inputs) != 2 or len(outputs) != 1 or None in inputs or outputs[0] is None:
        return found
    tokens, positions = inputs
    if tokens.scalar_type != 4 or positions.scalar_type != 4 or len(tokens.sizes) != 2 or len(positions.sizes) != 1 \
            or outputs[0].scalar_type not in (5, 6, 15) or len(outputs[0].sizes) not in (2, 3):
        return found
    return None


def _heads(forward: Plan, max_context: int) -> tuple[int, int, int, str] | None:
    """(heads, kv_heads, head_dim, cache dtype) from the first SDPA call's query and k_cache."""
    for name, args in forward.kernel_calls:
        if name not in SDPA_OPERATORS:
            continue
        where_query, where_cache = SDPA_OPERATORS[name]
        query = forward.tensor(args[where_query]) if len(args) > where_cache else None
        cache = forward.tensor(args[where_cache]) if len(args) > where_cache else None
        # The custom ops' layout: [batch, positions, heads, head_dim], the cache static at max_context.
        if query is None or cache is None or len(query.sizes) != 4 or len(cache.sizes) != 4 \
                or cache.sizes[1] != max_context or query.sizes[3] != cache.sizes[3]:
            continue
        return query.sizes[2], cache.sizes[2], cache.sizes[3], _CACHE_DTYPES.get(cache.scalar_type, "")
    return None


def _program_disagreement(forward: Plan, values: dict) -> list[str]:
    """Where the metadata methods contradict the program they describe, each with both figures: the
    vocabulary (the logits' last axis), and where it calls ExecuTorch's SDPA with the KV cache, the
    layers (one call each), query and KV heads, head size and context (the caches' [1, positions,
    kv_heads, head_dim]). A ``get_n_layers`` of 1024 for a 2-layer program made the record's KV
    estimate 512x and passed."""
    graph: dict[str, int] = {}
    logits = forward.tensor(forward.outputs[0]) if forward.outputs else None
    if logits is not None and logits.sizes and logits.sizes[-1] > 0:
        graph["vocab_size"] = logits.sizes[-1]
    calls = []
    for name, args in forward.kernel_calls:
        if name in SDPA_OPERATORS and len(args) > SDPA_OPERATORS[name][1]:
            query, cache = (forward.tensor(args[i]) for i in SDPA_OPERATORS[name])
            if query is not None and cache is not None and len(query.sizes) == 4 and len(cache.sizes) == 4:
                calls.append((query.sizes, cache.sizes))
    if calls:
        query, cache = calls[0]
        graph.update(n_layers=len(calls), n_heads=query[2], n_kv_heads=cache[2], head_dim=cache[3],
                     max_context=cache[1])
    return [f"{name} {values[name]} (metadata) but {size} (program)" for name, size in graph.items()
            if isinstance(values.get(name), int) and values[name] != size]


def from_pte(path: Path, hand_written: Callable[[Path], Path] = config_path) -> LlmConfig | None:
    """The configuration in an ExecuTorch LLM export's metadata methods; None for a ``.pte`` without
    them (a hand-written ``<stem>.json`` then), or whose metadata lacks the head counts while a
    ``<stem>.json`` is beside it. A ``.pte`` whose forward is no decoder: an error naming the file."""
    from .runtime import program_bytes, pte_problem

    path = Path(path)
    try:
        data, size = program_bytes(path)  # the methods without the weights (the pytest process reads this)
    except OSError as exc:
        raise EdgeUsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    problem = pte_problem(data, path, size)
    if problem:
        raise EdgeUsageError(problem)
    try:
        plans = read_plans(data)
    except UNREADABLE as exc:
        raise EdgeUsageError(f"{path}: not a readable ExecuTorch program: {exc}") from None
    forward = _forward(plans, path)
    problem = signature_problem(forward)
    if problem:
        raise EdgeUsageError(str(not_a_decoder(path, BACKEND, DECODER_SIGNATURE, problem)))
    metadata = {p.name: p.constant() for p in plans if p.constant() is not None}
    if not any(name in metadata for name in EXPORT_METHODS):
        return None
    max_context = metadata.get("get_max_context_len", metadata.get("get_max_seq_len"))
    values = {"vocab_size": metadata.get("get_vocab_size"), "n_layers": metadata.get("get_n_layers"),
              "max_context": max_context}
    from_sdpa = _heads(forward, max_context) if isinstance(max_context, int) else None
    # The cache's own type where an SDPA call shows it; else the logits' (export_llama's -d casts the
    # model, its caches with it); float32 only where neither is a type the estimate knows.
    logits = forward.tensor(forward.outputs[0])
    dtype = (from_sdpa[3] if from_sdpa else "") or _CACHE_DTYPES.get(logits.scalar_type if logits else 6, "float32")
    values["n_kv_heads"] = metadata.get("get_n_kv_heads", from_sdpa[1] if from_sdpa else None)
    values["head_dim"] = metadata.get("get_head_dim", from_sdpa[2] if from_sdpa else None)
    values["n_heads"] = metadata.get("get_n_heads", from_sdpa[0] if from_sdpa else None)
    differ = _program_disagreement(forward, values)
    if differ:
        raise EdgeUsageError(f"{path}: its metadata methods ({_listed(metadata)}) do not describe its program: "
                             f"{'; '.join(differ)} (a broken export, or metadata passed by hand that is wrong)")
    missing = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, int) or v <= 0]
    if missing:
        if hand_written(path).is_file():
            return None
        raise EdgeUsageError(
            f"{path}: an ExecuTorch LLM export whose metadata methods ({_listed(metadata)}) and "
            f"operators give no {', '.join(missing)}, which the KV-cache estimate and the prompt bounds need: "
            "export with --use_sdpa_with_kv_cache (its llama::custom_sdpa shows the heads), or add them with "
            "--metadata '{\"get_n_heads\": H, \"get_n_kv_heads\": KV, \"get_head_dim\": D}', or write "
            f"{hand_written(path)} by hand")
    return _checked(LlmConfig(**values, dtype=dtype, source=f"{path} (ExecuTorch metadata methods)"), path)


def _listed(names: object, most: int = 12) -> str:
    """Method names as the file spells them, made safe to print: a damaged file's "names" can be
    any bytes (terminal escapes, megabytes), so each is escaped and cut, and the list too."""
    shown = []
    for name in sorted(map(str, names))[:most]:  # type: ignore[call-overload]
        shown.append(name if name.isidentifier() and len(name) <= 64 else f"'{visible(name, most=64)}'")
    more = len(names) - most  # type: ignore[arg-type]
    return ", ".join(shown) + (f", … ({more} more)" if more > 0 else "")
