"""sherpa-onnx (k2-fsa): Whisper exports by its own exporter, ``scripts/whisper/export-onnx.py`` of
its repository (speech only, edge_asr; docs/speech.md).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared

FOLDER = "sherpa-onnx"  # the exporter's files, inside the export's folder
# The exporter names its files <name>-encoder.onnx, <name>-decoder.onnx and <name>-tokens.txt after
# its --model; an export folder holds them under the name "whisper".
NAME = "whisper"
ENCODER, DECODER, TOKENS = (f"{FOLDER}/{NAME}-{part}" for part in ("encoder.onnx", "decoder.onnx", "tokens.txt"))


def manifest() -> list[Declared]:
    return [Declared("sherpa-onnx", "pytest_edge.backends.sherpa_onnx.backend:backends", ENCODER, runs_tensors=False)]
