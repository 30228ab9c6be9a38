"""ONNX Runtime: the CPU and other execution providers, its decoder LLMs, per-node intermediates, mobile EP prediction.

This module is the backends' manifest (the entry point's ``manifest``): which providers are
registered, known without importing onnxruntime or backend.py."""

from __future__ import annotations

import importlib.util
import platform
from functools import lru_cache

from ... import installed
from ..base import Declared

# Providers that do not run the model on this machine's hardware.
_NOT_LOCAL = {"AzureExecutionProvider"}


def ep_short_name(provider: str) -> str:
    return provider.removesuffix("ExecutionProvider").lower()


# Distributions of onnxruntime built with other execution providers (they install the same
# ``onnxruntime`` package): with any of them, the providers are asked of onnxruntime itself.
_OTHER_WHEELS = ("onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml", "onnxruntime-qnn",
                 "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-cann", "onnxruntime-training",
                 "ort-nightly", "ort-nightly-gpu")


@lru_cache(maxsize=1)
def _local_providers() -> tuple[str, ...]:
    """The execution providers of the installed wheel that run on this machine. PyPI's plain
    ``onnxruntime`` wheel for Linux has the CPU one only (plus Azure, a remote service), which is
    known without importing onnxruntime: the pytest process then never pays its ~0.2 s import."""
    if importlib.util.find_spec("onnxruntime") is None:
        return ()
    if (platform.system() == "Linux" and installed.is_installed("onnxruntime")
            and not any(map(installed.is_installed, _OTHER_WHEELS))):
        return ("CPUExecutionProvider",)
    import onnxruntime

    return tuple(p for p in onnxruntime.get_available_providers() if p not in _NOT_LOCAL)


def manifest() -> list[Declared]:
    """``onnxruntime-cpu`` always, plus every other local provider the installed wheel offers
    (backend.py's ``backends``, declared)."""
    providers = ["CPUExecutionProvider", *(p for p in _local_providers() if p != "CPUExecutionProvider")]
    return [Declared(f"onnxruntime-{ep_short_name(p)}", "pytest_edge.backends.onnxruntime.backend:backends", ".onnx",
                     reference_priority=0 if p == "CPUExecutionProvider" else None,
                     predicts_targets=("nnapi", "coreml"), decodes=p == "CPUExecutionProvider")
            for p in providers]
