"""LiteRT (formerly TensorFlow Lite): ``litert`` with the default XNNPACK delegate, ``litert-ref`` without.

Imports ``ai_edge_litert.interpreter`` and falls back to ``tflite_runtime.interpreter``, the older
name whose last wheels need NumPy 1.x.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import BackendError
from ..base import Backend, TensorBackend, Coverage, Intermediates, LoadedModel, TensorSpec, unusable_artifact
from ..decoder import Decoder, DecoderRuntime
from ..quant_pair import QuantPair, QuantPairs
from ..shapes import InputShapes, LoadShapes
from .details import OpDetail, TensorDetail
from .runtime import installed_runtime, interpreter_module  # noqa: F401 - the backend's names too

_STATEFUL_OPS = {"VAR_HANDLE", "ASSIGN_VARIABLE", "READ_VARIABLE"}


def _spec(detail: TensorDetail, names: dict[int, str]) -> TensorSpec:
    signature = detail.get("shape_signature")
    dims = signature if signature is not None and len(signature) else detail["shape"]
    shape = tuple(int(d) if d >= 0 else None for d in dims)
    return TensorSpec(names.get(int(detail["index"]), detail["name"]), shape, np.dtype(detail["dtype"]).name)


def _signature_names(interpreter) -> dict[int, str]:
    """Tensor index -> the name in the model's only signature ('x' rather than 'serving_default_x:0')."""
    try:
        signatures = interpreter.get_signature_list()
        if len(signatures) != 1:
            return {}
        runner = interpreter.get_signature_runner(next(iter(signatures)))
        details = {**runner.get_input_details(), **runner.get_output_details()}
    except (ValueError, RuntimeError, AttributeError):
        return {}
    return {int(d["index"]): name for name, d in details.items()}


def _inside_partition(op: OpDetail, inside: set[int], boundary_in: set[int], boundary_out: set[int],
                      producer: dict[int, int], consumers: dict[int, set[int]], graph_outputs: set[int]) -> bool:
    if not len(op["inputs"]) and not len(op["outputs"]):
        return False  # no tensor ties it to the partition (CALL_ONCE): not claimed
    for t in (int(t) for t in op["inputs"] if t >= 0):
        if t in boundary_out or (t not in boundary_in and t in producer and producer[t] not in inside):
            return False
    for t in (int(t) for t in op["outputs"]):
        if t in boundary_in:
            return False
        if t in boundary_out:
            continue
        if t in graph_outputs or not consumers.get(t, set()) <= inside:
            return False
    return True


def delegate_partitions(ops: list[OpDetail], graph_outputs: set[int]) -> dict[int, set[int]]:
    """For each DELEGATE node (by index), the original nodes it replaced. See delegate_coverage."""
    delegate_nodes = [op for op in ops if op["op_name"] == "DELEGATE"]
    original = [op for op in ops if op["op_name"] != "DELEGATE"]
    producer = {int(t): op["index"] for op in original for t in op["outputs"]}
    consumers: dict[int, set[int]] = {}
    for op in original:
        for t in op["inputs"]:
            consumers.setdefault(int(t), set()).add(op["index"])
    partitions: dict[int, set[int]] = {}
    replaced: set[int] = set()
    for node in delegate_nodes:
        boundary_in = {int(t) for t in node["inputs"]}
        boundary_out = {int(t) for t in node["outputs"]}
        inside = {op["index"] for op in original} - replaced
        while True:
            keep = {op["index"] for op in original if op["index"] in inside and _inside_partition(
                op, inside, boundary_in, boundary_out, producer, consumers, graph_outputs)}
            if keep == inside:
                break
            inside = keep
        partitions[node["index"]] = inside
        replaced |= inside
    return partitions


def delegate_coverage(ops: list[OpDetail], graph_outputs: set[int], delegate_name: str,
                      tensor_names: Callable[[int], str] | None = None) -> Coverage:
    """Which original nodes the DELEGATE nodes replaced.

    After ``allocate_tensors()`` the interpreter lists the original nodes, then one ``DELEGATE``
    node per partition whose inputs and outputs are the partition's boundary tensors. A node lies
    inside a partition when all its inputs come from the boundary, constants or other inside
    nodes, and all its outputs go to inside nodes or out through the boundary. The largest such
    set is found by removing offenders until none is left; unlike a walk back from the outputs,
    this also finds nodes that act through resource variables (ADD feeding ASSIGN_VARIABLE).
    """
    partitions = delegate_partitions(ops, graph_outputs)
    replaced = set().union(*partitions.values())
    original = [op for op in ops if op["op_name"] != "DELEGATE"]
    # Every node of the model's main subgraph counts (variable ops too: XNNPACK takes them). A
    # node with no tensors at all (CALL_ONCE, which initialises variables) cannot be placed from
    # the boundary and is counted as fallback, by name, rather than claimed.
    fallback = [op["op_name"] for op in original if op["index"] not in replaced]
    # Each node by its type and first output tensor's name ("CUMSUM Identity", as the converter
    # named it): what stays the same node across a re-export, where its index may not.
    def node_id(op: OpDetail) -> str:
        outputs = list(op.get("outputs", []))
        named = tensor_names(int(outputs[0])) if tensor_names is not None and outputs else ""
        return f"{op['op_name']} {named}" if named else f"{op['op_name']} #{op['index']}"

    return Coverage(
        total_ops=len(original), delegated_ops=len(original) - len(fallback),
        fallback_ops=len(fallback), partitions=len(partitions),
        fallback_op_names=dict(Counter(fallback)),
        delegates=[delegate_name] if partitions else [], method="runtime",
        delegated_op_ids=[node_id(op) for op in original if op["index"] in replaced],
        fallback_reasons={node_id(op): "" for op in original if op["index"] not in replaced})


