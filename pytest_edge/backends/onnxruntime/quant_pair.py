"""``pytest-edge triage quant`` for ONNX: a float ``.onnx`` against its QDQ model (QuantizeLinear /
DequantizeLinear pairs around each op, as ``onnxruntime.quantization.quantize_static`` writes it).

Both graphs run on ONNX Runtime's CPU provider with every node output exposed as a graph output and
no graph optimization (``ORT_DISABLE_ALL``), so the QDQ pairs run as written and the quantized
value of each tensor is the output of its DequantizeLinear: float tensor ``t`` is matched with
``t_DequantizeLinear_Output`` where the quantizer wrote one, else with ``t`` itself (graph outputs
keep their names). Weights are matched through their op, which keeps its node name: the float op's
weight initializer against the quantized op's weight, dequantized from its int8 initializer with
its scale and zero point (per tensor, or per ``axis``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendError, EdgeUsageError
from ..base import TensorSpec
from ..quant_pair import (Case, Matching, QuantPair, QuantPairs, QuantParams, TensorPair, WeightPair, case_input,
                          dequantize)

DQ_SUFFIX = "_DequantizeLinear_Output"  # what onnxruntime.quantization names a dequantized tensor
_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
# Operators that onnxruntime's quant_pre_process (its graph optimizer) folds into the layer before
# them: where the quantized graph has none of that type, their float outputs have no counterpart.
_FOLDED_OPS = {"BatchNormalization", "Identity", "Dropout"}
_NOT_QDQ = {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "QGemm", "QAttention", "DynamicQuantizeMatMul"}


class OnnxGraph:
    """One .onnx with every node output exposed, on ONNX Runtime's CPU provider, unoptimized."""

    def __init__(self, path: Path) -> None:
        try:
            import onnx
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendError(f"triage quant of .onnx models needs onnx and onnxruntime ({exc})") from exc
        self.path = path
        if not path.is_file():
            raise BackendError(f"{path}: no such .onnx file")
        try:
            model = onnx.load(str(path))
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception as exc:  # noqa: BLE001 - onnx's own words, with the file
            raise BackendError(f"{path} is not a readable ONNX model: {exc}") from exc
        graph = model.graph
        self.initializers = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
        self.inputs = [i for i in graph.input if i.name not in self.initializers]
        self.nodes = list(graph.node)
        self.producer = {out: node for node in self.nodes for out in node.output if out}
        self.order = [i.name for i in self.inputs] + [out for node in self.nodes for out in node.output
                                                      if out and node.op_type != "Constant"]
        self.outputs = [o.name for o in graph.output]
        types = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output, *graph.input]}
        self.elem_types = {name: t.tensor_type.elem_type for name, t in types.items() if t.HasField("tensor_type")}
        for name in self.order:
            if name not in self.outputs and self.elem_types.get(name):
                graph.output.append(onnx.helper.make_tensor_value_info(name, self.elem_types[name], None))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{path}: onnxruntime-cpu cannot load it with every node output exposed: {exc}") from exc
        self.exposed = [o.name for o in self.session.get_outputs()]

    def specs(self) -> list[TensorSpec]:
        import onnx

        specs = []
        for i in self.inputs:
            dims = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in i.type.tensor_type.shape.dim)
            specs.append(TensorSpec(i.name, dims, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(
                i.type.tensor_type.elem_type)).name))
        return specs

    def run(self, case: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
        feeds = {}
        for position, spec in enumerate(self.specs()):
            value = case_input(case, spec.name, position, spec.shape, len(self.inputs), where, self.path)
            feeds[spec.name] = value.astype(spec.dtype, copy=False)
        try:
            values = dict(zip(self.exposed, self.session.run(None, feeds)))
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.path}: onnxruntime-cpu failed to run it: {exc}") from exc
        return {**{k: v for k, v in values.items() if isinstance(v, np.ndarray) and v.dtype.kind in "biuf"},
                **feeds}

    def quantized_dtype(self, name: str) -> str:
        """The integer type behind a DequantizeLinear's output, else the tensor's own type."""
        import onnx

        node = self.producer.get(name)
        source = node.input[0] if node is not None and node.op_type == "DequantizeLinear" else name
        if source in self.initializers:
            return self.initializers[source].dtype.name
        elem = self.elem_types.get(source)
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name if elem else "float32"

    def writer(self, name: str) -> Any:
        """The node that computes a tensor, through its QuantizeLinear/DequantizeLinear pair."""
        node = self.producer.get(name)
        while node is not None and node.op_type in _QDQ_OPS and node.input:
            node = self.producer.get(node.input[0])
        return node

    def dequantized_weight(self, name: str) -> tuple[np.ndarray, int, int | None] | None:
        """A weight input of an op: (real values, number of scales, per-axis axis) when it is a
        DequantizeLinear of initializers, (values, 1, None) when it is a float initializer."""
        if name in self.initializers:
            return self.initializers[name].astype(np.float64), 1, None
        node = self.producer.get(name)
        if node is None or node.op_type != "DequantizeLinear" \
                or not all(i in self.initializers for i in node.input[:2]):
            return None
        q, scale = self.initializers[node.input[0]], self.initializers[node.input[1]].astype(np.float64)
        zero = (self.initializers[node.input[2]].astype(np.int64) if len(node.input) > 2 and node.input[2]
                else np.zeros_like(scale, dtype=np.int64))
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        params = QuantParams(scale.reshape(-1), zero.reshape(-1), axis % max(q.ndim, 1))
        return dequantize(q, params), int(scale.size), (axis % max(q.ndim, 1)) if scale.size > 1 else None


