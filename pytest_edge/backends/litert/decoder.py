"""LiteRT's decoder LLMs as litert-torch's generative converter writes them
(``converter.convert_to_tflite``): one ``.tflite`` with a ``prefill_<len>`` signature (litert-torch
0.10; ``prefill`` in older exports, one per prefill length where several were asked) and a
``decode`` signature over an external KV cache. Each takes ``tokens`` [1, seq] and ``input_pos``
[seq] (int32) and ``kv_cache_k_N`` / ``kv_cache_v_N`` for each layer N, and returns the updated
``kv_cache_k_N`` / ``kv_cache_v_N``; ``decode`` also returns ``logits`` [1, 1, vocab], ``prefill``
only where exported with ``output_logits_on_prefill``. The cache is static: ``max_context``
positions, [1, max_context, kv_heads, head_dim] (``KV_LAYOUT_DEFAULT``, BTNH) or K [1, kv_heads,
max_context, head_dim] and V [1, kv_heads, head_dim, max_context] (``KV_LAYOUT_TRANSPOSED``).

Run as LiteRT's LLM pipelines run it: the prompt but its last token prefilled (tokens padded to
the signature's length, ``input_pos`` the next positions: the causal mask the model builds from
``input_pos`` hides the padding's entries, which later steps overwrite), then ``decode`` one token
at a time at the next position, the cache outputs fed back as the next call's inputs. The
configuration is read from the signatures alone: layers from the cache names, KV heads, head size
and context from the cache's shape, the vocabulary from the logits, the query heads from the
attention operator's query (litert-torch's ``odml.scaled_dot_product_attention`` composite reads
the query [1, seq, heads, head_dim] beside the cache)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError, EdgeUsageError, visible
from ..decoder import Decoder, not_a_decoder

BACKEND = "litert"
SIGNATURES = ("prefill[_<len>](tokens int32 [1, len], input_pos int32 [len], kv_cache_k_N, kv_cache_v_N) and "
              "decode(tokens int32 [1, 1], input_pos int32 [1], kv_cache_k_N, kv_cache_v_N) -> logits [1, 1, vocab], "
              "kv_cache_k_N, kv_cache_v_N (litert-torch's generative converter)")
_PREFILL = re.compile(r"prefill(?:_(\d+))?$")
_CACHE = re.compile(r"kv_cache_([kv])_(\d+)$")


@dataclass
class Layout:
    """What a generative .tflite's signatures say: the names, the cache and the lengths."""
    prefill: dict[int, str]  # prefill length -> signature name
    caches: list[str]  # kv_cache_k_0, kv_cache_v_0, ... in layer order
    cache_shapes: dict[str, tuple[int, ...]]
    cache_dtype: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    max_context: int
    vocab_size: int
    token_dtype: Any
    position_dtype: Any
    n_heads: int | None = None


def _describe(signatures: dict[str, tuple[dict, dict]]) -> str:
    def io(details: dict) -> str:
        return ", ".join(f"{name} {np.dtype(d['dtype']).name} {[int(x) for x in d['shape']]}"
                         for name, d in sorted(details.items()))
    return "; ".join(f"{name}({io(ins)}) -> ({io(outs)})" for name, (ins, outs) in signatures.items())


def _signatures(interpreter) -> dict[str, tuple[dict, dict]]:
    found = {}
    for name in interpreter.get_signature_list():
        runner = interpreter.get_signature_runner(name)
        found[name] = (runner.get_input_details(), runner.get_output_details())
    return found