class LiteRTModel(LoadedModel):
    def __init__(self, make_interpreter, delegate_name: str | None, shapes: InputShapes) -> None:
        self._make = make_interpreter  # make_interpreter(preserve_all_tensors=False)
        self._shapes = shapes
        self._delegate_name = delegate_name
        self.interpreter = self._new_interpreter()
        ops = self.interpreter._get_ops_details()
        self.stateful = any(op["op_name"] in _STATEFUL_OPS for op in ops)
        names = _signature_names(self.interpreter)
        self.inputs = [_spec(d, names) for d in self.interpreter.get_input_details()]
        self.outputs = [_spec(d, names) for d in self.interpreter.get_output_details()]

    def _new_interpreter(self, preserve_all_tensors: bool = False):
        interpreter = self._make(preserve_all_tensors)
        details = interpreter.get_input_details()
        names = _signature_names(interpreter)
        wanted = self._shapes.for_inputs([_spec(d, names).name for d in details])
        for detail in details:
            name = _spec(detail, names).name
            if name in wanted:
                interpreter.resize_tensor_input(detail["index"], list(wanted[name]))
        interpreter.allocate_tensors()
        return interpreter

    def reset(self) -> None:
        # reset_all_variables() does not reset resource variables (VAR_HANDLE), which CALL_ONCE
        # initialises on the first invoke only: a fresh interpreter is the one reliable reset.
        if self.stateful:
            self.interpreter = self._new_interpreter()

    def _refresh_io(self) -> None:
        # get_input_details() builds dicts on every call: read the indices once per interpreter.
        interpreter = self.interpreter
        self._in = [(int(d["index"]), tuple(d["shape"])) for d in interpreter.get_input_details()]
        self._out = [int(d["index"]) for d in interpreter.get_output_details()]
        self._io_of = interpreter

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        interpreter = self.interpreter
        if getattr(self, "_io_of", None) is not interpreter:
            self._refresh_io()
        for (index, shape), value in zip(self._in, feeds):
            if shape != value.shape:
                interpreter.resize_tensor_input(index, list(value.shape))
                interpreter.allocate_tensors()
                self._refresh_io()
            interpreter.set_tensor(index, value)
        interpreter.invoke()
        return [interpreter.get_tensor(index).copy() for index in self._out]

    def bind(self, feeds: Sequence[np.ndarray]):
        self.run(feeds)  # sizes the tensors once
        interpreter, inputs, outputs = self.interpreter, [i for i, _ in self._in], self._out

        def infer():
            for index, value in zip(inputs, feeds):
                interpreter.set_tensor(index, value)
            interpreter.invoke()
            return [interpreter.get_tensor(index) for index in outputs]
        return infer

    def delegates(self) -> list[str]:
        return [self._delegate_name] if self._delegate_name else []

    def intermediates(self, feeds: Sequence[np.ndarray]) -> Intermediates:
        """Every tensor this configuration really computes, by tensor index, with the node that
        computes it: original nodes left on the CPU and whole delegate partitions. Tensors inside
        a partition are allocated but never written, so they are left out."""
        with warnings.catch_warnings():  # "for debugging purposes only": that is what this is
            warnings.simplefilter("ignore", UserWarning)
            interpreter = self._new_interpreter(preserve_all_tensors=True)
        for detail, value in zip(interpreter.get_input_details(), feeds):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        ops = interpreter._get_ops_details()
        outputs = {int(d["index"]) for d in interpreter.get_output_details()}
        partitions = delegate_partitions(ops, outputs)
        replaced = set().union(*partitions.values())
        names = {op["index"]: op["op_name"] for op in ops}
        producers: dict[int, str] = {}
        for op in ops:
            if op["index"] in replaced:
                continue
            delegate = self._delegate_name or "delegate"
            if op["op_name"] == "DELEGATE":
                # With all tensors preserved the delegate takes one node per partition, so this
                # usually names a single operator.
                members = sorted(partitions[op["index"]])
                label = (f"{names[members[0]]} (node {members[0]}) on {delegate}" if len(members) == 1 else
                         f"{delegate} partition of " + ", ".join(f"{names[i]} (node {i})" for i in members))
            else:
                label = f"{op['op_name']} (node {op['index']}) on the CPU kernels"
            for t in op["outputs"]:
                producers[int(t)] = label
        tensors = {}
        for t in producers:
            try:
                tensors[t] = interpreter.get_tensor(t).copy()
            except ValueError:  # a resource or otherwise unreadable tensor
                continue
        order = [int(t) for op in ops if op["op_name"] != "DELEGATE" for t in op["outputs"]]
        tensor_names = {int(d["index"]): d["name"] for d in interpreter.get_tensor_details()}
        return Intermediates("tensors", order=order, producers=producers, tensors=tensors, delegated=bool(partitions),
                             names={t: tensor_names.get(t, str(t)) for t in tensors})

    def precision(self) -> str:
        # Quantized tensors carry scales; a float-I/O int8 model is still an int8 model.
        for detail in self.interpreter.get_tensor_details():
            scales = detail.get("quantization_parameters", {}).get("scales")
            if scales is not None and len(scales) and np.dtype(detail["dtype"]).itemsize == 1:
                return np.dtype(detail["dtype"]).name
        return super().precision()

    def coverage(self) -> Coverage | None:
        outputs = {int(d["index"]) for d in self.interpreter.get_output_details()}
        interpreter = self.interpreter

        def tensor_name(index: int) -> str:
            try:
                return str(interpreter._get_tensor_details(index, 0)["name"])
            except (ValueError, KeyError, TypeError):
                return ""

        return delegate_coverage(interpreter._get_ops_details(), outputs, self._delegate_name or "", tensor_name)