def _weight_axis(node: Any, ndim: int) -> int:
    """The output-channel axis of an op's weight (input 1)."""
    if node.op_type == "Gemm":
        return 0 if any(a.name == "transB" and a.i for a in node.attribute) else ndim - 1
    if node.op_type == "ConvTranspose":
        return 1
    return 0 if node.op_type == "Conv" else ndim - 1  # MatMul: [in, out]


# Ops whose output channels lie on axis 1 (NCHW, [N, C, L]) and ops whose lie on the last axis
# ([batch, features], [batch, seq, hidden]); the ops between pass their input's layout on.
_CHANNEL_FIRST = {"Conv", "ConvTranspose", "BatchNormalization", "InstanceNormalization", "MaxPool",
                  "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "DepthToSpace", "SpaceToDepth"}
_CHANNEL_LAST = {"MatMul", "Gemm", "LayerNormalization", "Softmax", "Gather", "Attention", "MultiHeadAttention"}


def _channel_axis(graph: OnnxGraph, name: str) -> int:
    """The output-channel axis of tensor ``name``: 1 below a convolution or pooling, the last axis
    below a MatMul/Gemm (a transformer's [batch, seq, hidden] has its channels last, where axis 1
    would pool the channels and split the sequence), found by walking up the first inputs through
    element-wise ops; 1 (NCHW) when nothing upstream says."""
    node = graph.producer.get(name)
    for _ in range(32):
        if node is None:
            break
        if node.op_type in _CHANNEL_FIRST:
            return 1
        if node.op_type in _CHANNEL_LAST:
            return -1
        node = graph.producer.get(node.input[0]) if node.input else None
    return 1


def _weight_pair(fmodel: OnnxGraph, qmodel: OnnxGraph, fnode: Any) -> WeightPair | None:
    if fnode.op_type not in {"MatMul", "Gemm", "Conv", "ConvTranspose"} or len(fnode.input) < 2 \
            or fnode.input[1] not in fmodel.initializers or not fnode.name:
        return None
    qnode = next((n for n in qmodel.nodes if n.name == fnode.name and n.op_type == fnode.op_type), None)
    found = qmodel.dequantized_weight(qnode.input[1]) if qnode is not None and len(qnode.input) > 1 else None
    fweight = fmodel.initializers[fnode.input[1]]
    if found is None or found[0].shape != fweight.shape:
        return None
    values, scales, axis = found
    return WeightPair(fnode.input[1], fweight, values, axis if axis is not None else _weight_axis(fnode, fweight.ndim),
                      scales)


def _folded(fmodel: OnnxGraph, qmodel: OnnxGraph, unmatched: Sequence[str],
            measured_ops: Mapping[str, str]) -> dict[str, list[str]]:
    """The unmatched float tensors that the quantizer folded away, by how: the output of a Conv/Gemm
    whose activation the quantizer fused into it (the row of the activation's tensor, ``Conv+Relu``,
    measures that layer), or of an operator its graph optimizer folds into the layer before it
    (BatchNormalization, where the quantized graph has none)."""
    quant_ops = {n.op_type for n in qmodel.nodes}
    folded: dict[str, list[str]] = {}
    for name in unmatched:
        producer = fmodel.producer.get(name)
        consumers = [n for n in fmodel.nodes if name in n.input]
        if producer is None:
            continue
        if len(consumers) == 1 and "+" in measured_ops.get(consumers[0].output[0], ""):
            how = f"fused with the {consumers[0].op_type} after it ({measured_ops[consumers[0].output[0]]})"
        elif producer.op_type in _FOLDED_OPS and producer.op_type not in quant_ops:
            how = f"{producer.op_type}, folded into the layer before it"
        else:
            continue
        folded.setdefault(how, []).append(name)
    return folded


class QdqPair(QuantPair):
    """A float ``.onnx`` and its QDQ model (see the module's docstring)."""

    def __init__(self, float_model: Path, quant_model: Path) -> None:
        self.float_model, self.quant_model = float_model, quant_model
        self.fmodel, self.qmodel = fmodel, qmodel = OnnxGraph(float_model), OnnxGraph(quant_model)
        operators = sorted({n.op_type for n in qmodel.nodes if n.op_type.startswith("QLinear") or n.op_type in _NOT_QDQ})
        if operators:
            # Their int8 tensors have no DequantizeLinear to read them through, nor the float names:
            # only the graph output would match, and the last layer would be blamed for the first's loss.
            raise EdgeUsageError(f"{quant_model} is not a QDQ model: it computes with {', '.join(operators)} "
                                 "(QuantFormat.QOperator or quantize_dynamic); triage quant compares a float "
                                 "model with its QDQ model: quantize it with quant_format=QuantFormat.QDQ")
        if any(n.op_type in _QDQ_OPS for n in fmodel.nodes) and not any(n.op_type in _QDQ_OPS for n in qmodel.nodes):
            raise EdgeUsageError(f"{float_model} (FLOAT) has QuantizeLinear/DequantizeLinear nodes and {quant_model} "
                                 "(INT8) has none: the two are swapped (triage quant FLOAT INT8)")

    @property
    def float_inputs(self) -> list[TensorSpec]:
        return self.fmodel.specs()

    def match(self, first: Case, where: str) -> Matching:
        fmodel, qmodel = self.fmodel, self.qmodel
        quant_names = set(qmodel.order)
        pairs, unmatched, used = [], [], set()
        for name in fmodel.order:
            match = name + DQ_SUFFIX if name + DQ_SUFFIX in quant_names else name if name in quant_names else None
            fnode = fmodel.producer.get(name)
            if match is None or (fnode is not None and fnode.op_type in _QDQ_OPS):
                unmatched.append(name)
                continue
            used.add(match)
            op = fnode.op_type if fnode is not None else "(input)"
            weight = _weight_pair(fmodel, qmodel, fnode) if fnode is not None and fnode.output[0] == name else None
            qnode = qmodel.writer(match)
            if weight is None and fnode is not None and qnode is not None and qnode.op_type != fnode.op_type:
                # The quantizer fused the op into the one before it (Conv/Gemm + Relu: the Relu is left to
                # the quantized range), which writes this tensor now: its weights are this row's.
                fused = next((n for n in fmodel.nodes if n.name == qnode.name and n.op_type == qnode.op_type), None)
                weight = _weight_pair(fmodel, qmodel, fused) if fused is not None else None
                op = f"{qnode.op_type}+{op}" if weight is not None else op
            pairs.append(TensorPair(name, op, match, qmodel.quantized_dtype(match), name, match,
                                    _channel_axis(fmodel, name), weight, name in fmodel.outputs))
        if all(pair.op == "(input)" for pair in pairs):
            raise EdgeUsageError(f"{self.float_model} and {self.quant_model} share no layer's tensor name (besides "
                                 "their inputs): two different networks, or not a QDQ model of this one")
        # Besides the QDQ pairs' own tensors and the float values they quantize (matched through their DQ output).
        qdq_only = [n for n in qmodel.order if n not in used and n + DQ_SUFFIX not in used
                    and not (n in qmodel.producer and qmodel.producer[n].op_type in _QDQ_OPS)
                    and not any(n in node.input for node in qmodel.nodes if node.op_type == "QuantizeLinear")]
        return Matching(pairs, unmatched, qdq_only)

    def run(self, case: Case, where: str) -> tuple[dict, dict]:
        return self.fmodel.run(case, where), self.qmodel.run(case, where)

    def folded(self, unmatched: Sequence[str], measured_ops: Mapping[str, str]) -> dict[str, list[str]]:
        return _folded(self.fmodel, self.qmodel, unmatched, measured_ops)


class QdqPairs(QuantPairs):
    """A float .onnx against its QDQ model (``OrtBackend.quant_pairs``)."""

    kind = "QDQ"

    def open(self, float_model: Path, quant_model: Path) -> QuantPair:
        return QdqPair(float_model, quant_model)
