"""Arm Ethos-U microNPUs (U55, U65, U85): compile-time targets, int8 .tflite compiled by vela.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

import os

from ..base import Declared

# The configurations registered (one per family, the sizes the field ships most); vela's others are
# named: ethos-u55-32/64/256, ethos-u65-512, ethos-u85-128/512/1024/2048.
REGISTERED = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")
# The Python of the TOSA reference model's own environment (tosa_reference.py); tosa-ref is
# registered where it is set.
TOSA_PYTHON_VARIABLE = "PYTEST_EDGE_TOSA_PYTHON"


def manifest() -> list[Declared]:
    """The registered targets, and tosa-ref where its environment is named (backend.py's ``backends``)."""
    load = "pytest_edge.backends.ethos_u.backend:backends"
    return [*(Declared(name, load, ".tflite", suffixes=(".tflite", ".pte"), compile_only=True, runs_tensors=False) for name in REGISTERED),
            *([Declared("tosa-ref", load, ".tosa")] if os.environ.get(TOSA_PYTHON_VARIABLE) else [])]
