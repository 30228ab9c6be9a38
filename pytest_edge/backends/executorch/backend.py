"""ExecuTorch through ``executorch.runtime``; coverage read from the ``.pte`` file itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base import Backend, TensorBackend, LoadedModel
from ..shapes import LoadShapes
from ..decoder import Decoder, DecoderRuntime
from ..quant_pair import QuantPair, QuantPairs
from ..speech import Recognizer, SpeechRuntime
from . import SPEECH_FILES  # the manifest's
from .model import ExecuTorchModel
# The runtime's helpers, by the backend's name too (tests/test_bad_input.py: explain_error).
from .runtime import ERROR_CODES, explain_error, import_runtime_alone, program_bytes, pte_problem  # noqa: F401
from .runtime import data_file, register_quantized_kernels  # noqa: F401


class ExecuTorchDecoders(DecoderRuntime):
    """ExecuTorch's LLM export (executorch/decoder.py)."""

    kv_cache = "static (mutable buffers of max_context positions, allocated at load)"

    def __init__(self, name: str) -> None:
        self.name = name

    def config_of(self, artifact: Path) -> Any:
        """What ExecuTorch's LLM export writes into the .pte (its metadata methods: llm_metadata);
        None for a .pte without them, whose hand-written ``<stem>.json`` is read instead."""
        from .llm_metadata import from_pte

        return from_pte(artifact)

    def open(self, path: Path, config: Any, threads: int) -> Decoder:
        from .decoder import ExecuTorchDecoder

        if threads:
            from executorch.extension.pybindings import portable_lib

            portable_lib._unsafe_reset_threadpool(threads)
        return ExecuTorchDecoder(path, config, threads, self.name)


class EtdumpPairs(QuantPairs):
    """Float and int8 programs, not delegated, through ETDump (quant_pair.py)."""

    kind = "int8"

    def open(self, float_model: Path, quant_model: Path) -> QuantPair:
        from .quant_pair import EtdumpPair  # the runtime's graph reader, only for triage quant

        return EtdumpPair(float_model, quant_model)


class ExecuTorchSpeech(SpeechRuntime):
    """optimum-executorch's Whisper program (executorch/speech.py)."""

    files = SPEECH_FILES

    def open(self, folder: Path, threads: int) -> Recognizer:
        from .speech import ExecuTorchRecognizer

        return ExecuTorchRecognizer(folder, threads)

    def file_figures(self, folder: Path) -> tuple[tuple[str, int], ...]:
        """The exporter's constant methods (``get_vocab_size``, ``get_max_seq_len`` ...), read from
        the program's flatbuffer without loading it."""
        from .speech import program_figures

        found = program_figures(folder / SPEECH_FILES[0])
        return tuple((name, int(value)) for name, value in found.items() if isinstance(value, (int, bool)))


class ExecuTorchBackend(TensorBackend):
    name = "executorch"
    suffix = ".pte"
    reference_priority = 20
    runtime_module = "executorch.runtime"
    distribution = "executorch"
    device_why_not = ("ExecuTorch is not provisioned on qemu devices: its aarch64 wheel needs torch's "
                      "(~430 MB), too slow to install and start under emulation")
    # No delegate-free sibling: triage re-runs the .pte with ETDump (triage.etdump).
    triage_method = "etdump"
    decoders = ExecuTorchDecoders("executorch")
    quant_pairs = EtdumpPairs()
    speech = ExecuTorchSpeech()  # beside its tensor models and decoders: Whisper (edge_asr)

    def weights_file(self, artifact: Path) -> Path | None:
        return data_file(artifact)

    def import_runtime(self) -> None:
        # The runtime alone: a measuring process (spawned or forked from a zygote that ran this)
        # starts in ~1 s instead of ~5.4 s. Runtime.get() loads the kernel library, part of the
        # runtime's baseline, not of the first model's memory. The .pte reader (exir) that
        # coverage needs is imported by the first coverage, which a measuring process never asks.
        import_runtime_alone()
        from executorch.runtime import Runtime

        Runtime.get()
        register_quantized_kernels()

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        if threads:
            from executorch.extension.pybindings import portable_lib

            portable_lib._unsafe_reset_threadpool(threads)
        return ExecuTorchModel(Path(path).read_bytes(), path)


def backends() -> list[Backend]:
    return [ExecuTorchBackend()]
