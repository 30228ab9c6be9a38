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

from ..accuracy.metrics import as_float, snr_db

# A channel weaker than the median channel (channels with any signal) is "faint": its noise is
# measured against the median channel's signal instead of its own. int8 steps are shared by the
# channels of a tensor (per-tensor activations), so a rarely firing ReLU unit has a low SNR of its
# own though its noise is small for the layer; against the typical channel's signal it fails only
# when its noise is as large as a typical channel's signal allows (20 dB: a tenth of its amplitude).
# The channels an outlier scale flattens are typical ones: their noise is their whole signal.
FAINT_RMS_SHARE = 1.0
# A channel's SNR from fewer values than this (a dense layer's channel on fewer inputs) is a sample of a
# few numbers: a logit near zero gives a low SNR with a tiny error. Shown, but it does not decide.
MIN_CHANNEL_VALUES = 4
# max |w| over the median |w| of a weight tensor above which its per-tensor scale is called "set by one value".
OUTLIER_RATIO = 20.0
# An int8 activation whose values here span fewer int8 steps than this lost its resolution to its scale.
MIN_LEVELS = 8


def _channel_energies(reference: np.ndarray, test: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per index along ``axis`` (every other axis pooled): the float signal's energy, raised to the
    median channel's for faint channels (the floor); the noise energy; and which channels were faint."""
    ref, tested = as_float(reference), as_float(test)
    if ref.ndim == 0:
        ref, tested, axis = ref.reshape(1), tested.reshape(1), 0
    ref, tested = np.moveaxis(ref, axis, 0), np.moveaxis(tested, axis, 0)
    ref, tested = ref.reshape(ref.shape[0], -1), tested.reshape(tested.shape[0], -1)
    with np.errstate(all="ignore"):
        peak = float(max(np.max(np.abs(ref), initial=0.0), np.max(np.abs(tested), initial=0.0)))
        if math.isfinite(peak) and peak > 0:  # scaled first, so squares of large values do not overflow
            ref, tested = ref / peak, tested / peak
        signal = np.sum(ref ** 2, axis=1)
        noise = np.sum((tested - ref) ** 2, axis=1)
    live = signal[signal > 0]
    floor = (FAINT_RMS_SHARE ** 2) * float(np.median(live)) if live.size else 0.0
    faint = signal < floor
    return np.where(faint, floor, signal), noise, faint


def channel_snrs(reference: np.ndarray, test: np.ndarray, axis: int) -> np.ndarray:
    """SNR in dB of each index along ``axis`` (every other axis pooled; a channel weaker than the
    median one has its noise measured against the median's signal, see FAINT_RMS_SHARE): ``inf``
    where equal, NaN where not finite."""
    signal, noise, _ = _channel_energies(reference, test, axis)
    with np.errstate(all="ignore"):
        snrs = 10.0 * np.log10(signal / noise)
    snrs = np.where(noise == 0, math.inf, snrs)
    snrs = np.where((signal == 0) & (noise > 0), -math.inf, snrs)
    return np.where(np.isfinite(signal) & np.isfinite(noise), snrs, math.nan)


def channel_loss(reference: np.ndarray, test: np.ndarray, axis: int, threshold: float) -> ChannelLoss:
    """The channel figures of one tensor: worst channel, how many below ``threshold``, how many faint."""
    _, _, faint = _channel_energies(reference, test, axis)
    shape = np.shape(reference)
    values = int(np.prod(shape)) // max(int(shape[axis]), 1) if len(shape) else 1
    return ChannelLoss.of(channel_snrs(reference, test, axis), threshold, int(np.sum(faint)), values)


@dataclass(frozen=True)
class ChannelLoss:
    """SNR along one axis of a tensor: the worst channel, and how many fall below a threshold."""

    channels: int  # measured (NaN ones, from non-finite values, not counted)
    below: int
    worst_channel: int
    worst_snr_db: float
    faint: int = 0  # channels whose noise was measured against the median channel's signal (FAINT_RMS_SHARE)
    values: int = MIN_CHANNEL_VALUES  # values pooled in each channel

    @property
    def decides(self) -> bool:
        """Whether the channel figures are enough to mark the layer (see MIN_CHANNEL_VALUES)."""
        return self.values >= MIN_CHANNEL_VALUES

    @property
    def share_below(self) -> float:
        return self.below / self.channels if self.channels else 0.0

    @classmethod
    def of(cls, snrs: np.ndarray, threshold: float, faint: int = 0, values: int = MIN_CHANNEL_VALUES) -> ChannelLoss:
        measured = ~np.isnan(snrs)
        if not measured.any():
            return cls(0, 0, 0, math.inf, faint, values)
        worst = int(np.nanargmin(snrs))
        return cls(int(measured.sum()), int(np.sum(snrs[measured] < threshold)), worst, float(snrs[worst]), faint,
                   values)


@dataclass(frozen=True)
class WeightLoss:
    """A layer's weight tensor: float against dequantized int8."""

    name: str
    snr_db: float  # the whole tensor
    per_channel: ChannelLoss  # along the output-channel axis
    outlier_ratio: float  # max |w| over the median |w| of the float weights
    scales: int  # 1: per-tensor scale; else per-channel
    # The output channel with the largest max |w| over its own median |w|, and that ratio: with
    # per-channel scales, one value still flattens the rest of its own channel.
    outlier_channel: int = 0
    channel_outlier_ratio: float = 1.0


def weight_loss(name: str, float_weight: np.ndarray, dequantized: np.ndarray, axis: int, scales: int,
                threshold: float) -> WeightLoss:
    w = as_float(float_weight)
    magnitudes = np.abs(w).ravel()
    median = float(np.median(magnitudes)) if magnitudes.size else 0.0
    ratio = float(magnitudes.max()) / median if median > 0 else math.inf if magnitudes.any() else 1.0
    rows = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)) if w.ndim else magnitudes.reshape(1, -1)
    with np.errstate(all="ignore"):
        ratios = np.nan_to_num(np.max(rows, axis=1) / np.median(rows, axis=1), nan=1.0, posinf=1.0)
    channel = int(np.argmax(ratios)) if ratios.size else 0
    return WeightLoss(name, snr_db(w, dequantized), channel_loss(w, dequantized, axis, threshold), ratio, scales,
                      channel, float(ratios[channel]) if ratios.size else 1.0)


