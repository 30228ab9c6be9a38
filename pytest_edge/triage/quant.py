"""Per-layer quantization loss between a float ``.tflite`` and a quantized ``.tflite`` of the same
network (``pytest-edge triage quant``).

Both models run on LiteRT's reference kernels with every intermediate tensor kept, so the values are
the graph's own and not a delegate's. Tensors are matched by name (converters keep the float
graph's names when they quantize it), quantized tensors are dequantized with their own scale and
zero point (per tensor or per axis), and each matched tensor gets an SNR, a cosine similarity and
the largest absolute difference, in the float graph's order. The first tensor whose SNR falls below
a threshold is where quantization starts to hurt.

This module imports neither pytest nor TensorFlow: LiteRT (``ai-edge-litert`` or ``tflite-runtime``)
and NumPy are enough.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends import TensorSpec
from ..errors import EdgeError, EdgeUsageError
from ..inputs import DEFAULT_SEED, generate_case
from ..metrics import cosine, max_abs_diff, snr_db
from .quant_numbers import QuantParams, dequantize, quantize
from .tflite_graph import INPUT_OP, GraphTensor, TfliteGraph, match_tensors

DEFAULT_MIN_SNR_DB = 20.0
_QUANTIZED_KINDS = {np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)}
_NAME_WIDTH = 56  # longer names are shortened in the table (the verdict line keeps them whole)

__all__ = ["DEFAULT_MIN_SNR_DB", "LayerLoss", "QuantParams", "QuantReport", "compare_models", "dequantize",
           "load_inputs", "main", "quantize", "random_inputs"]


# ---------------------------------------------------------------- the result


@dataclass(frozen=True)
class LayerLoss:
    """One matched tensor: its float name, the op that writes it in the float graph, and the
    quantized graph's value (dequantized) against the float one."""

    tensor: str
    op: str
    quant_tensor: str  # its name in the quantized model (differs only when matched after normalising)
    quant_dtype: str
    snr_db: float
    cosine: float
    max_abs_diff: float


@dataclass
class QuantReport:
    """Per-layer loss of ``quant_model`` against ``float_model``, in the float graph's order."""

    float_model: Path
    quant_model: Path
    rows: list[LayerLoss]
    min_snr_db: float = DEFAULT_MIN_SNR_DB
    unmatched_float: list[str] = field(default_factory=list)  # float tensors with no counterpart
    unmatched_quant: list[str] = field(default_factory=list)  # quantized-only tensors (QUANTIZE, ...)

    @property
    def matched(self) -> int:
        return len(self.rows)

    @property
    def first_below(self) -> LayerLoss | None:
        """The first tensor, in graph order, whose SNR is below ``min_snr_db``."""
        return next((row for row in self.rows if row.snr_db < self.min_snr_db), None)

    def matching_line(self) -> str:
        line = (f"matched {self.matched} of {self.matched + len(self.unmatched_float)} float tensors "
                f"by name")
        if self.unmatched_float:
            line += f"; no counterpart for {len(self.unmatched_float)}: " + ", ".join(self.unmatched_float)
        if self.unmatched_quant:
            line += (f"; {len(self.unmatched_quant)} only in the quantized model: "
                     + ", ".join(self.unmatched_quant))
        return line

    def verdict(self) -> str:
        first = self.first_below
        threshold = _number(self.min_snr_db)
        if first is None:
            return f"every matched layer at or above {threshold} dB"
        return f"first layer below {threshold} dB: {first.tensor} ({first.op}), SNR {_number(first.snr_db)} dB"

    def format_table(self) -> str:
        """The rows as a plain-text table; rows below the threshold are marked with ``<``."""
        header = ["#", "tensor", "op", "dtype", "SNR dB", "cosine", "max |Δ|", ""]
        body = [[str(i), _shorten(row.tensor), row.op, row.quant_dtype, _number(row.snr_db),
                 f"{row.cosine:.4f}", f"{row.max_abs_diff:.4g}",
                 "<" if row.snr_db < self.min_snr_db else ""]
                for i, row in enumerate(self.rows)]
        widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
        right = {0, 4, 5, 6}  # numbers are right-aligned

        def fmt(cells: list[str]) -> str:
            return "  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                             for c, (cell, w) in enumerate(zip(cells, widths))).rstrip()

        lines = [f"float: {self.float_model}", f"quantized: {self.quant_model}", fmt(header),
                 fmt(["-" * w for w in widths[:-1]] + [""])]
        lines += [fmt(cells) for cells in body]
        return "\n".join(lines)


def _number(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.1f}" if abs(value - round(value)) > 1e-9 else str(round(value))


def _shorten(name: str) -> str:
    return name if len(name) <= _NAME_WIDTH else name[: _NAME_WIDTH - 1] + "…"


# ---------------------------------------------------------------- inputs


