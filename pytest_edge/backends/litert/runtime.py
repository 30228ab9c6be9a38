"""Which LiteRT runtime this machine has (ai-edge-litert, else the older tflite-runtime) and its
``interpreter`` module: what the backend, its decoder and its quantization pair build an
``Interpreter`` from, below all three so none imports the backend back."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

_CANDIDATES = (("ai_edge_litert", "ai-edge-litert"), ("tflite_runtime", "tflite-runtime"))


def installed_runtime() -> tuple[str, str] | None:
    """(module, distribution) of the LiteRT runtime this machine has: ai-edge-litert, else the older
    tflite-runtime; None for neither. The one place that chooses between them."""
    for module, dist in _CANDIDATES:
        if importlib.util.find_spec(module) is not None:
            return module, dist
    return None


def interpreter_module() -> Any | None:
    """The chosen runtime's ``interpreter`` module (what every LiteRT reader here builds an
    ``Interpreter`` from); None where neither runtime is installed."""
    found = installed_runtime()
    return importlib.import_module(f"{found[0]}.interpreter") if found else None