def _query_heads(interpreter, k_shape: tuple[int, ...], head_dim: int, n_kv_heads: int,
                 lengths: set[int]) -> int | None:
    """The query heads, from the attention of the interpreter's first subgraph (a prefill, its
    ``tokens`` [1, seq] giving seq): litert-torch's ``odml.scaled_dot_product_attention`` composite
    reads the query [1, seq, heads, head_dim] beside the K cache and returns the query's shape; with
    the transposed cache the attention is a BATCH_MATMUL of the query grouped per KV head,
    [1, kv_heads, heads / kv_heads * seq, head_dim], by the K cache [1, kv_heads, max_context, head_dim]."""
    try:
        shapes = {int(d["index"]): tuple(int(x) for x in d["shape"]) for d in interpreter.get_tensor_details()}
        ops = interpreter._get_ops_details()
        tokens = [tuple(int(x) for x in d["shape"]) for d in interpreter.get_input_details()
                  if str(d["name"]).endswith("tokens")]
    except (ValueError, RuntimeError, AttributeError):
        return None
    seqs = {tokens[0][1]} if len(tokens) == 1 and len(tokens[0]) == 2 else lengths
    for op in ops:
        inputs = [shapes.get(int(t)) for t in op["inputs"] if int(t) >= 0]
        outputs = [shapes.get(int(t)) for t in op["outputs"]]
        if k_shape not in inputs or k_shape in outputs:
            continue  # not reading the cache, or writing it (the cache update's slice is KV-headed)
        for q in inputs:
            if q is None or q == k_shape or len(q) != 4 or q[0] != 1 or q[3] != head_dim:
                continue
            if len(inputs) >= 3 and q in outputs:  # the SDPA composite: its output has the query's shape
                for seq, heads in ((q[1], q[2]), (q[2], q[1])):
                    if seq in seqs and heads % n_kv_heads == 0:
                        return heads
            if len(inputs) == 2 and q[1] == n_kv_heads == k_shape[1] and len(seqs) == 1:  # grouped BATCH_MATMUL
                seq = next(iter(seqs))
                if q[2] % seq == 0:
                    return n_kv_heads * (q[2] // seq)
    return None


def read_layout(interpreter, path: Path, backend: str = BACKEND) -> Layout:
    """The layout of a generative .tflite; a BackendError naming the file, the backend, what was
    expected and what was found where it is not one."""
    signatures = _signatures(interpreter)
    found = _describe(signatures)
    if not signatures:
        inputs = ", ".join(f"{d['name']} {np.dtype(d['dtype']).name} {[int(x) for x in d['shape']]}"
                           for d in interpreter.get_input_details())
        found = f"no signatures, inputs {inputs or 'none'}"

    def refuse(why: str) -> BackendError:
        return not_a_decoder(path, backend, SIGNATURES, f"{why}; the model has {found}")

    prefill = {}
    for name in signatures:
        match = _PREFILL.match(name)
        if match:
            tokens = signatures[name][0].get("tokens")
            if tokens is None or len(tokens["shape"]) != 2:
                raise refuse(f"signature {name} has no tokens [1, len] input")
            if int(tokens["shape"][1]) < 1:  # a chunk of 0 tokens would never move the prompt on
                raise refuse(f"signature {name} takes {int(tokens['shape'][1])} tokens")
            prefill[int(tokens["shape"][1])] = name
    if "decode" not in signatures or not prefill:
        raise refuse("no " + " and no ".join(n for n, ok in (("prefill signature", prefill),
                                                             ("decode signature", "decode" in signatures)) if not ok))
    dec_in, dec_out = signatures["decode"]
    missing = {"tokens", "input_pos"} - set(dec_in)
    if missing:
        raise refuse(f"decode has no {' and no '.join(sorted(missing))} input")
    caches = sorted((n for n in dec_in if _CACHE.match(n)), key=lambda n: (int(_CACHE.match(n).group(2)), n))
    layers = sorted({int(_CACHE.match(n).group(2)) for n in caches})
    extra = sorted(set(dec_in) - set(caches) - {"tokens", "input_pos"})
    expected = {f"kv_cache_{kind}_{layer}" for layer in range(len(layers)) for kind in "kv"}
    if not caches or layers != list(range(len(layers))) or set(caches) != expected:
        raise refuse("decode has no kv_cache_k_N / kv_cache_v_N pair for each layer 0 .. N-1")
    if extra:
        raise refuse(f"decode takes inputs this runner does not feed ({', '.join(extra)}; e.g. an export "
                     "with mask_as_input)")
    if "logits" not in dec_out or any(c not in dec_out for c in caches):
        raise refuse("decode does not return logits and every kv_cache_* it takes")
    for name in prefill.values():
        ins, outs = signatures[name]
        if set(ins) != set(dec_in) or any(c not in outs for c in caches):
            raise refuse(f"{name} does not take and return the same cache as decode")
    if [int(x) for x in dec_in["tokens"]["shape"]] != [1, 1]:
        raise refuse("decode's tokens are not [1, 1] (a decode batch size above 1 is not run here)")
    shapes = {c: tuple(int(x) for x in dec_in[c]["shape"]) for c in caches}
    k, v = shapes["kv_cache_k_0"], shapes["kv_cache_v_0"]
    if len(k) != 4 or k[0] != 1 or any(shapes[c] != (k if "_k_" in c else v) for c in caches):
        raise refuse("the caches are not [1, ...] of one shape a layer")
    if k == v:  # KV_LAYOUT_DEFAULT: BTNH
        max_context, n_kv_heads, head_dim = k[1], k[2], k[3]
    elif v == (k[0], k[1], k[3], k[2]):  # KV_LAYOUT_TRANSPOSED: K BNTH, V BNHT
        n_kv_heads, max_context, head_dim = k[1], k[2], k[3]
    else:
        raise refuse(f"K {list(k)} and V {list(v)} are neither litert-torch's BTNH nor its transposed layout")
    if min(max_context, n_kv_heads, head_dim) < 1:
        raise refuse(f"the caches {list(k)} have an empty dimension")
    logits = [int(x) for x in dec_out["logits"]["shape"]]
    layout = Layout(prefill=dict(sorted(prefill.items())),
                    caches=caches, cache_shapes=shapes, cache_dtype=np.dtype(dec_in[caches[0]]["dtype"]).name,
                    n_layers=len(layers), n_kv_heads=n_kv_heads, head_dim=head_dim, max_context=max_context,
                    vocab_size=logits[-1], token_dtype=np.dtype(dec_in["tokens"]["dtype"]),
                    position_dtype=np.dtype(dec_in["input_pos"]["dtype"]))
    layout.n_heads = _query_heads(interpreter, k, head_dim, n_kv_heads, set(prefill) | {1})
    return layout


def damaged(exc: BaseException) -> str:
    """What a damaged .tflite's error says, bounded and escaped (its bytes may be any, terminal
    escapes among them)."""
    return f"not a readable generative .tflite (a damaged file?): {type(exc).__name__}: {visible(exc, most=200)}"


def from_tflite(path: Path) -> Any:
    """The configuration a generative .tflite's signatures carry (a decoder_config.LlmConfig); an
    EdgeUsageError naming the file and the backend for a .tflite that is not one (a tensor model)."""
    from ..decoder_config import LlmConfig, _checked, config_path
    from .runtime import interpreter_module

    path = Path(path)
    module = interpreter_module()
    if module is None:
        return None  # the runtime is missing: the backend is skipped saying so; a <stem>.json may serve
    try:
        # Read only (no tensors allocated), without the default delegate: nothing runs here.
        interpreter = module.Interpreter(model_path=str(path),
                                         experimental_op_resolver_type=module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    except (ValueError, RuntimeError, OSError) as exc:
        raise EdgeUsageError(f"{path} ({BACKEND}): cannot read: {str(exc).strip()}") from None
    try:
        layout = read_layout(interpreter, path)
    except BackendError as exc:
        raise EdgeUsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the interpreter reads a damaged file lazily, raising anything
        raise EdgeUsageError(f"{path} ({BACKEND}): {damaged(exc)}") from None
    if layout.n_heads is None:
        if config_path(path).is_file():
            return None
        raise EdgeUsageError(f"{path} ({BACKEND}): no attention operator reading the KV cache beside a query "
                             f"[1, seq, heads, {layout.head_dim}] gives the query heads: write them in "
                             f"{config_path(path)}")
    return _checked(LlmConfig(vocab_size=layout.vocab_size, n_layers=layout.n_layers, n_heads=layout.n_heads,
                              n_kv_heads=layout.n_kv_heads, head_dim=layout.head_dim, max_context=layout.max_context,
                              dtype=layout.cache_dtype, source=f"{path} (LiteRT prefill/decode signatures)"), path)


def _agrees(config: Any, layout: Layout, where: str) -> None:
    """The configuration a test runs this export with (its ``<stem>.json``, or the model's, read from
    another artifact of the same network) must describe this network: its KV-cache estimate is read
    from it, while the calls follow the signatures. A figure of the network they disagree on is an
    error naming both. The context is the export's own (``kv_cache_max_len``: an ONNX build of the
    same weights may hold more), so it is not compared; the cache refuses positions past its own."""
    if config is None:
        return
    differ = [f"{name} {getattr(config, name)} (configuration) but {getattr(layout, name)} (signatures)"
              for name in ("n_layers", "n_kv_heads", "head_dim", "vocab_size")
              if getattr(config, name, None) != getattr(layout, name)]
    if layout.n_heads is not None and getattr(config, "n_heads", None) != layout.n_heads:
        differ.append(f"n_heads {getattr(config, 'n_heads', None)} (configuration) but {layout.n_heads} (signatures)")
    if differ:
        raise BackendError(f"{where}: its configuration ({getattr(config, 'source', '') or 'given'}) does not "
                           f"describe this export: {'; '.join(differ)}")


class LiteRTDecoder(Decoder):
    def __init__(self, path: Path, config: Any, threads: int, backend: str = BACKEND,
                 with_delegate: bool = True) -> None:
        from .runtime import interpreter_module

        module = interpreter_module()
        if module is None:
            raise BackendError(f"{path} ({backend}): ai-edge-litert (or tflite-runtime) is not installed")
        resolver = (module.OpResolverType.AUTO if with_delegate
                    else module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        try:
            self.interpreter = module.Interpreter(model_path=str(path), num_threads=threads or None,
                                                  experimental_op_resolver_type=resolver)
        except (ValueError, RuntimeError, OSError) as exc:
            raise BackendError(f"{path} ({backend}): cannot load: {str(exc).strip()}") from None
        try:
            self.layout = read_layout(self.interpreter, Path(path), backend)
            self.prefill = {n: self.interpreter.get_signature_runner(name) for n, name in self.layout.prefill.items()}
            self.decode = self.interpreter.get_signature_runner("decode")
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged file: undecodable names, tensor indices past the end
            raise BackendError(f"{path} ({backend}): {damaged(exc)}") from None
        self.config = config
        self.where = f"{path} ({backend})"  # what an error names
        _agrees(config, self.layout, self.where)
        self.reset()

    def reset(self) -> None:
        self.position = 0
        dtype = np.dtype(self.layout.cache_dtype)
        self.cache = {name: np.zeros(shape, dtype) for name, shape in self.layout.cache_shapes.items()}

    def _run(self, runner, tokens: Sequence[int], length: int) -> dict:
        """One call at the next positions: ``tokens`` padded with 0 to ``length``."""
        layout = self.layout
        padded = np.zeros((1, length), layout.token_dtype)
        padded[0, :len(tokens)] = tokens
        positions = np.arange(self.position, self.position + length, dtype=layout.position_dtype)
        try:
            out = runner(tokens=padded, input_pos=positions, **self.cache)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"{self.where}: a call at positions {self.position}..{self.position + length - 1} "
                               f"failed: {str(exc).strip()}") from None
        self.cache = {name: out[name] for name in layout.caches}
        self.position += len(tokens)
        return out

    def _prefill_length(self, remaining: int) -> int | None:
        """The prefill signature to take ``remaining`` tokens (the shortest that holds them all, else
        the longest), whose padded positions stay in the cache; None: none fits, decode them."""
        room = self.layout.max_context - self.position
        fitting = [n for n in self.prefill if n <= room]
        if not fitting:
            return None
        holding = [n for n in fitting if n >= remaining]
        return min(holding) if holding else max(fitting)

    def step(self, ids: Sequence[int]) -> np.ndarray:
        ids = [int(i) for i in ids]
        if not ids:
            raise BackendError(f"{self.where}: a step of no tokens")
        if self.position + len(ids) > self.layout.max_context:
            raise BackendError(f"{self.where}: {self.position + len(ids)} positions asked of a KV cache of "
                               f"{self.layout.max_context} (the export's kv_cache_max_len)")
        # Prefill all but the last token (the signature returns no logits unless exported with
        # output_logits_on_prefill), then decode the last: its logits are the step's.
        head, last = ids[:-1], ids[-1]
        while len(head) > 1:
            length = self._prefill_length(len(head))
            if length is None:
                break
            chunk, head = head[:length], head[length:]
            self._run(self.prefill[length], chunk, length)
        for token in head:
            self._run(self.decode, [token], 1)
        logits = self._run(self.decode, [last], 1)["logits"]
        return np.asarray(logits, np.float32).reshape(-1, self.layout.vocab_size)[-1].copy()
