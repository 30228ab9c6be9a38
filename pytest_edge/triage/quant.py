"""Per-layer quantization loss between a float model and a quantized model of the same network
(``pytest-edge triage quant``): ``.tflite`` pairs here, ``.onnx`` (float vs QDQ) in quant_onnx.py,
``.pte`` (through ETDump) in quant_pte.py; quant_layers.py measures, quant_report.py prints.

LiteRT pairs run on the reference kernels with every intermediate tensor kept, so the values are
the graph's own and not a delegate's. Tensors are matched by name (converters keep the float
graph's names when they quantize it), quantized tensors are dequantized with their own scale and
zero point (per tensor or per axis), and each matched tensor gets, in the float graph's order, an
SNR, a cosine similarity and the largest absolute difference on the worst of several inputs, its SNR
per output channel, and for an op with weights, its float weights against the dequantized int8 ones.
The first layer with any of these below a threshold is where quantization starts to hurt.

This module imports neither pytest nor TensorFlow: LiteRT (``ai-edge-litert`` or ``tflite-runtime``)
and NumPy are enough for a ``.tflite`` pair.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backends import TensorSpec, all_backends, format_backend
from ..errors import EdgeError, EdgeUsageError
from ..accuracy.inputs import DEFAULT_SEED, generate_case
from .quant_inputs import DEFAULT_CASES, case_input, choose_inputs, load_inputs, random_cases, unstack
from .quant_layers import LayerLoss, TensorPair, WeightPair, measure_layers
from .quant_numbers import QuantParams, dequantize, quantize
from .quant_report import DEFAULT_MIN_SNR_DB, QuantReport
from .tflite_graph import INPUT_OP, WEIGHT_AXIS, GraphTensor, TfliteGraph, match_in_order, match_tensors

_QUANTIZED_KINDS = {np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)}

__all__ = ["DEFAULT_MIN_SNR_DB", "LayerLoss", "QuantParams", "QuantReport", "compare_models", "dequantize",
           "load_inputs", "main", "quantize", "random_inputs"]


# ---------------------------------------------------------------- inputs


def random_inputs(float_model: Path | str, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """One input case from the float model's signature: standard normal floats, small integers."""
    return _random_inputs(TfliteGraph(Path(float_model)), seed)


def _random_inputs(model: TfliteGraph, seed: int) -> dict[str, np.ndarray]:  # one case
    return generate_case([TensorSpec(t.name, t.shape, t.dtype.name) for t in model.inputs], {}, seed)


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


# ---------------------------------------------------------------- the comparison


def _real(values: np.ndarray, tensor: GraphTensor) -> np.ndarray:
    if tensor.params is not None and tensor.dtype.kind in "iu":
        return dequantize(values, tensor.params)
    return values.astype(np.float64)


def compare_models(float_model: Path | str, quant_model: Path | str,
                   inputs: Mapping[str, np.ndarray] | Sequence[tuple[str, Mapping[str, np.ndarray]]] | None = None,
                   min_snr_db: float = DEFAULT_MIN_SNR_DB, seed: int = DEFAULT_SEED,
                   inputs_origin: str = "the inputs", cases: int = DEFAULT_CASES) -> QuantReport:
    """Run both models on the same inputs and compare every tensor they share by name, per input
    (the worst decides), per channel, and their weights. ``inputs``: one case, or labelled cases;
    None: ``cases`` random cases from the float signature, seeds ``seed``, ``seed + 1``, ...
    ``.tflite`` pairs run on LiteRT, ``.onnx`` (float and QDQ) on ONNX Runtime, ``.pte`` (not
    delegated) on ExecuTorch with ETDump."""
    float_model, quant_model = Path(float_model), Path(quant_model)
    method = PAIRS[_pair_method(float_model, quant_model)]
    labelled = [(inputs_origin, inputs)] if isinstance(inputs, Mapping) else None if inputs is None else list(inputs)
    if method.compare is not None:
        module, _, function = method.compare.partition(":")
        compare = getattr(importlib.import_module(module, __package__), function)
        return compare(float_model, quant_model, labelled, min_snr_db, seed, inputs_origin, cases)
    return _compare_tensors(float_model, quant_model, labelled, min_snr_db, seed, inputs_origin, cases)