class LiteRTDecoders(DecoderRuntime):
    """Decoder LLMs as litert-torch's generative converter writes them (litert/decoder.py), on the
    default resolver (XNNPACK), as LiteRT's LLM pipelines run them on a CPU."""

    kv_cache = ("static (external kv_cache_k_N / kv_cache_v_N of kv_cache_max_len positions, fed in "
                "and returned by each signature call)")

    def __init__(self, name: str) -> None:
        self.name = name

    def config_of(self, artifact: Path) -> Any:
        """What litert-torch's generative converter writes into the .tflite (its prefill/decode
        signatures: litert/decoder.py); an error naming the file for a .tflite that is no decoder."""
        from .decoder import from_tflite

        return from_tflite(artifact)

    def open(self, path: Path, config: Any, threads: int) -> Decoder:
        from .decoder import LiteRTDecoder

        return LiteRTDecoder(path, config, threads, self.name, True)


class TensorsPairs(QuantPairs):
    """Every tensor of both models on the reference kernels (quant_pair.py)."""

    kind = "int8"

    def open(self, float_model: Path, quant_model: Path) -> QuantPair:
        from .quant_pair import TensorsPair  # the runtime's graph reader, only for triage quant

        return TensorsPair(float_model, quant_model)


class LiteRTBackend(TensorBackend):
    suffix = ".tflite"
    quant_pairs = TensorsPairs()
    device_distributions = ("ai-edge-litert",)  # on a device, whichever LiteRT this host runs

    def __init__(self, name: str, with_delegate: bool) -> None:
        self.name = name
        self.with_delegate = with_delegate
        self.has_delegate = with_delegate
        self.reference_sibling = "litert-ref" if with_delegate else None
        # The reference kernels before the delegate: a delegate's numerics are what is under test.
        self.reference_priority = 30 if with_delegate else 10
        # Decoders on the default resolver only: litert-ref runs none.
        self.decoders = LiteRTDecoders(name) if with_delegate else None
        found = installed_runtime()
        self.runtime_module, self.distribution = (
            (f"{found[0]}.interpreter", found[1]) if found else ("ai_edge_litert.interpreter", "ai-edge-litert"))

    def unavailable_reason(self) -> str | None:
        return None if installed_runtime() else "ai-edge-litert (or tflite-runtime) not installed"

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        module = importlib.import_module(self.runtime_module)
        resolver = (module.OpResolverType.AUTO if self.with_delegate
                    else module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        content = Path(path).read_bytes()
        problem = unusable_artifact(content, Path(path))
        if problem:
            raise BackendError(problem)

        def make(preserve_all_tensors: bool = False):
            return module.Interpreter(model_content=content, num_threads=threads,
                                      experimental_op_resolver_type=resolver,
                                      experimental_preserve_all_tensors=preserve_all_tensors)

        try:
            return LiteRTModel(make, "XNNPACK" if self.with_delegate else None, InputShapes.of(shapes))
        except ValueError as exc:
            # The interpreter's verifier says only "not a valid Flatbuffer buffer": name the file
            # and what its first bytes are.
            if "Flatbuffer" not in str(exc) and "identifier" not in str(exc):  # ai-edge-litert / tflite-runtime
                raise
            if content[4:8] == b"TFL3":
                raise BackendError(f"{path} is not a valid TFLite flatbuffer: it has the TFL3 identifier but "
                                   f"the runtime's verifier refused it ({str(exc).strip()}): truncated or corrupt "
                                   f"({len(content)} bytes); re-export or re-download it") from exc
            raise BackendError(f"{path} is not a TFLite flatbuffer: {str(exc).strip()} (bytes 4-8 are {content[4:8]!r}, "
                               f"a .tflite has b'TFL3'); re-export it") from exc


def backends() -> list[Backend]:
    return [LiteRTBackend("litert", True), LiteRTBackend("litert-ref", False)]
