"""ONNX Runtime GenAI: a model builder folder run by GenAI's own generator, as apps run these
exports. ``og.Model`` reads ``genai_config.json`` beside the decoder, ``Generator.append_tokens``
runs the prompt (or the next token) and ``get_logits`` gives the last position's logits. Greedy, no
sampling; the KV cache is the generator's own. Decoder LLMs and Whisper speech exports (the
builder's folder in an export folder's ``genai/``; its recognizer is speech.py): no tensor models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError
from ..decoder_config import GENAI_CONFIG, genai_decoder
from ..base import Backend
from ..decoder import Decoder, DecoderRuntime
from ..onnxruntime.decoder import refuse_disagreement
from ..speech import Recognizer, SpeechRuntime
from . import SPEECH_FILES  # the manifest's


class GenAIDecoder(Decoder):
    def __init__(self, path: Path, config: Any, threads: int, backend: str) -> None:
        import onnxruntime_genai as og

        folder = Path(path).parent
        if not (folder / GENAI_CONFIG).is_file():
            raise BackendError(f"{path} ({backend}): no {GENAI_CONFIG} beside it: onnxruntime-genai runs "
                               "a model builder folder")
        refuse_disagreement(Path(path), config, backend)  # GenAI runs what the graph says, whatever the file says
        try:
            og_config = og.Config(str(folder))
            og_config.overlay(json.dumps({"model": {"decoder": {"session_options": {
                "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
            self.og, self.model = og, og.Model(og_config)
        except Exception as exc:  # noqa: BLE001 - onnxruntime-genai raises its own classes
            raise BackendError(f"{path} ({backend}): cannot load: {exc}") from None
        self.config = config
        self.reset()

    def reset(self) -> None:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.config.max_context, do_sample=False)
        self.generator = self.og.Generator(self.model, params)

    def step(self, ids: Sequence[int]) -> np.ndarray:
        self.generator.append_tokens(list(ids))
        return np.asarray(self.generator.get_logits(), np.float32).reshape(-1, self.config.vocab_size)[-1].copy()


class GenAIDecoders(DecoderRuntime):
    kv_cache = "the generator's own (genai_config.json: past_present_share_buffer)"

    def refuses(self, artifact: Path) -> str | None:
        if genai_decoder(Path(artifact).parent) == Path(artifact):
            return None
        return (f"onnxruntime-genai runs a model builder folder: no {GENAI_CONFIG} beside {Path(artifact).name} "
                "naming it")

    def open(self, path: Path, config: Any, threads: int) -> Decoder:
        return GenAIDecoder(path, config, threads, GenAIBackend.name)


class GenAISpeech(SpeechRuntime):
    files = SPEECH_FILES

    def open(self, folder: Path, threads: int) -> Recognizer:
        from .speech import GenAIRecognizer

        return GenAIRecognizer(folder, threads)


class GenAIBackend(Backend):
    """ONNX Runtime GenAI runs decoder LLMs (edge_llm tests) and recognizes speech (edge_asr, a
    Whisper export by its model builder): no tensor models, no delegate."""

    name = "onnxruntime-genai"
    suffix = ".onnx"
    runtime_module = "onnxruntime_genai"
    distribution = "onnxruntime-genai"
    has_delegate = False
    decoders = GenAIDecoders()
    speech = GenAISpeech()


def backends() -> list[Backend]:
    return [GenAIBackend()]
