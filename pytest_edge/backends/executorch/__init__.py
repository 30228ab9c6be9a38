"""ExecuTorch: .pte programs, their delegate coverage, ETDump intermediates, its LLM export.

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("executorch", "pytest_edge.backends.executorch.backend:backends",
                     ".pte", reference_priority=20, decodes=True)]
