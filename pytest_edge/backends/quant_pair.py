"""What a backend gives ``pytest-edge triage quant`` (docs/triage.md): a float and a quantized
artifact of one network in its format, opened as a :class:`QuantPair`. The runtime's half lives
in its folder (reading both graphs, matching their tensors, running them with every tensor kept);
triage's half (the inputs, the per-layer measurement, the report) is triage/quant.py's.

Also here, because both halves use them: the affine quantization numbers (:class:`QuantParams`,
:func:`dequantize`, :func:`quantize`), the matched tensors (:class:`TensorPair`,
:class:`WeightPair`), and how a case feeds a model's input (:func:`case_input`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EdgeUsageError
from .tensors import TensorSpec

Case = Mapping[str, np.ndarray]


# ---------------------------------------------------------------- quantization numbers


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of one tensor: ``real = scale * (q - zero_point)``, per tensor (one
    scale) or per axis (one scale per index along ``axis``)."""

    scales: np.ndarray
    zero_points: np.ndarray
    axis: int = 0

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
    """Nearest representable integers of real values (round half to even, as the runtimes do),
    clipped to ``dtype``'s range."""
    values = np.asarray(values, dtype=np.float64)
    scales, zero_points = params._broadcast(values.ndim)
    info = np.iinfo(dtype)
    return np.clip(np.round(values / scales) + zero_points, info.min, info.max).astype(dtype)


# ---------------------------------------------------------------- matched tensors


@dataclass(frozen=True)
class WeightPair:
    """A layer's weights: the float tensor, the quantized one dequantized, its output-channel axis
    and its number of scales (1: per tensor)."""
    name: str
    float_values: np.ndarray
    dequantized: np.ndarray
    axis: int
    scales: int


@dataclass(frozen=True)
class TensorPair:
    """One float tensor and its quantized counterpart, with how each side's values are looked up."""
    tensor: str
    op: str
    quant_tensor: str
    quant_dtype: str
    float_key: Any
    quant_key: Any
    channel_axis: int  # of the tensor's own shape (the output channel: last for NHWC, 1 for NCHW)
    weight: WeightPair | None = None
    is_output: bool = False


@dataclass(frozen=True)
class Matching:
    """What a pair matched: the tensor pairs in the float graph's order, the float tensors with no
    counterpart, the quantized graph's own tensors (besides its quantize/dequantize steps), and
    how they were matched, in words for the report."""
    pairs: list[TensorPair]
    unmatched: list[str] = field(default_factory=list)
    only_quantized: list[str] = field(default_factory=list)
    matched_by: str = "by name"


# ---------------------------------------------------------------- the pair


class QuantPairs(ABC):
    """A backend's capability to open its format's float/quantized pair for ``pytest-edge triage
    quant`` (``Backend.quant_pairs``; None for a format that is not compared)."""

    kind: str  # what the quantized artifact of the pair is, in words ("int8", "QDQ")

    @abstractmethod
    def open(self, float_model: Path, quant_model: Path) -> "QuantPair":
        """Both artifacts opened by the runtime's graph reader (imported only here, for triage)."""


class QuantPair(ABC):
    """A float and a quantized artifact of one network, opened by their format's backend
    (``Backend.quant_pairs``). Opening reads both and refuses a pair that cannot be compared
    (swapped, another quantization scheme), with the files named. ``where`` in the methods names
    the inputs in messages ("inputs from case.npz")."""

    float_model: Path
    quant_model: Path

    @property
    @abstractmethod
    def float_inputs(self) -> list[TensorSpec]:
        """The float model's inputs: random cases are drawn from them and stacked cases split by them."""

    @abstractmethod
    def match(self, first: Case, where: str) -> Matching:
        """Pair the float graph's tensors with the quantized graph's (``first``: the first case, for a
        runtime that knows some values, or the operators themselves, only after a run)."""

    @abstractmethod
    def run(self, case: Case, where: str) -> tuple[Mapping[Any, np.ndarray], Mapping[Any, np.ndarray]]:
        """Both models on one case: every matched tensor's real value (dequantized), by the pairs'
        ``float_key`` and ``quant_key``."""

    def folded(self, unmatched: Sequence[str], measured_ops: Mapping[str, str]) -> dict[str, list[str]]:
        """The unmatched float tensors the quantizer folded into another layer, by how (the rows
        measured, ``{tensor: op}``, say where); none by default."""
        return {}


def case_input(case: Case, name: str, position: int, shape: Sequence[int], count: int,
               where: str, path: Path | str) -> np.ndarray:
    """Input ``name`` of a case for the model at ``path``: by name, else by position when the case
    has as many arrays as the model has inputs; its shape must be the model's (same network)."""
    names = list(case)
    if name in case:
        value = np.asarray(case[name])
    elif len(names) == count:
        value = np.asarray(case[names[position]])
    else:
        raise EdgeUsageError(f"{where} has no input {name!r} for {path} (it has: {', '.join(names) or 'none'})")
    if tuple(value.shape) != tuple(shape):
        raise EdgeUsageError(f"input {name!r} of {path} has shape {list(shape)}; "
                             f"{where} gives {list(value.shape)} (not the same network?)")
    return value
