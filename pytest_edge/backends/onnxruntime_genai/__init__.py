"""ONNX Runtime GenAI: model builder folders run by its own generator (decoder LLMs, and Whisper
speech exports in an export folder's ``genai/``).

This module is the backend's manifest (the entry point's ``manifest``): what it registers, known
without importing backend.py."""

from __future__ import annotations

from ..base import Declared

# A Whisper export for GenAI: the model builder's folder inside the export's (beside its config.json
# and generation_config.json), as the builder writes it at fp32 for the CPU provider.
SPEECH_FOLDER = "genai"
SPEECH_FILES = tuple(f"{SPEECH_FOLDER}/{name}" for name in (
    "encoder.onnx", "encoder.onnx.data", "decoder.onnx", "decoder.onnx.data", "genai_config.json",
    "audio_processor_config.json", "tokenizer.json", "tokenizer_config.json"))


def manifest() -> list[Declared]:
    return [Declared("onnxruntime-genai", "pytest_edge.backends.onnxruntime_genai.backend:backends",
                     ".onnx", decodes=True, runs_tensors=False)]