def _compare_tensors(float_model: Path, quant_model: Path, labelled: Sequence[tuple[str, Mapping[str, np.ndarray]]] | None,
                     min_snr_db: float, seed: int, inputs_origin: str, cases: int) -> QuantReport:
    """The ``"tensors"`` pair: both graphs on the reference kernels, every tensor kept (tflite_graph.py)."""
    fmodel, qmodel = TfliteGraph(float_model), TfliteGraph(quant_model)
    if _quantized(fmodel) and not _quantized(qmodel):
        raise EdgeUsageError(f"{float_model} (FLOAT) has int8 tensors and {quant_model} (INT8) has none: "
                             "the two are swapped (triage quant FLOAT INT8)")
    if labelled is None:
        # Both sides get the float signature's cases: a quantized model of another shape is another network.
        specs = [TensorSpec(t.name, t.shape, t.dtype.name) for t in fmodel.inputs]
        labelled = random_cases(specs, cases, seed)
        inputs_origin = f"random from the signature of {fmodel.path}"
    else:
        labelled = unstack(labelled, [TensorSpec(t.name, t.shape, t.dtype.name) for t in fmodel.inputs])
    # One run first: a weight that an op computes (a float16 weight's DEQUANTIZE) has its value only then.
    fmodel.run(_feeds(fmodel, labelled[0][1], inputs_origin))
    qmodel.run(_feeds(qmodel, labelled[0][1], inputs_origin))
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
        raise EdgeUsageError(f"{float_model} and {quant_model} share no layer's tensor name (besides "
                             "their inputs): two different networks, or a converter renamed every tensor")

    ftensors = {t.index: t for t in fmodel.activations}
    qtensors = {t.index: t for t in qmodel.activations}

    def run(case: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
        fvalues = fmodel.run(_feeds(fmodel, case, inputs_origin))
        qvalues = qmodel.run(_feeds(qmodel, case, inputs_origin))
        return ({i: _real(v, ftensors[i]) for i, v in fvalues.items() if i in ftensors},
                {i: _real(v, qtensors[i]) for i, v in qvalues.items() if i in qtensors})

    rows, losses = measure_layers(pairs, labelled, run, min_snr_db)
    matched = {row.tensor for row in rows}
    unmatched += [p.tensor or "?" for p in pairs if p.tensor not in matched]
    only_quant = [t.name or f"#{t.index}" for t in qmodel.activations if t.index not in used]
    matched_by = f"by name, {by_order} by graph order (same op and shape)" if by_order else "by name"
    return QuantReport(float_model, quant_model, rows, min_snr_db, unmatched, only_quant, losses, inputs_origin,
                       matched_by)


def _matches(fmodel: TfliteGraph, qmodel: TfliteGraph) -> tuple[list[tuple[GraphTensor, GraphTensor | None]], int]:
    """Tensors matched by name; when a layer matched and others did not, the rest by graph order
    (match_in_order), and how many were."""
    matches = match_tensors(fmodel.activations, qmodel.activations)
    named = {q.index for _, q in matches if q is not None}
    missing = [f for f, q in matches if q is None and not _shape_arithmetic(f)]
    if not missing or all(f.op == INPUT_OP for f, q in matches if q is not None):
        return matches, 0  # all matched; or none but the inputs: another network (refused below)
    free = [q for q in qmodel.activations if q.index not in named and q.op not in ("QUANTIZE", "DEQUANTIZE")
            and not _shape_arithmetic(q)]
    extra = match_in_order(missing, free)
    return [(f, q if q is not None else extra.get(f.index)) for f, q in matches], len(extra)


def _shape_arithmetic(tensor: GraphTensor) -> bool:
    return tensor.op != INPUT_OP and tensor.dtype.kind in "iub" and tensor.params is None


def _quantized(model: TfliteGraph) -> bool:
    return any(t.dtype in _QUANTIZED_KINDS and t.params is not None for t in model.activations)


@dataclass(frozen=True)
class PairMethod:
    """How triage quant compares a float and a quantized artifact of one format: a backend names one
    (``Backend.quant_pair``) for its format."""

    quantized: str  # what the quantized model of such a pair is, in words ("int8", "QDQ")
    compare: str | None  # "module:function" (relative to this package) with compare_models' arguments; None: here


# In the order the formats are listed in messages. "tensors": every tensor on the reference kernels;
# "qdq": float against QuantizeLinear/DequantizeLinear pairs; "etdump": the runtime's record of each call.
PAIRS = {"tensors": PairMethod("int8", None), "qdq": PairMethod("QDQ", ".quant_onnx:compare_onnx_models"),
         "etdump": PairMethod("int8", ".quant_pte:compare_pte_models")}


def pair_formats() -> dict[str, str]:
    """{artifact suffix: pair method} of the formats triage quant compares, in PAIRS' order: each
    method's format is that of the first registered backend naming it (``Backend.quant_pair``)."""
    named = {}
    for backend in all_backends().values():
        if backend.quant_pair in PAIRS and backend.quant_pair not in named.values():
            named.setdefault(backend.suffix, backend.quant_pair)
    return dict(sorted(named.items(), key=lambda item: list(PAIRS).index(item[1])))


def pairs_help() -> str:
    """The formats compared, with what the quantized one is where that is not plain int8: ".tflite,
    QDQ .onnx, .pte"."""
    return ", ".join(("" if PAIRS[method].quantized == "int8" else PAIRS[method].quantized + " ") + suffix
                     for suffix, method in pair_formats().items())


def _or_list(items: Sequence[str]) -> str:
    return ", ".join(items[:-1]) + f" or {items[-1]}" if len(items) > 1 else "".join(items)


def _pair_method(float_model: Path, quant_model: Path) -> str:
    kinds = {float_model.suffix.lower(), quant_model.suffix.lower()}
    if len(kinds) > 1:
        raise EdgeUsageError(f"{float_model} and {quant_model} are not the same format: triage quant compares "
                             f"a float and a quantized model of one format ({_or_list(list(pair_formats()))})")
    backend = format_backend(Path(float_model.name.lower()))
    if backend is None or backend.quant_pair not in PAIRS:
        raise EdgeUsageError(f"{float_model}: triage quant compares a float and a quantized model of "
                             f"{_or_list(list(pair_formats()))}, not {float_model.suffix or 'a file without a suffix'}")
    return backend.quant_pair


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


# ---------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``pytest-edge triage quant`` (for cli.py's sub-parser)."""
    formats = pair_formats()
    parser.add_argument("float_model", metavar="FLOAT", help=f"the float model ({_or_list(list(formats))})")
    parser.add_argument("quant_model", metavar="INT8", help="the quantized model of the same network ("
                        + ", ".join(f"{PAIRS[method].quantized} {suffix}" for suffix, method in formats.items()) + ")")
    parser.add_argument("--min-snr-db", type=float, default=DEFAULT_MIN_SNR_DB,
                        help="name the first layer below this SNR (default %(default)s dB)")
    parser.add_argument("--inputs", metavar="CASE.npz|GOLDEN_DIR",
                        help="inputs by name: a case .npz (a golden case file works) or a golden folder "
                             "(every case); default: the float model's golden under --golden-dir, else random")
    parser.add_argument("--golden-dir", default="golden",
                        help="where the float model's golden folder is looked for (default: %(default)s)")
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES,
                        help="how many random cases when there are no golden inputs (default %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the first random case")


