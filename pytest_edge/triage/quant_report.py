"""The result of ``pytest-edge triage quant`` (any format) and its plain-text table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .quant_channels import number
from .quant_layers import InputLoss, LayerLoss

DEFAULT_MIN_SNR_DB = 20.0
# Rounding a weight to the nearest int8 step (0 is a step) never moves it further than its own size,
# so quantized weights are at 0 dB or better against their float ones; below this (float rounding
# aside) they are another network's or another checkpoint's weights, not these rounded.
FOREIGN_WEIGHTS_DB = -1.0
_NAME_WIDTH = 48  # longer names are shortened in the table (the verdict line keeps them whole)


@dataclass
class QuantReport:
    """Per-layer loss of ``quant_model`` against ``float_model``, in the float graph's order."""

    float_model: Path
    quant_model: Path
    rows: list[LayerLoss]
    min_snr_db: float = DEFAULT_MIN_SNR_DB
    unmatched_float: list[str] = field(default_factory=list)  # float tensors with no counterpart
    unmatched_quant: list[str] = field(default_factory=list)  # quantized-only tensors (QUANTIZE, ...)
    inputs: list[InputLoss] = field(default_factory=list)  # each input, with its end-to-end output SNR
    inputs_origin: str = "random inputs"
    matched_by: str = "by name"  # how tensors were paired (a .pte has no names: by operator order)
    # Float tensors the quantizer folded away, by how (a Conv fused with its Relu; BatchNormalization
    # folded into the Conv before it): no counterpart by design, their layer is measured as another row.
    folded_float: dict[str, list[str]] = field(default_factory=dict)
    # Float tensors matched with a counterpart that could not be compared on every input (a value
    # missing, or of another shape on one side): matched, but no row.
    incomparable: list[str] = field(default_factory=list)

    @property
    def matched(self) -> int:
        return len(self.rows)

    @property
    def first_below(self) -> LayerLoss | None:
        """The first tensor, in graph order, with any figure below ``min_snr_db``: its SNR on the
        worst input, a channel's SNR, or its weights' (whole or per channel)."""
        return next((row for row in self.rows if row.below), None)

    @property
    def foreign_weights(self) -> LayerLoss | None:
        """The first layer whose quantized weights cannot be its float weights rounded (see
        FOREIGN_WEIGHTS_DB): then the pair is not one network's float and int8 models."""
        return next((row for row in self.rows if _weights_db(row) < FOREIGN_WEIGHTS_DB), None)

    @property
    def worst_input(self) -> InputLoss | None:
        measured = [i for i in self.inputs if not math.isnan(i.output_snr_db)]
        return min(measured, key=lambda i: i.output_snr_db) if measured else None

    def matching_line(self) -> str:
        folded = sum(len(names) for names in self.folded_float.values())
        total = self.matched + len(self.unmatched_float) + len(self.incomparable)
        line = f"matched {self.matched} of {total} float tensors {self.matched_by}"
        if folded:
            line = (f"matched {self.matched} of {total + folded} float tensors "
                    f"{self.matched_by}; {folded} folded away by the quantizer, measured in the row of the layer "
                    "that computes them now (" + "; ".join(f"{how}: {', '.join(names)}"
                                                            for how, names in self.folded_float.items()) + ")")
        if self.unmatched_float:
            line += f"; no counterpart for {len(self.unmatched_float)}: " + ", ".join(self.unmatched_float)
        if self.incomparable:
            line += (f"; {len(self.incomparable)} matched but not comparable on every input (a value missing, "
                     "or of another shape on one side): " + ", ".join(self.incomparable))
        if self.unmatched_quant:
            line += (f"; {len(self.unmatched_quant)} only in the quantized model: "
                     + ", ".join(self.unmatched_quant))
        return line

    def inputs_line(self) -> str:
        """Which inputs, and the worst one's end-to-end output SNR (the worst input decides)."""
        line = f"inputs: {len(self.inputs)} ({self.inputs_origin})"
        worst = self.worst_input
        if worst is not None:
            line += (f"; worst input: {worst.label}, end-to-end output SNR {number(worst.output_snr_db)} dB")
            best = max(self.inputs, key=lambda i: i.output_snr_db if not math.isnan(i.output_snr_db) else -math.inf)
            if len(self.inputs) > 1:
                line += f" (best: {best.label}, {number(best.output_snr_db)} dB)"
        return line

    def verdict(self) -> str:
        first = self.first_below
        threshold = number(self.min_snr_db)
        foreign = self.foreign_weights
        if foreign is not None:
            return (f"not the same network's weights: {foreign.tensor} ({foreign.op}) has int8 weights at "
                    f"{number(_weights_db(foreign))} dB (whole, or its worst channel) against its float ones, "
                    "and rounding to int8 keeps "
                    f"every weight's error below its own size (0 dB or better): {self.float_model} and "
                    f"{self.quant_model} are different networks or checkpoints, so these figures measure "
                    "that difference, not quantization")
        if first is None:
            verdict = f"every matched layer at or above {threshold} dB (worst input, every channel, and the weights)"
            layers = sum(1 for row in self.rows if row.op != "(input)")
            if len(self.unmatched_float) > layers:  # most of the network was not measured: not "fine"
                verdict += (f"; but {len(self.unmatched_float)} of the float model's tensors found no "
                            f"counterpart and were not measured, more than the {layers} layers that were")
            return verdict
        return f"first layer below {threshold} dB: {first.tensor} ({first.op}): {first.why}"

    def format_table(self) -> str:
        """The rows as a plain-text table; rows below the threshold are marked with ``<``.

        SNR/cosine/max |Δ| are the worst input's (column ``input``); ``ch<`` is how many channels are
        below the threshold, ``ch min`` the worst channel's SNR (``~``: too few values per channel to
        decide); ``w dB``, ``w ch min`` and
        ``max/med`` are the weights' SNR, worst weight channel and max |w| over median |w|."""
        header = ["#", "tensor", "op", "dtype", "SNR dB", "input", "cosine", "max |Δ|", "ch<", "ch min",
                  "w dB", "w ch min", "max/med", ""]
        labels = [i.label for i in self.inputs]
        body = []
        for i, row in enumerate(self.rows):
            w = row.weight
            body.append([str(i), _shorten(row.tensor), row.op, row.quant_dtype, number(row.snr_db),
                         labels[row.worst_input] if row.worst_input < len(labels) else str(row.worst_input),
                         f"{row.cosine:.4f}", f"{row.max_abs_diff:.4g}",
                         f"{row.channels.below}/{row.channels.channels}",
                         number(row.channels.worst_snr_db) + ("" if row.channels.decides else "~"),
                         number(w.snr_db) if w else "", number(w.per_channel.worst_snr_db) if w else "",
                         f"{w.outlier_ratio:.0f}" if w else "", "<" if row.below else ""])
        widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
        right = {0, 4, 6, 7, 8, 9, 10, 11, 12}  # numbers are right-aligned

        def fmt(cells: list[str]) -> str:
            return "  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                             for c, (cell, w) in enumerate(zip(cells, widths))).rstrip()

        lines = [f"float: {self.float_model}", f"quantized: {self.quant_model}", fmt(header),
                 fmt(["-" * w for w in widths[:-1]] + [""])]
        lines += [fmt(cells) for cells in body]
        return "\n".join(lines)


def _shorten(name: str) -> str:
    return name if len(name) <= _NAME_WIDTH else name[: _NAME_WIDTH - 1] + "…"


def _weights_db(row: LayerLoss) -> float:
    """The lower of a layer's weight SNR, whole and worst channel (both 0 dB or better when rounded)."""
    w = row.weight
    return math.inf if w is None else min(w.snr_db, w.per_channel.worst_snr_db)