def random_inputs(float_model: Path | str, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """One input case from the float model's signature: standard normal floats, small integers."""
    return _random_inputs(TfliteGraph(Path(float_model)), seed)


def _random_inputs(model: TfliteGraph, seed: int) -> dict[str, np.ndarray]:
    return generate_case([TensorSpec(t.name, t.shape, t.dtype.name) for t in model.inputs], {}, seed)


def load_inputs(path: Path | str) -> dict[str, np.ndarray]:
    """Inputs from an .npz: arrays named after the inputs, or a golden case (``inputs/<name>``)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: np.array(archive[k]) for k in archive.files}
    except FileNotFoundError as exc:
        raise EdgeUsageError(f"{path}: no such inputs file") from exc
    except (ValueError, OSError) as exc:
        raise EdgeUsageError(f"{path} is not a readable .npz of inputs: {exc}") from exc
    if any(k.startswith("inputs/") for k in arrays):
        arrays = {k[len("inputs/"):]: v for k, v in arrays.items() if k.startswith("inputs/")}
    return arrays


def _feeds(model: TfliteGraph, case: Mapping[str, np.ndarray], where: str) -> list[np.ndarray]:
    """The case as the model's inputs want them, by name, else by position; real values are
    quantized for a model whose inputs are quantized."""
    names = list(case)
    feeds = []
    for position, t in enumerate(model.inputs):
        if t.name in case:
            value = np.asarray(case[t.name])
        elif len(names) == len(model.inputs):
            value = np.asarray(case[names[position]])
        else:
            raise EdgeUsageError(f"{where} has no input {t.name!r} for {model.path} "
                                 f"(it has: {', '.join(names) or 'none'})")
        if tuple(value.shape) != t.shape:
            raise EdgeUsageError(f"input {t.name!r} of {model.path} has shape {list(t.shape)}; "
                                 f"{where} gives {list(value.shape)} (not the same network?)")
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
                   inputs: Mapping[str, np.ndarray] | None = None,
                   min_snr_db: float = DEFAULT_MIN_SNR_DB, seed: int = DEFAULT_SEED,
                   inputs_origin: str = "the inputs") -> QuantReport:
    """Run both models on the same inputs (random from the float signature with ``seed`` when
    None) and compare every tensor they share by name."""
    fmodel, qmodel = TfliteGraph(Path(float_model)), TfliteGraph(Path(quant_model))
    if inputs is None:
        # Both sides get the float signature's case: a quantized model of another shape is another network.
        inputs, inputs_origin = _random_inputs(fmodel, seed), f"the signature of {fmodel.path}"
    fvalues = fmodel.run(_feeds(fmodel, inputs, inputs_origin))
    qvalues = qmodel.run(_feeds(qmodel, inputs, inputs_origin))
    rows, unmatched = [], []
    used: set[int] = set()
    for ftensor, qtensor in match_tensors(fmodel.activations, qmodel.activations):
        if qtensor is None or ftensor.index not in fvalues or qtensor.index not in qvalues:
            unmatched.append(ftensor.name or f"#{ftensor.index}")
            continue
        used.add(qtensor.index)
        ref, test = _real(fvalues[ftensor.index], ftensor), _real(qvalues[qtensor.index], qtensor)
        rows.append(LayerLoss(ftensor.name, ftensor.op, qtensor.name, qtensor.dtype.name,
                              snr_db(ref, test), cosine(ref, test), max_abs_diff(ref, test)))
    if all(row.op == INPUT_OP for row in rows):  # inputs called "x" on both sides prove nothing
        raise EdgeUsageError(f"{float_model} and {quant_model} share no layer's tensor name (besides "
                             "their inputs): two different networks, or a converter renamed every tensor")
    only_quant = [t.name or f"#{t.index}" for t in qmodel.activations if t.index not in used]
    return QuantReport(Path(float_model), Path(quant_model), rows, min_snr_db, unmatched, only_quant)


# ---------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``pytest-edge triage quant`` (for cli.py's sub-parser)."""
    parser.add_argument("float_model", metavar="FLOAT.tflite", help="the float model")
    parser.add_argument("quant_model", metavar="INT8.tflite", help="the quantized model of the same network")
    parser.add_argument("--min-snr-db", type=float, default=DEFAULT_MIN_SNR_DB,
                        help="name the first layer below this SNR (default %(default)s dB)")
    parser.add_argument("--inputs", metavar="CASE.npz",
                        help="inputs by name (a golden case file works); random from the signature if absent")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the random inputs")


def run_parsed(args: argparse.Namespace) -> int:
    """Print the table, the matching summary and the verdict; 2 on bad input."""
    try:
        inputs = load_inputs(args.inputs) if args.inputs else None
        report = compare_models(args.float_model, args.quant_model, inputs, args.min_snr_db, args.seed,
                                inputs_origin=str(args.inputs or ""))
    except EdgeError as exc:
        print(f"pytest-edge triage quant: error: {exc}", file=sys.stderr)
        return 2
    print(report.format_table())
    print(report.matching_line())
    print(report.verdict())
    return 0


def main(argv: list[str]) -> int:
    """``pytest-edge triage quant FLOAT.tflite INT8.tflite [--min-snr-db 20] [--inputs case.npz]``."""
    parser = argparse.ArgumentParser(prog="pytest-edge triage quant",
                                     description="per-layer quantization loss of INT8.tflite against FLOAT.tflite")
    add_arguments(parser)
    return run_parsed(parser.parse_args(argv))