def run_parsed(args: argparse.Namespace) -> int:
    """Print the table, the inputs, the matching summary and the verdict; 2 on bad input."""
    try:
        if not math.isfinite(args.min_snr_db):
            raise EdgeUsageError(f"--min-snr-db must be a finite number of dB, got {args.min_snr_db}")
        chosen = choose_inputs(args.inputs, Path(args.golden_dir) if args.golden_dir else None,
                               Path(args.float_model))
        inputs, origin = chosen if chosen is not None else (None, "the inputs")
        report = compare_models(args.float_model, args.quant_model, inputs, args.min_snr_db, args.seed,
                                inputs_origin=origin, cases=args.cases)
    except EdgeError as exc:
        print(f"pytest-edge triage quant: error: {exc}", file=sys.stderr)
        return 2
    print(report.format_table())
    print(report.inputs_line())
    print(report.matching_line())
    print(report.verdict())
    if report.foreign_weights is not None:
        print(f"pytest-edge triage quant: error: {report.verdict()}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    """``pytest-edge triage quant FLOAT INT8 [--min-snr-db 20] [--inputs case.npz|golden/model]``."""
    parser = argparse.ArgumentParser(prog="pytest-edge triage quant",
                                     description="per-layer quantization loss of INT8 against FLOAT")
    add_arguments(parser)
    return run_parsed(parser.parse_args(argv))
