"""ONNX Runtime intermediates for per-node triage (docs/triage.md): every node output of
the graph exposed and computed with the session's optimizations, with ORT_DISABLE_ALL and with
onnx.reference. Runs in the onnxruntime worker only, on a mismatch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Union

import numpy as np

from ...accuracy.metrics import max_abs_diff
from ..intermediates import Intermediates, NodeOf, NodeRuns, NodeWalk
from .session import new_session

# Limits that keep the per-node triage well inside a worker request's time (edge_timeout).
SOLO_BUDGET_S = 30.0  # sessions that expose one tensor at a time (see node_intermediates)
REFERENCE_MAX_NODES = 1000  # onnx.reference runs in NumPy: slow on large graphs
MAX_INTERMEDIATE_BYTES = 2**30  # what one reply may carry back to the pytest process
UNOPTIMIZED, REFERENCE = "ORT_DISABLE_ALL", "onnx.reference"
# The configurations the graph is run in, after the optimized one, compared in this order, and the
# runtime's names: what the "nodes" triage method reads.
CONFIGURATIONS = (UNOPTIMIZED, REFERENCE)
RUNTIME, RUNTIME_SHORT = "onnxruntime", "ORT"
_SENDABLE = {np.dtype(t) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                   "uint64", "float16", "float32", "float64")}


# One output of ORT or onnx.reference: a tensor, a sequence or a map.
_Output = Union[np.ndarray, list[Any], dict[Any, Any]]


def _not_walked() -> NodeRuns:
    return NodeRuns(configurations=list(CONFIGURATIONS), runtime=RUNTIME, runtime_short=RUNTIME_SHORT)


def _sendable(values: dict[str, _Output]) -> dict[str, np.ndarray]:
    # Sequences, maps, strings and bfloat16 cannot cross the worker protocol, nor be compared here.
    return {k: v for k, v in values.items() if isinstance(v, np.ndarray) and v.dtype in _SENDABLE}


def _run_exposed(model: bytes, provider: str, level, threads: int | None, feeds: dict[str, np.ndarray]):
    session = new_session(model, provider, threads, level=level)
    names = [o.name for o in session.get_outputs()]
    return _sendable(dict(zip(names, session.run(None, feeds))))


def _optimized_graph(model: bytes, provider: str, level, threads: int | None,
                     original: dict[str, str], names: set[str]) -> tuple[dict[str, str], list[str]]:
    """What ORT made of the graph at ``level``: tensor -> the node of the optimized graph that
    computes it, where that is another kind of node than the ONNX graph's (a fusion:
    LayerNormalization for the decomposed pattern), and the node names (of ``names``) it removed."""
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "optimized.onnx"
        new_session(model, provider, threads, level=level, save_to=saved)
        optimized = onnx.load(str(saved), load_external_data=False)
    found = {}
    for node in optimized.graph.node:
        for tensor in node.output:
            if tensor in original and original[tensor] != node.op_type:
                found[tensor] = f"{node.op_type} {node.name!r}"
    kept = {node.name for node in optimized.graph.node}
    return found, sorted(names - kept)


def _reference_skip(model) -> str | None:
    """Why onnx.reference cannot run ``model``; None if it may."""
    local = {(f.domain, f.name) for f in model.functions}
    foreign = sorted({n.domain for n in model.graph.node
                      if n.domain not in ("", "ai.onnx") and (n.domain, n.op_type) not in local})
    if foreign:
        return f"it has operators of domain {', '.join(foreign)}, which onnx.reference does not implement"
    if len(model.graph.node) > REFERENCE_MAX_NODES:
        return (f"{len(model.graph.node)} nodes are more than the {REFERENCE_MAX_NODES} it runs in NumPy "
                "within a worker request")
    return None


def node_intermediates(path: Path, provider: str, feeds: dict[str, np.ndarray], *, threads: int | None = None,
                       final: dict[str, np.ndarray] | None = None, level=None) -> Intermediates:
    """Every node output of the ONNX graph at ``path`` in three runs, for the per-node triage.

    A copy of the graph declares each node output a graph output and runs with ORT at ``level``
    (ORT_ENABLE_ALL, what the backend runs), with ORT_DISABLE_ALL, and with onnx.reference. ORT
    does not fuse nodes whose outputs are graph outputs, so exposing every tensor can change what
    the optimized run computes: when the model's own outputs (``final``, from the backend's
    session) differ from that run's, each tensor is exposed alone instead (fusions around it kept)
    until SOLO_BUDGET_S is spent, and the graph outputs are taken from ``final``.

    Returns :class:`Intermediates` of method "nodes" keyed by tensor name (``tensors``: the optimized
    values), with :class:`NodeWalk` details (ORT_DISABLE_ALL's and onnx.reference's tensors in
    ``runs``, what the optimized graph fused and removed, how its values were exposed); ``unavailable``
    with a reason where it cannot be done.
    """
    delegated = provider != "CPUExecutionProvider"
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as exc:
        return Intermediates("nodes", delegated=delegated, details=_not_walked(),
                             unavailable=f"the per-node triage needs onnx in the worker ({exc})")
    level = level if level is not None else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    level_name = getattr(level, "name", str(level))
    model = onnx.load(str(path))
    graph = model.graph
    given = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    outputs = [o.name for o in graph.output]
    order, nodes, producers = [], {}, {}
    for index, node in enumerate(graph.node):  # ONNX requires nodes in topological order
        if node.op_type == "Constant":
            continue  # a constant diverges nowhere
        for tensor in node.output:
            if tensor and tensor not in given and tensor not in nodes:
                order.append(tensor)
                nodes[tensor] = NodeOf(node.name, node.op_type, index)
                producers[tensor] = f"{node.op_type} {node.name!r} (node {index})" if node.name else \
                    f"{node.op_type} (node {index})"
    try:  # element types for the added outputs; ORT takes an untyped output where inference fails
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    except Exception:  # noqa: BLE001 - inference is a help, not a need
        types = {}
    try:
        plain = model.SerializeToString()
    except ValueError as exc:
        return Intermediates("nodes", delegated=delegated, details=_not_walked(),
                             unavailable=f"{path} cannot be copied with its tensors exposed ({exc})")
    own_outputs = [onnx.ValueInfoProto.FromString(o.SerializeToString()) for o in graph.output]
    for tensor in order:
        if tensor in outputs:
            continue
        kind = types.get(tensor)
        if kind is not None and kind.WhichOneof("value") not in (None, "tensor_type"):
            continue  # a sequence or map: nothing to compare element-wise
        if kind is not None and kind.tensor_type.elem_type:
            graph.output.append(onnx.helper.make_tensor_value_info(tensor, kind.tensor_type.elem_type, None))
        else:
            graph.output.append(onnx.ValueInfoProto(name=tensor))
    exposed = model.SerializeToString()
    walk = NodeWalk(configurations=list(CONFIGURATIONS), runtime=RUNTIME, runtime_short=RUNTIME_SHORT, nodes=nodes,
                    optimized=level_name, unoptimized=UNOPTIMIZED, solo_budget_s=SOLO_BUDGET_S)
    found = Intermediates("nodes", order=order, producers=producers, names={t: t for t in order},
                          delegated=delegated, details=walk)
    try:
        walk.runs[UNOPTIMIZED] = _run_exposed(exposed, provider, ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                              threads, feeds)
    except Exception as exc:  # noqa: BLE001 - ORT's refusal, in its words
        found.unavailable = (f"onnxruntime ({provider}, {UNOPTIMIZED}) refused {path} with every "
                             f"node output exposed: {str(exc).strip()[:300]}")
        return found
    try:
        optimized = _run_exposed(exposed, provider, level, threads, feeds)
    except Exception as exc:  # noqa: BLE001
        walk.skipped[f"{level_name} with every tensor exposed"] = str(exc).strip()[:300]
        optimized = None
    final = _sendable(final or {})
    if optimized is not None and final:
        deltas = [max_abs_diff(final[o], optimized[o]) for o in final if o in optimized]
        walk.exposure_delta = max(deltas, default=0.0)
    if optimized is not None and not (walk.exposure_delta or 0.0) > 0.0:
        found.tensors = optimized
    else:
        # Exposing every tensor stopped a fusion that changes the outputs (or ORT refused the copy):
        # expose one at a time, so the fusions around each tensor stay.
        walk.exposure = "one at a time"
        solo, deadline = dict(final), time.monotonic() + SOLO_BUDGET_S
        for tensor in order:
            if tensor in final:
                continue
            if time.monotonic() > deadline:
                walk.solo_stopped_at = tensor
                break
            graph.ClearField("output")
            graph.output.extend([*own_outputs, onnx.ValueInfoProto(name=tensor)])
            try:
                solo.update({k: v for k, v in _run_exposed(model.SerializeToString(), provider, level, threads,
                                                           feeds).items() if k == tensor})
            except Exception:  # noqa: BLE001, S112 - ORT refuses this output: nothing to compare it with
                continue
        found.tensors = solo
    try:
        walk.fused, walk.removed = _optimized_graph(
            plain, provider, level, threads, {t: n.op_type for t, n in nodes.items()},
            {n.node for n in nodes.values() if n.node})
    except Exception:  # noqa: BLE001, S110 - some providers cannot save their optimized graph
        pass
    graph.ClearField("output")
    graph.output.extend(own_outputs)
    reason = _reference_skip(model)
    if reason is None:
        try:
            from onnx.reference import ReferenceEvaluator

            values = ReferenceEvaluator(model).run(None, feeds, intermediate=True)
            walk.runs[REFERENCE] = _sendable({t: values[t] for t in order if t in values})
        except Exception as exc:  # noqa: BLE001 - an operator or attribute it does not implement
            reason = f"it failed on {path.name}: {type(exc).__name__}: {str(exc).strip()[:200]}"
    if reason is not None:
        walk.skipped[REFERENCE] = reason
    size = sum(v.nbytes for run in [found.tensors, *walk.runs.values()] for v in run.values())
    if size > MAX_INTERMEDIATE_BYTES:
        return Intermediates("nodes", delegated=delegated, details=_not_walked(),
                             unavailable=f"the intermediate tensors of {path} take {size / 2**30:.1f} GiB per run, "
                                         f"more than the {MAX_INTERMEDIATE_BYTES / 2**30:.0f} GiB a worker sends back")
    return found
