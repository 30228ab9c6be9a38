"""Rockchip RKNPU (RK3588 and its family) through rknn-toolkit2: an ``.onnx`` built for the chip by
the toolkit and run in the toolkit's simulator on this host, judged against the goldens like any
backend. The toolkit pins NumPy 1.x, so its worker runs in an environment pytest-edge makes from
this folder's requirements (devices/backend_env.py).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared

# The platforms registered (float16, and int8 as ``-int8``); the toolkit's others are named
# (backend.py's KNOWN).
PLATFORMS = ("rk3588", "rk3576", "rk3566", "rk3568", "rk3562")
INT8 = "-int8"
REGISTERED = tuple(f"rknn-{platform}{precision}" for platform in PLATFORMS for precision in ("", INT8))


def manifest() -> list[Declared]:
    """The registered targets (backend.py's ``backends``): named, never defaults."""
    return [Declared(name, "pytest_edge.backends.rknn.backend:backends", ".onnx", named_only=True)
            for name in REGISTERED]
