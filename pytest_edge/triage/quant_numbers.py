"""Affine quantization of one tensor (per tensor or per axis): its parameters as LiteRT reports them,
and the conversions between real values and quantized integers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

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
