"""``pytest-edge triage quant`` for LiteRT: a float ``.tflite`` against its
int8 ``.tflite``, both on LiteRT's reference kernels with every intermediate tensor kept (the
graph's own values, not a delegate's). Tensors are matched by name (converters keep the float
graph's names when they quantize it), else by graph order; quantized tensors are dequantized with
their own scale and zero point (per tensor or per axis); an op with weights gets its float weights
against the dequantized int8 ones.

LiteRT (``ai-edge-litert`` or ``tflite-runtime``) and NumPy are enough: no TensorFlow."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendError, EdgeUsageError
from ..base import TensorSpec
from ..quant_pair import Case, Matching, QuantPair, QuantParams, TensorPair, WeightPair, case_input, dequantize, quantize
from .details import QuantizationParameters, TensorDetail
from .runtime import interpreter_module

INPUT_OP = "(input)"  # the "producing op" of a graph input
# Ops whose input 1 is a weight tensor, with that tensor's output-channel axis (when per-tensor).
WEIGHT_AXIS = {"FULLY_CONNECTED": 0, "CONV_2D": 0, "CONV_3D": 4, "DEPTHWISE_CONV_2D": 3, "TRANSPOSE_CONV": 0}


_QUANTIZED_KINDS = {np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)}


def quant_params(details: TensorDetail) -> QuantParams | None:
    """A tensor's quantization from one entry of ``Interpreter.get_tensor_details()``; None for an
    unquantized tensor."""
    params: QuantizationParameters = details.get("quantization_parameters") or {}
    scales = np.asarray(params.get("scales", []), dtype=np.float64)
    if scales.size == 0:
        return None
    zero_points = np.asarray(params.get("zero_points", []), dtype=np.int64)
    if zero_points.size == 0:
        zero_points = np.zeros_like(scales, dtype=np.int64)
    return QuantParams(scales, zero_points, int(params.get("quantized_dimension", 0)))


def _interpreter_module() -> Any:
    """LiteRT's interpreter module, as the LiteRT backend chooses it (ai-edge-litert, else tflite-runtime)."""
    module = interpreter_module()
    if module is None:
        raise BackendError("pytest-edge triage quant needs LiteRT: pip install ai-edge-litert")
    return module


@dataclass(frozen=True)
class GraphTensor:
    index: int
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    params: QuantParams | None
    op: str  # producing op, or INPUT_OP


