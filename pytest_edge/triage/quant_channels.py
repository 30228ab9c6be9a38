"""Per-channel quantization loss of one layer: what a single SNR over a whole tensor hides.

A per-tensor SNR is dominated by the channels with the most energy: when one outlier (a weight or
an activation channel) sets a per-tensor int8 scale, the other channels round to zero or to one
coarse step, yet the outlier channel's energy keeps the tensor's SNR high. So each layer is also
measured channel by channel (along the output-channel axis), and its weights are compared directly
(float weights against the dequantized int8 ones), with the outlier ratio that tells why.

NumPy only; no runtime is imported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..metrics import as_float, snr_db

# A channel whose float RMS is below this share of the tensor's median channel RMS is "faint" (a ReLU
# unit that rarely fires): a per-tensor int8 step that suits the typical channel leaves it at a low SNR
# of its own although its noise is small next to the layer's signal (at 0.25 and 20 dB of its own, 32 dB
# below the typical channel), so it is not counted. The channels an outlier scale flattens are the
# typical ones, which stay counted.
NEGLIGIBLE_RMS_SHARE = 0.25
# max |w| over the median |w| of a weight tensor above which its per-tensor scale is called "set by one value".
OUTLIER_RATIO = 20.0


def channel_snrs(reference: np.ndarray, test: np.ndarray, axis: int) -> np.ndarray:
    """SNR in dB of each index along ``axis`` (every other axis pooled): ``inf`` where equal,
    NaN for a channel too faint to measure (see NEGLIGIBLE_RMS_SHARE)."""
    ref, tested = as_float(reference), as_float(test)
    if ref.ndim == 0:
        return np.array([snr_db(ref, tested)])
    ref, tested = np.moveaxis(ref, axis, 0), np.moveaxis(tested, axis, 0)
    ref, tested = ref.reshape(ref.shape[0], -1), tested.reshape(tested.shape[0], -1)
    with np.errstate(all="ignore"):
        rms = np.sqrt(np.mean(ref ** 2, axis=1))
    floor = NEGLIGIBLE_RMS_SHARE * float(np.median(rms)) if rms.size else 0.0
    return np.array([math.nan if (rms[c] < floor or (rms[c] == 0 and not np.any(tested[c])))
                     else snr_db(ref[c], tested[c]) for c in range(ref.shape[0])])


@dataclass(frozen=True)
class ChannelLoss:
    """SNR along one axis of a tensor: the worst channel, and how many fall below a threshold."""

    channels: int  # measured (faint ones not counted)
    below: int
    worst_channel: int
    worst_snr_db: float
    faint: int = 0  # channels too faint to count

    @property
    def share_below(self) -> float:
        return self.below / self.channels if self.channels else 0.0

    @classmethod
    def of(cls, snrs: np.ndarray, threshold: float) -> ChannelLoss:
        measured = ~np.isnan(snrs)
        if not measured.any():
            return cls(0, 0, 0, math.inf, int(snrs.size))
        worst = int(np.nanargmin(snrs))
        return cls(int(measured.sum()), int(np.sum(snrs[measured] < threshold)), worst, float(snrs[worst]),
                   int(snrs.size - measured.sum()))


@dataclass(frozen=True)
class WeightLoss:
    """A layer's weight tensor: float against dequantized int8."""

    name: str
    snr_db: float  # the whole tensor
    per_channel: ChannelLoss  # along the output-channel axis
    outlier_ratio: float  # max |w| over the median |w| of the float weights
    scales: int  # 1: per-tensor scale; else per-channel


def weight_loss(name: str, float_weight: np.ndarray, dequantized: np.ndarray, axis: int, scales: int,
                threshold: float) -> WeightLoss:
    w = as_float(float_weight)
    magnitudes = np.abs(w).ravel()
    median = float(np.median(magnitudes)) if magnitudes.size else 0.0
    ratio = float(magnitudes.max()) / median if median > 0 else math.inf if magnitudes.any() else 1.0
    return WeightLoss(name, snr_db(w, dequantized), ChannelLoss.of(channel_snrs(w, dequantized, axis), threshold),
                      ratio, scales)


def stacked(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Several inputs' values of one tensor as one array (first axis joined), for per-channel SNR
    over every input: a dense layer's channel is one number per input."""
    return np.concatenate([as_float(a).reshape((1,) + np.shape(a)) for a in arrays], axis=0)


def why_below(snr: float, channels: ChannelLoss, weight: WeightLoss | None, threshold: float) -> str | None:
    """Why a layer is below ``threshold`` (None if it is not): every figure that is, in words."""
    reasons = []
    if channels.below:
        reasons.append(f"{channels.below} of {channels.channels} channels below {number(threshold)} dB "
                       f"(worst: channel {channels.worst_channel}, {number(channels.worst_snr_db)} dB)")
    if snr < threshold:
        reasons.append(f"SNR {number(snr)} dB on the worst input")
    if weight is not None and (weight.snr_db < threshold or weight.per_channel.below):
        part = f"weights {number(weight.snr_db)} dB"
        if weight.per_channel.below:
            part += (f", {weight.per_channel.below} of {weight.per_channel.channels} weight channels below "
                     f"{number(threshold)} dB (worst {number(weight.per_channel.worst_snr_db)} dB)")
        reasons.append(part)
    if not reasons:
        return None
    if weight is not None and weight.scales == 1 and weight.outlier_ratio >= OUTLIER_RATIO:
        reasons.append(f"weight scale set by one value {weight.outlier_ratio:.0f}x the median |w| (per-tensor scale)")
    return "; ".join(reasons)


def number(value: float) -> str:
    """A figure for the table and the verdict: ``20`` for a whole number, else one decimal."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.1f}" if abs(value - round(value)) > 1e-9 else str(round(value))
