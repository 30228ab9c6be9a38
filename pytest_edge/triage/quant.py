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
import importlib
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendError, EdgeError, EdgeUsageError

DEFAULT_MIN_SNR_DB = 20.0
DEFAULT_SEED = 0
INPUT_OP = "(input)"  # the "producing op" of a graph input
_QUANTIZED_KINDS = {np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)}
_NAME_WIDTH = 56  # longer names are shortened in the table (the verdict line keeps them whole)


# ---------------------------------------------------------------- the numbers


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of one tensor: ``real = scale * (q - zero_point)``, per tensor (one
    scale) or per axis (one scale per index along ``axis``)."""

    scales: np.ndarray
    zero_points: np.ndarray
    axis: int = 0

    @classmethod
    def from_details(cls, details: Mapping[str, Any]) -> QuantParams | None:
        """From one entry of ``Interpreter.get_tensor_details()``; None for an unquantized tensor."""
        params = details.get("quantization_parameters") or {}
        scales = np.asarray(params.get("scales", []), dtype=np.float64)
        if scales.size == 0:
            return None
        zero_points = np.asarray(params.get("zero_points", []), dtype=np.int64)
        if zero_points.size == 0:
            zero_points = np.zeros_like(scales, dtype=np.int64)
        return cls(scales, zero_points, int(params.get("quantized_dimension", 0)))

    def _broadcast(self, ndim: int) -> tuple[np.ndarray, np.ndarray]:
        if self.scales.size == 1:
            return self.scales.reshape(()), self.zero_points.reshape(())
        if ndim == 0:
            raise ValueError(f"{self.scales.size} per-axis scales for a scalar tensor")
        shape = [1] * ndim
        shape[self.axis] = -1
        return self.scales.reshape(shape), self.zero_points.reshape(shape)


def dequantize(values: np.ndarray, params: QuantParams) -> np.ndarray:
    """Real values (float64) of a quantized tensor."""
    values = np.asarray(values)
    scales, zero_points = params._broadcast(values.ndim)
    return (values.astype(np.float64) - zero_points) * scales


def quantize(values: np.ndarray, params: QuantParams, dtype: np.dtype | type = np.int8) -> np.ndarray:
    """Nearest representable integers of real values (round half to even, like LiteRT), clipped to
    ``dtype``'s range."""
    values = np.asarray(values, dtype=np.float64)
    scales, zero_points = params._broadcast(values.ndim)
    info = np.iinfo(dtype)
    return np.clip(np.round(values / scales) + zero_points, info.min, info.max).astype(dtype)


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """Signal-to-noise ratio of ``test`` against ``reference`` in dB: ``10 log10(sum(ref²) /
    sum((ref - test)²))``. ``inf`` when they are equal; ``-inf`` when the reference is all zeros
    and the test is not."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    noise = float(np.sum((ref - np.asarray(test, dtype=np.float64).ravel()) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine_similarity(reference: np.ndarray, test: np.ndarray) -> float:
    """Cosine of the angle between the two tensors as flat vectors: 1.0 for two all-zero tensors,
    0.0 when only one is all zeros."""
    a = np.asarray(reference, dtype=np.float64).ravel()
    b = np.asarray(test, dtype=np.float64).ravel()
    norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norm_a == 0.0 and norm_b == 0.0:
        return 1.0
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (norm_a * norm_b), -1.0, 1.0))


def max_abs_diff(reference: np.ndarray, test: np.ndarray) -> float:
    diff = np.abs(np.asarray(reference, dtype=np.float64) - np.asarray(test, dtype=np.float64))
    return float(diff.max()) if diff.size else 0.0


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


# ---------------------------------------------------------------- running LiteRT


def _litert() -> Any:
    for module in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):
        try:
            return importlib.import_module(module)
        except ImportError:
            continue
    raise BackendError("pytest-edge triage quant needs LiteRT: pip install ai-edge-litert")


@dataclass(frozen=True)
class _Tensor:
    index: int
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    params: QuantParams | None
    op: str  # producing op, or INPUT_OP


class _Model:
    """One .tflite on LiteRT's reference kernels, every tensor preserved."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise BackendError(f"{path}: no such .tflite file")
        head = path.read_bytes()[:8]
        if len(head) < 8 or head[4:8] != b"TFL3":  # the flatbuffer file identifier of a .tflite
            raise BackendError(f"{path} is not a .tflite model (no TFL3 flatbuffer identifier)")
        runtime = _litert()
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
        self.activations: list[_Tensor] = list(self.inputs)
        for op in self.interpreter._get_ops_details():  # the only public-ish view of the op list
            for index in op["outputs"]:
                if int(index) in details:
                    self.activations.append(self._tensor(details[int(index)], op["op_name"]))

    def _resize_dynamic_inputs(self) -> None:
        for d in self.interpreter.get_input_details():
            signature = d.get("shape_signature")
            if signature is not None and any(int(s) < 0 for s in signature):
                self.interpreter.resize_tensor_input(d["index"], [max(int(s), 1) for s in signature])

    @staticmethod
    def _tensor(details: Mapping[str, Any], op: str) -> _Tensor:
        return _Tensor(int(details["index"]), str(details["name"]), np.dtype(details["dtype"]),
                       tuple(int(s) for s in details["shape"]), QuantParams.from_details(details), op)

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