class TfliteGraph:
    """One .tflite on LiteRT's reference kernels, every tensor preserved."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise BackendError(f"{path}: no such .tflite file")
        head = path.read_bytes()[:8]
        if len(head) < 8 or head[4:8] != b"TFL3":  # the flatbuffer file identifier of a .tflite
            raise BackendError(f"{path} is not a .tflite model (no TFL3 flatbuffer identifier)")
        runtime = _interpreter_module()
        try:
            # BUILTIN_REF: no XNNPACK, so each intermediate is computed and kept by the graph itself.
            self.interpreter = runtime.Interpreter(
                model_path=str(path), experimental_preserve_all_tensors=True,
                experimental_op_resolver_type=runtime.OpResolverType.BUILTIN_REF)
            self._resize_dynamic_inputs()
            self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"{path}: LiteRT cannot load it: {exc}") from exc
        details = {d["index"]: d for d in self.interpreter.get_tensor_details()}
        self.inputs = [self._tensor(details[d["index"]], INPUT_OP) for d in self.interpreter.get_input_details()]
        # Graph order: inputs, then each op's outputs in execution order.
        self.activations: list[GraphTensor] = list(self.inputs)
        self.weights: dict[int, GraphTensor] = {}  # output tensor index -> the weight its op reads
        # A float-I/O int8 model quantizes its float input inside (a QUANTIZE op, "tfl.quantize"):
        # input tensor index -> that op's output, the input as the int8 layers see it.
        self.quantized_inputs: dict[int, GraphTensor] = {}
        input_indices = {t.index for t in self.inputs}
        for op in self.interpreter._get_ops_details():  # the only public-ish view of the op list
            inputs = [int(i) for i in op["inputs"]]
            for index in op["outputs"]:
                if int(index) in details:
                    self.activations.append(self._tensor(details[int(index)], op["op_name"]))
                    if op["op_name"] in WEIGHT_AXIS and len(inputs) > 1 and inputs[1] in details:
                        self.weights[int(index)] = self._tensor(details[inputs[1]], op["op_name"])
                    elif op["op_name"] == "DEQUANTIZE" and inputs and inputs[0] in self.weights:
                        self.weights[int(index)] = self.weights[inputs[0]]  # an int8 model's float output
                    elif op["op_name"] == "QUANTIZE" and inputs and inputs[0] in input_indices:
                        self.quantized_inputs.setdefault(inputs[0], self.activations[-1])
        self.outputs = {int(d["index"]) for d in self.interpreter.get_output_details()}

    def _resize_dynamic_inputs(self) -> None:
        for d in self.interpreter.get_input_details():
            signature = d.get("shape_signature")
            if signature is not None and any(int(s) < 0 for s in signature):
                self.interpreter.resize_tensor_input(d["index"], [max(int(s), 1) for s in signature])

    @staticmethod
    def _tensor(details: TensorDetail, op: str) -> GraphTensor:
        return GraphTensor(int(details["index"]), str(details["name"]), np.dtype(details["dtype"]),
                       tuple(int(s) for s in details["shape"]), quant_params(details), op)

    def value(self, tensor: GraphTensor) -> np.ndarray | None:
        """A tensor's current value (a weight, or an intermediate after run()); None if it has none."""
        try:
            return np.array(self.interpreter.get_tensor(tensor.index))
        except ValueError:
            return None

    def run(self, feeds: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        for tensor, value in zip(self.inputs, feeds):
            self.interpreter.set_tensor(tensor.index, value)
        try:
            self.interpreter.invoke()
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"{self.path}: LiteRT failed to run it: {exc}") from exc
        values = {}
        for tensor in self.activations:
            try:
                values[tensor.index] = np.array(self.interpreter.get_tensor(tensor.index))
            except ValueError:  # e.g. a resource handle with no data: nothing to compare
                continue
        return values


# ---------------------------------------------------------------- matching by name

# Suffixes a converter adds to a tensor it rewrites while quantizing (or ':0' from TF).
_SUFFIX = re.compile(r"(:0|_requantized|_quantized|_dequantized|_int8|_uint8|_int16)$")


def _name_key(name: str, scope: str = "") -> frozenset[str]:
    """A fused name ``Relu;add;MatMul`` as a set of parts without converter suffixes (and without
    ``scope`` where a part starts with it), so the same fused op matches when the parts come in
    another order or gained a suffix."""
    parts = (part.strip() for part in name.split(";") if part.strip())
    return frozenset(_SUFFIX.sub("", part[len(scope):] if scope and part.startswith(scope) else part)
                     for part in parts)


def match_tensors(float_tensors: Sequence[GraphTensor],
                  quant_tensors: Sequence[GraphTensor]) -> list[tuple[GraphTensor, GraphTensor | None]]:
    """Each float tensor with its quantized counterpart: the same name, else the same normalised
    name when exactly one tensor on each side has it; shapes must agree."""
    by_name = {t.name: t for t in quant_tensors if t.name}
    used: set[int] = set()
    pairs: dict[int, GraphTensor] = {}
    for t in float_tensors:
        other = by_name.get(t.name) if t.name else None
        if other is not None and other.shape == t.shape:
            pairs[t.index] = other
            used.add(other.index)
    keys: dict[frozenset[str], list[GraphTensor]] = {}
    for t in quant_tensors:
        if t.index not in used and t.name:
            keys.setdefault(_name_key(t.name), []).append(t)
    float_keys: dict[frozenset[str], list[GraphTensor]] = {}
    for t in float_tensors:
        if t.index not in pairs and t.name:
            float_keys.setdefault(_name_key(t.name), []).append(t)
    for key, tensors in float_keys.items():
        candidates = keys.get(key, [])
        if key and len(tensors) == 1 and len(candidates) == 1 and candidates[0].shape == tensors[0].shape:
            pairs[tensors[0].index] = candidates[0]
            used.add(candidates[0].index)
    # Last, without each model's own scope: Keras names a model per trace ("functional_1/",
    # "functional_2_1/"), so a float and an int8 model converted apart name every layer differently.
    float_scope, quant_scope = _model_scope(float_tensors), _model_scope(quant_tensors)
    if float_scope and quant_scope and float_scope != quant_scope:  # both scoped (one network, traced twice)
        scoped: dict[frozenset[str], list[GraphTensor]] = {}
        for t in quant_tensors:
            if t.index not in used and t.name:
                scoped.setdefault(_name_key(t.name, quant_scope), []).append(t)
        float_scoped: dict[frozenset[str], list[GraphTensor]] = {}
        for t in float_tensors:
            if t.index not in pairs and t.name:
                float_scoped.setdefault(_name_key(t.name, float_scope), []).append(t)
        for key, tensors in float_scoped.items():
            candidates = scoped.get(key, [])
            if key and len(tensors) == 1 and len(candidates) == 1 and candidates[0].shape == tensors[0].shape:
                pairs[tensors[0].index] = candidates[0]
                used.add(candidates[0].index)
    return [(t, pairs.get(t.index)) for t in float_tensors]


