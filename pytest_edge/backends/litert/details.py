"""What LiteRT's interpreter hands us as dicts of a fixed shape, typed with the keys we read: a
tensor's entry of ``Interpreter.get_tensor_details()`` (``get_input_details()`` and
``get_output_details()`` give the same entries) and an op's of ``Interpreter._get_ops_details()``.
TypedDicts rather than classes, since the runtime makes them: read as they come, never copied."""

from __future__ import annotations

from typing import TypedDict

import numpy as np


class QuantizationParameters(TypedDict, total=False):
    """A tensor's ``quantization_parameters``: per-tensor or per-axis scales and zero points."""

    scales: np.ndarray
    zero_points: np.ndarray
    quantized_dimension: int


class TensorDetail(TypedDict, total=False):
    """One entry of ``Interpreter.get_tensor_details()`` (or ``get_input_details()``)."""

    index: int
    name: str
    shape: np.ndarray
    shape_signature: np.ndarray  # -1 for a dynamic dimension
    dtype: type[np.generic]  # np.float32
    quantization_parameters: QuantizationParameters


class OpDetail(TypedDict):
    """One entry of ``Interpreter._get_ops_details()``: a node and its tensors' indices."""

    index: int
    op_name: str
    inputs: np.ndarray  # -1 for an absent optional input
    outputs: np.ndarray
