"""ncnn: pnnx's .ncnn.param/.bin, CPU, fp16 and Vulkan variants.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("ncnn", "pytest_edge.backends.ncnn.backend:backends", ".ncnn.param")]
