"""LiteRT-LM: a ``.litertlm`` run by its own Engine and Session, as apps run it (decoders only).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared


def manifest() -> list[Declared]:
    return [Declared("litert-lm", "pytest_edge.backends.litert_lm.backend:backends",
                     ".litertlm", decodes=True, runs_tensors=False)]
