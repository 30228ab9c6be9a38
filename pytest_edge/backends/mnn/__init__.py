"""MNN: .mnn from mnnconvert, CPU and GPU forward types.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("mnn", "pytest_edge.backends.mnn.backend:backends", ".mnn")]
