"""OpenVINO: IR, ONNX and .tflite on the CPU plugin, reduced-precision variants.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("openvino", "pytest_edge.backends.openvino.backend:backends",
                     ".onnx", suffixes=(".xml", ".onnx", ".tflite"), predicts_targets=("gpu", "npu"))]