def match_in_order(missing: Sequence[GraphTensor], free: Sequence[GraphTensor]) -> dict[int, GraphTensor]:
    """The float tensors that no name matched, paired in graph order with the free quantized ones of
    the same op and shape (a network rebuilt or re-traced, so that every name differs): all of
    them, or none (an order that does not fit is another network, not a renaming)."""
    found: dict[int, GraphTensor] = {}
    j = 0
    for t in missing:
        while j < len(free) and (free[j].op, free[j].shape) != (t.op, t.shape):
            j += 1
        if j == len(free):
            return {}
        found[t.index] = free[j]
        j += 1
    return found


def _model_scope(tensors: Sequence[GraphTensor]) -> str:
    """The first path segment that most ``;``-parts of the tensors' names share ("functional_1/"),
    when it is in at least half of the parts that have one; else ""."""
    firsts = [part.strip().split("/", 1)[0] + "/" for t in tensors for part in t.name.split(";") if "/" in part]
    if not firsts:
        return ""
    common = max(set(firsts), key=firsts.count)
    return common if firsts.count(common) * 2 >= len(firsts) else ""


# ---------------------------------------------------------------- the pair


class TensorsPair(QuantPair):
    """A float and an int8 ``.tflite`` of one network, both on the reference kernels, every tensor kept."""

    def __init__(self, float_model: Path, quant_model: Path) -> None:
        self.float_model, self.quant_model = float_model, quant_model
        self.fmodel, self.qmodel = TfliteGraph(float_model), TfliteGraph(quant_model)
        if _quantized(self.fmodel) and not _quantized(self.qmodel):
            raise EdgeUsageError(f"{float_model} (FLOAT) has int8 tensors and {quant_model} (INT8) has none: "
                                 "the two are swapped (triage quant FLOAT INT8)")
        self._ftensors = {t.index: t for t in self.fmodel.activations}
        self._qtensors = {t.index: t for t in self.qmodel.activations}

    @property
    def float_inputs(self) -> list[TensorSpec]:
        return [TensorSpec(t.name, t.shape, t.dtype.name) for t in self.fmodel.inputs]

    def match(self, first: Case, where: str) -> Matching:
        fmodel, qmodel = self.fmodel, self.qmodel
        # One run first: a weight that an op computes (a float16 weight's DEQUANTIZE) has its value only then.
        fmodel.run(_feeds(fmodel, first, where))
        qmodel.run(_feeds(qmodel, first, where))
        pairs, unmatched, used = [], [], set()
        matches, by_order = _matches(fmodel, qmodel)
        for ftensor, qtensor in matches:
            if _shape_arithmetic(ftensor) and (qtensor is None or _shape_arithmetic(qtensor)):
                used.update([qtensor.index] if qtensor is not None else [])
                continue  # integers on both sides (SHAPE, STRIDED_SLICE, PACK of a Flatten): not quantized
            if qtensor is None:
                unmatched.append(ftensor.name or f"#{ftensor.index}")
                continue
            used.add(qtensor.index)
            if ftensor.op == INPUT_OP and qtensor.index in qmodel.quantized_inputs:
                # A float input of an int8 model is quantized inside: compare what its layers read.
                qtensor = qmodel.quantized_inputs[qtensor.index]
                used.add(qtensor.index)
            pairs.append(TensorPair(ftensor.name, ftensor.op, qtensor.name, qtensor.dtype.name,
                                    ftensor.index, qtensor.index,
                                    -1, _weights(fmodel, qmodel, ftensor, qtensor), ftensor.index in fmodel.outputs))
        if all(pair.op == INPUT_OP for pair in pairs):  # inputs called "x" on both sides prove nothing
            raise EdgeUsageError(f"{self.float_model} and {self.quant_model} share no layer's tensor name (besides "
                                 "their inputs): two different networks, or a converter renamed every tensor")
        only_quant = [t.name or f"#{t.index}" for t in qmodel.activations if t.index not in used]
        matched_by = f"by name, {by_order} by graph order (same op and shape)" if by_order else "by name"
        return Matching(pairs, unmatched, only_quant, matched_by)

    def run(self, case: Case, where: str) -> tuple[dict, dict]:
        fvalues = self.fmodel.run(_feeds(self.fmodel, case, where))
        qvalues = self.qmodel.run(_feeds(self.qmodel, case, where))
        return ({i: _real(v, self._ftensors[i]) for i, v in fvalues.items() if i in self._ftensors},
                {i: _real(v, self._qtensors[i]) for i, v in qvalues.items() if i in self._qtensors})