def stacked(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Several inputs' values of one tensor as one array (first axis joined), for per-channel SNR
    over every input: a dense layer's channel is one number per input."""
    return np.concatenate([as_float(a).reshape((1,) + np.shape(a)) for a in arrays], axis=0)


def activation_clue(reference: np.ndarray, test: np.ndarray, axis: int, weights_fine: bool = True) -> str | None:
    """Why an int8 tensor's channels are flattened, when its own values show it: one channel whose
    range is OUTLIER_RATIO times the median channel's (it sets a per-tensor scale), or an int8 step
    so coarse that these values use fewer than MIN_LEVELS steps (the scale was fit to a range the
    inputs here never reach: calibration data unlike them). None when neither holds. The step is
    blamed only when the error is that of rounding to it and ``weights_fine`` (flattened weights also
    leave an activation on one or a few levels, with errors of their own)."""
    ref, tested = as_float(reference), as_float(test)
    if ref.ndim == 0 or not (np.all(np.isfinite(ref)) and np.all(np.isfinite(tested))):
        return None
    ranges = np.max(np.abs(np.moveaxis(ref, axis, 0).reshape(ref.shape[axis], -1)), axis=1)
    live = ranges[ranges > 0]
    if live.size >= 2 and float(ranges.max()) >= OUTLIER_RATIO * float(np.median(live)):
        return (f"activation scale set by channel {int(np.argmax(ranges))}: its range is "
                f"{float(ranges.max()) / float(np.median(live)):.0f}x the median channel's (per-tensor scale)")
    levels = np.unique(tested)
    steps = np.diff(levels)
    peak = float(np.max(np.abs(ref)))
    if not weights_fine:
        return None
    if not steps.size and peak > 0:
        return ("every value rounds to one int8 level: the scale was set by a range wider than these inputs "
                "reach (calibration data unlike them?)")
    if steps.size and peak > 0:
        step = float(np.min(steps))
        if step > peak / MIN_LEVELS and float(np.max(np.abs(tested - ref))) <= 0.51 * step:
            return (f"int8 step {step:.3g} is coarse for values up to {peak:.3g} here: the scale was set "
                    f"by a range about {step * 127 / peak:.0f}x wider (calibration data unlike these inputs?)")
    return None


def why_below(snr: float, channels: ChannelLoss, weight: WeightLoss | None, threshold: float,
              activation: str | None = None) -> str | None:
    """Why a layer is below ``threshold`` (None if it is not): every figure that is, in words;
    ``activation`` (activation_clue) is added as the cause when the channels or the SNR are below."""
    reasons = []
    if channels.below and channels.decides:
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
    if activation and ((channels.below and channels.decides) or snr < threshold):
        reasons.append(activation)
    if weight is not None and weight.scales == 1 and weight.outlier_ratio >= OUTLIER_RATIO:
        reasons.append(f"weight scale set by one value {weight.outlier_ratio:.0f}x the median |w| (per-tensor scale)")
    elif (weight is not None and weight.scales > 1 and weight.channel_outlier_ratio >= OUTLIER_RATIO
          and channels.below and channels.worst_channel == weight.outlier_channel):  # that channel is the worst
        reasons.append(f"weight channel {weight.outlier_channel}'s scale set by one value "
                       f"{weight.channel_outlier_ratio:.0f}x its median |w| (per-channel scale: the rest of "
                       "that channel rounds to a few steps)")
    return "; ".join(reasons)


def number(value: float) -> str:
    """A figure for the table and the verdict: ``20`` for a whole number, else one decimal."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.1f}" if abs(value - round(value)) > 1e-9 else str(round(value))
    return "0" if text == "-0.0" or text == "-0" else text
