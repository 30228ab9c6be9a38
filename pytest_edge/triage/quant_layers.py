"""Layer-by-layer loss of a quantized model against its float model over several inputs, whatever
the format: the format's backend (its ``QuantPair``, backends/quant_pair.py) matches the tensors
and the weights and runs both models; this module measures them.

Over inputs, the worst input decides (a mean hides the inputs on which a layer is destroyed): each
tensor's SNR, cosine and max |Δ| are those of the input with the lowest SNR, and the model's
end-to-end output SNR is given for each input. Per channel, every input's values are pooled: a
dense layer's channel is one number per input, too few to measure on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..accuracy.metrics import cosine, max_abs_diff, snr_db
from ..backends.quant_pair import TensorPair
from .quant_channels import (ChannelLoss, WeightLoss, activation_clue, channel_loss, stacked, weight_loss,
                             why_below)

Case = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class LayerLoss:
    """One matched tensor: its float name, the op that writes it in the float graph, and the
    quantized graph's value (dequantized) against the float one. ``snr_db``, ``cosine`` and
    ``max_abs_diff`` are the worst input's (``worst_input``); ``channels`` pools every input."""

    tensor: str
    op: str
    quant_tensor: str  # its name in the quantized model (differs only when matched after normalising)
    quant_dtype: str
    snr_db: float
    cosine: float
    max_abs_diff: float
    worst_input: int = 0
    channels: ChannelLoss = ChannelLoss(1, 0, 0, math.inf)
    weight: WeightLoss | None = None
    why: str | None = None  # why it is below the threshold; None when every figure is at or above it

    @property
    def below(self) -> bool:
        return self.why is not None


@dataclass(frozen=True)
class InputLoss:
    """One input: its label (a golden case file, a seed) and the model's end-to-end output SNR
    (the lowest over its outputs)."""

    label: str
    output_snr_db: float


def measure_layers(pairs: Sequence[TensorPair], cases: Sequence[tuple[str, Case]],
                   run: Callable[[Case], tuple[Mapping[Any, np.ndarray], Mapping[Any, np.ndarray]]],
                   threshold: float) -> tuple[list[LayerLoss], list[InputLoss]]:
    """Run ``run(case)`` (float values, quantized values, both real) on every case and measure every
    pair; the inputs' end-to-end SNR comes from the pairs marked ``is_output``."""
    if not cases:
        raise ValueError("no inputs to compare the models on")
    refs: list[list[np.ndarray]] = [[] for _ in pairs]
    tests: list[list[np.ndarray]] = [[] for _ in pairs]
    inputs = []
    for label, case in cases:
        fvalues, qvalues = run(case)
        output_snrs = []
        for i, pair in enumerate(pairs):
            ref, test = fvalues.get(pair.float_key), qvalues.get(pair.quant_key)
            if ref is None or test is None or np.shape(ref) != np.shape(test):
                continue
            refs[i].append(np.asarray(ref, np.float64))
            tests[i].append(np.asarray(test, np.float64))
            if pair.is_output:
                output_snrs.append(snr_db(ref, test))
        inputs.append(InputLoss(label, min(output_snrs, default=math.nan)))
    rows = []
    for pair, ref_list, test_list in zip(pairs, refs, tests):
        if len(ref_list) != len(cases):
            continue  # missing on some input: not comparable
        rows.append(_layer(pair, ref_list, test_list, threshold))
    return rows, inputs


def _layer(pair: TensorPair, refs: list[np.ndarray], tests: list[np.ndarray], threshold: float) -> LayerLoss:
    snrs = [snr_db(r, t) for r, t in zip(refs, tests)]
    worst = int(np.argmin([s if not math.isnan(s) else -math.inf for s in snrs]))
    ndim = refs[0].ndim
    weight = None
    if pair.weight is not None:
        w = pair.weight
        weight = weight_loss(w.name, w.float_values, w.dequantized, w.axis, w.scales, threshold)
    clue = None
    if ndim == 0:
        channels = ChannelLoss.of(np.array([snrs[worst]]), threshold)
    else:  # every input stacked on a new first axis: the channel axis moves one along
        axis = pair.channel_axis % ndim + 1
        channels = channel_loss(stacked(refs), stacked(tests), axis, threshold)
        if pair.quant_dtype in ("int8", "uint8"):
            weights_fine = weight is None or (weight.snr_db >= threshold and not weight.per_channel.below)
            clue = activation_clue(stacked(refs), stacked(tests), axis, weights_fine)
    return LayerLoss(pair.tensor, pair.op, pair.quant_tensor, pair.quant_dtype, snrs[worst],
                     cosine(refs[worst], tests[worst]), max_abs_diff(refs[worst], tests[worst]), worst,
                     channels, weight, why_below(snrs[worst], channels, weight, threshold, clue))