def _name_key(name: str) -> frozenset[str]:
    """A fused name ``Relu;add;MatMul`` as a set of parts without converter suffixes, so the same
    fused op matches when the parts come in another order or gained a suffix."""
    return frozenset(_SUFFIX.sub("", part.strip()) for part in name.split(";") if part.strip())


def _match(float_tensors: Sequence[_Tensor], quant_tensors: Sequence[_Tensor]) -> list[tuple[_Tensor, _Tensor | None]]:
    """Each float tensor with its quantized counterpart: the same name, else the same normalised
    name when exactly one tensor on each side has it; shapes must agree."""
    by_name = {t.name: t for t in quant_tensors if t.name}
    used: set[int] = set()
    pairs: dict[int, _Tensor] = {}
    for t in float_tensors:
        other = by_name.get(t.name) if t.name else None
        if other is not None and other.shape == t.shape:
            pairs[t.index] = other
            used.add(other.index)
    keys: dict[frozenset[str], list[_Tensor]] = {}
    for t in quant_tensors:
        if t.index not in used and t.name:
            keys.setdefault(_name_key(t.name), []).append(t)
    float_keys: dict[frozenset[str], list[_Tensor]] = {}
    for t in float_tensors:
        if t.index not in pairs and t.name:
            float_keys.setdefault(_name_key(t.name), []).append(t)
    for key, tensors in float_keys.items():
        candidates = keys.get(key, [])
        if key and len(tensors) == 1 and len(candidates) == 1 and candidates[0].shape == tensors[0].shape:
            pairs[tensors[0].index] = candidates[0]
            used.add(candidates[0].index)
    return [(t, pairs.get(t.index)) for t in float_tensors]


# ---------------------------------------------------------------- inputs


def random_inputs(float_model: Path | str, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """One input case from the float model's signature: standard normal floats, small integers."""
    return _random_inputs(_Model(Path(float_model)), seed)


def _random_inputs(model: _Model, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    case = {}
    for t in model.inputs:
        if t.dtype.kind == "f":
            case[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
        elif t.dtype.kind == "b":
            case[t.name] = rng.integers(0, 2, t.shape).astype(bool)
        else:
            case[t.name] = rng.integers(0, 10, t.shape).astype(t.dtype)
    return case


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


def _feeds(model: _Model, case: Mapping[str, np.ndarray], where: str) -> list[np.ndarray]:
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


def _real(values: np.ndarray, tensor: _Tensor) -> np.ndarray:
    if tensor.params is not None and tensor.dtype.kind in "iu":
        return dequantize(values, tensor.params)
    return values.astype(np.float64)


def compare_models(float_model: Path | str, quant_model: Path | str,
                   inputs: Mapping[str, np.ndarray] | None = None,
                   min_snr_db: float = DEFAULT_MIN_SNR_DB, seed: int = DEFAULT_SEED,
                   inputs_origin: str = "the inputs") -> QuantReport:
    """Run both models on the same inputs (random from the float signature with ``seed`` when
    None) and compare every tensor they share by name."""
    fmodel, qmodel = _Model(Path(float_model)), _Model(Path(quant_model))
    if inputs is None:
        # Both sides get the float signature's case: a quantized model of another shape is another network.
        inputs, inputs_origin = _random_inputs(fmodel, seed), f"the signature of {fmodel.path}"
    fvalues = fmodel.run(_feeds(fmodel, inputs, inputs_origin))
    qvalues = qmodel.run(_feeds(qmodel, inputs, inputs_origin))
    rows, unmatched = [], []
    used: set[int] = set()
    for ftensor, qtensor in _match(fmodel.activations, qmodel.activations):
        if qtensor is None or ftensor.index not in fvalues or qtensor.index not in qvalues:
            unmatched.append(ftensor.name or f"#{ftensor.index}")
            continue
        used.add(qtensor.index)
        ref, test = _real(fvalues[ftensor.index], ftensor), _real(qvalues[qtensor.index], qtensor)
        rows.append(LayerLoss(ftensor.name, ftensor.op, qtensor.name, qtensor.dtype.name,
                              snr_db(ref, test), cosine_similarity(ref, test), max_abs_diff(ref, test)))
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