def _feeds(model: TfliteGraph, case: Mapping[str, np.ndarray], where: str) -> list[np.ndarray]:
    """The case as the model's inputs want them, by name, else by position; real values are
    quantized for a model whose inputs are quantized."""
    feeds = []
    for position, t in enumerate(model.inputs):
        value = case_input(case, t.name, position, t.shape, len(model.inputs), where, model.path)
        if t.params is not None and t.dtype in _QUANTIZED_KINDS and value.dtype.kind == "f":
            value = quantize(value, t.params, t.dtype)
        feeds.append(value.astype(t.dtype, copy=False))
    return feeds


def _real(values: np.ndarray, tensor: GraphTensor) -> np.ndarray:
    if tensor.params is not None and tensor.dtype.kind in "iu":
        return dequantize(values, tensor.params)
    return values.astype(np.float64)


def _matches(fmodel: TfliteGraph, qmodel: TfliteGraph) -> tuple[list[tuple[GraphTensor, GraphTensor | None]], int]:
    """Tensors matched by name; when a layer matched and others did not, the rest by graph order
    (match_in_order), and how many were."""
    matches = match_tensors(fmodel.activations, qmodel.activations)
    named = {q.index for _, q in matches if q is not None}
    missing = [f for f, q in matches if q is None and not _shape_arithmetic(f)]
    if not missing or all(f.op == INPUT_OP for f, q in matches if q is not None):
        return matches, 0  # all matched; or none but the inputs: another network (refused by match)
    free = [q for q in qmodel.activations if q.index not in named and q.op not in ("QUANTIZE", "DEQUANTIZE")
            and not _shape_arithmetic(q)]
    extra = match_in_order(missing, free)
    return [(f, q if q is not None else extra.get(f.index)) for f, q in matches], len(extra)


def _shape_arithmetic(tensor: GraphTensor) -> bool:
    return tensor.op != INPUT_OP and tensor.dtype.kind in "iub" and tensor.params is None


def _quantized(model: TfliteGraph) -> bool:
    return any(t.dtype in _QUANTIZED_KINDS and t.params is not None for t in model.activations)


def _weights(fmodel: TfliteGraph, qmodel: TfliteGraph, ftensor: GraphTensor, qtensor: GraphTensor) -> WeightPair | None:
    """The weight the op that writes ``ftensor`` reads, against its quantized counterpart (the
    weight of the op that writes ``qtensor``), dequantized with its own scales."""
    fweight, qweight = fmodel.weights.get(ftensor.index), qmodel.weights.get(qtensor.index)
    if fweight is None or qweight is None or fweight.shape != qweight.shape:
        return None
    fvalues, qvalues = fmodel.value(fweight), qmodel.value(qweight)
    if fvalues is None or qvalues is None or fvalues.dtype.kind != "f":
        return None
    params = qweight.params
    scales = 1 if params is None else int(params.scales.size)
    axis = params.axis if params is not None and scales > 1 else WEIGHT_AXIS[qweight.op]
    return WeightPair(qweight.name or fweight.name, fvalues, _real(qvalues, qweight), axis % max(fvalues.ndim, 1),
                      scales)
