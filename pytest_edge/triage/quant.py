"""Per-layer quantization loss between a float model and a quantized model of the same network
(``pytest-edge triage quant``), whatever the format: the format's backend opens the pair
(``Backend.quant_pairs``: its graph reader, in its folder, matches the two graphs' tensors and
runs both with every tensor kept), quant_layers.py measures the matched tensors, quant_report.py
prints.

Each matched tensor gets, in the float graph's order, an SNR, a cosine similarity and the largest
absolute difference on the worst of several inputs, its SNR per output channel, and for an op with
weights, its float weights against the dequantized int8 ones. The first layer with any of these
below a threshold is where quantization starts to hurt.

This module imports neither pytest nor a runtime: the backend of the pair's format brings its own.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..backends import Backend, all_backends
from ..backends.quant_pair import QuantPair, QuantParams, dequantize, quantize
from ..errors import EdgeError, EdgeUsageError
from ..accuracy.inputs import DEFAULT_SEED, generate_case
from .quant_inputs import DEFAULT_CASES, choose_inputs, load_inputs, random_cases, unstack
from .quant_layers import LayerLoss, measure_layers
from .quant_report import DEFAULT_MIN_SNR_DB, QuantReport

__all__ = ["DEFAULT_MIN_SNR_DB", "LayerLoss", "QuantParams", "QuantReport", "compare_models", "dequantize",
           "load_inputs", "main", "quantize", "random_inputs"]


def random_inputs(float_model: Path | str, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """One input case from the float model's signature: standard normal floats, small integers."""
    float_model = Path(float_model)
    return generate_case(_open(float_model, float_model).float_inputs, {}, seed)


def compare_models(float_model: Path | str, quant_model: Path | str,
                   inputs: Mapping[str, np.ndarray] | Sequence[tuple[str, Mapping[str, np.ndarray]]] | None = None,
                   min_snr_db: float = DEFAULT_MIN_SNR_DB, seed: int = DEFAULT_SEED,
                   inputs_origin: str = "the inputs", cases: int = DEFAULT_CASES) -> QuantReport:
    """Run both models on the same inputs and compare every tensor they share, per input (the worst
    decides), per channel, and their weights. ``inputs``: one case, or labelled cases; None:
    ``cases`` random cases from the float signature, seeds ``seed``, ``seed + 1``, ... Each format
    runs on its backend's runtime (the formats: :func:`pair_formats`)."""
    float_model, quant_model = Path(float_model), Path(quant_model)
    pair = _open(float_model, quant_model)
    if inputs is None:
        # Both sides get the float signature's cases: a quantized model of another shape is another network.
        labelled = random_cases(pair.float_inputs, cases, seed)
        inputs_origin = f"random from the signature of {float_model}"
    else:  # stacked [N, ...] inputs are N cases
        labelled = unstack([(inputs_origin, inputs)] if isinstance(inputs, Mapping) else list(inputs),
                           pair.float_inputs)
    matching = pair.match(labelled[0][1], inputs_origin)
    rows, losses = measure_layers(matching.pairs, labelled, lambda case: pair.run(case, inputs_origin), min_snr_db)
    measured = {row.tensor: row.op for row in rows}
    incomparable = [p.tensor or "?" for p in matching.pairs if p.tensor not in measured]
    folded = pair.folded(matching.unmatched + incomparable, measured)

    def unfolded(names: list[str]) -> list[str]:
        return [name for name in names if not any(name in folded_names for folded_names in folded.values())]

    return QuantReport(float_model, quant_model, rows, min_snr_db, unfolded(matching.unmatched),
                       matching.only_quantized, losses, inputs_origin, matching.matched_by, folded_float=folded,
                       incomparable=unfolded(incomparable))


# ---------------------------------------------------------------- the formats


def _pair_backends() -> dict[str, Backend]:
    """{artifact suffix: backend} of the formats triage quant compares, in registry order: the first
    registered backend of a format that has a pair (``Backend.quant_pairs``) opens it."""
    found: dict[str, Backend] = {}
    for backend in all_backends().values():
        if backend.quant_pairs is not None:
            found.setdefault(backend.suffix, backend)
    return found


def pair_formats() -> dict[str, str]:
    """{artifact suffix: what its quantized artifact is ("int8", "QDQ")} of the formats compared."""
    return {suffix: backend.quant_pairs.kind if backend.quant_pairs else "" for suffix, backend in _pair_backends().items()}


def pairs_help() -> str:
    """The formats compared, with what the quantized one is where that is not plain int8: "QDQ .onnx,
    .tflite, .pte"."""
    return ", ".join(("" if kind == "int8" else kind + " ") + suffix for suffix, kind in pair_formats().items())


def _or_list(items: Sequence[str]) -> str:
    return ", ".join(items[:-1]) + f" or {items[-1]}" if len(items) > 1 else "".join(items)


def _open(float_model: Path, quant_model: Path) -> QuantPair:
    kinds = {float_model.suffix.lower(), quant_model.suffix.lower()}
    if len(kinds) > 1:
        raise EdgeUsageError(f"{float_model} and {quant_model} are not the same format: triage quant compares "
                             f"a float and a quantized model of one format ({_or_list(list(pair_formats()))})")
    name = float_model.name.lower()
    backend = next((b for suffix, b in _pair_backends().items() if name.endswith(suffix)), None)
    if backend is None:
        raise EdgeUsageError(f"{float_model}: triage quant compares a float and a quantized model of "
                             f"{_or_list(list(pair_formats()))}, not {float_model.suffix or 'a file without a suffix'}")
    assert backend.quant_pairs is not None
    return backend.quant_pairs.open(float_model, quant_model)


# ---------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``pytest-edge triage quant`` (for cli.py's sub-parser)."""
    formats = pair_formats()
    parser.add_argument("float_model", metavar="FLOAT", help=f"the float model ({_or_list(list(formats))})")
    parser.add_argument("quant_model", metavar="INT8", help="the quantized model of the same network ("
                        + ", ".join(f"{kind} {suffix}" for suffix, kind in formats.items()) + ")")
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
