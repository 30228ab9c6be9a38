"""TensorFlow Lite Micro (the ``tflite-micro`` wheel): a .tflite under the microcontroller runtime's
own kernels, with its tensor arena.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("tflite-micro", "pytest_edge.backends.tflite_micro.backend:backends", ".tflite")]
