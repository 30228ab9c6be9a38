"""ONNX Runtime: one backend per execution provider (``onnxruntime-cpu``, ``onnxruntime-xnnpack``...)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ...errors import BackendError, EdgeUsageError
from ..base import Backend, TensorBackend, Coverage, LoadedModel, TensorSpec, file_head, unusable_artifact
from ..shapes import LoadShapes
from ..decoder import Decoder, DecoderRuntime
from .session import new_session
from . import _NOT_LOCAL, _local_providers, ep_short_name  # noqa: F401 - the manifest's, named here too

if TYPE_CHECKING:  # the speech and triage-quant capabilities are made on first use (OrtBackend.speech, .quant_pairs):
    # their modules (backends/speech.py, quant_pair.py) are not a tensor check's, in the pytest process or its worker
    from ..intermediates import Intermediates  # triage's, made on a mismatch (.intermediates)
    from ..quant_pair import QuantPairs
    from ..speech import SpeechRuntime

_ORT_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16",
    "tensor(int32)": "int32", "tensor(int64)": "int64", "tensor(bool)": "bool",
}


def _spec(arg) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else (d or None) for d in arg.shape)
    return TensorSpec(arg.name, shape, _ORT_DTYPES.get(arg.type, arg.type))


class OrtModel(LoadedModel):
    def __init__(self, session, provider: str, path: Path | None = None, threads: int | None = None) -> None:
        self.session = session
        self.provider = provider
        # Where the model came from, for the per-node triage (``intermediates``); a third-party
        # backend that builds OrtModel(session, provider) itself gets it from the session.
        model_path = path or getattr(session, "_model_path", None)
        self.path = Path(model_path) if model_path else None
        self.threads = threads
        self.inputs = [_spec(a) for a in session.get_inputs()]
        self.outputs = [_spec(a) for a in session.get_outputs()]
        self._names = [s.name for s in self.inputs]

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(None, dict(zip(self._names, feeds))))

    def bind(self, feeds: Sequence[np.ndarray]):
        session, named = self.session, dict(zip(self._names, feeds))
        return lambda: session.run(None, named)

    def delegates(self) -> list[str]:
        return [self.provider]

    def intermediates(self, feeds: Sequence[np.ndarray]) -> Intermediates | None:
        """Every node output of the ONNX graph, as this session's configuration (ORT_ENABLE_ALL)
        computes it, with ORT_DISABLE_ALL's and onnx.reference's values: see node_intermediates."""
        if self.path is None:
            return None
        from .intermediates import node_intermediates  # only on a mismatch

        final = dict(zip((s.name for s in self.outputs), self.run(feeds)))
        level = self.session.get_session_options().graph_optimization_level
        return node_intermediates(self.path, self.provider, dict(zip(self._names, feeds)),
                                  threads=self.threads, final=final, level=level)

    def coverage(self) -> Coverage | None:
        """Node placement as the session recorded it (``session.record_ep_graph_assignment_info``)."""
        try:
            subgraphs = self.session.get_provider_graph_assignment_info()
        except Exception:  # noqa: BLE001 - older wheels lack it; a session made without
            return None  # session.record_ep_graph_assignment_info (a third-party backend) raises Fail
        delegated = fallback = partitions = 0
        fallback_names: Counter[str] = Counter()
        # Each node by its type and name in the (optimised) graph, where it is assigned.
        taken: list[str] = []
        left: dict[str, str] = {}
        for sub in subgraphs:
            nodes = sub.get_nodes()
            if sub.ep_name == self.provider:
                delegated += len(nodes)
                partitions += 1
                taken += [f"{n.op_type} {getattr(n, 'name', '')}".strip() for n in nodes]
            else:
                fallback += len(nodes)
                fallback_names.update(n.op_type for n in nodes)
                left.update({f"{n.op_type} {getattr(n, 'name', '')}".strip(): f"assigned to {sub.ep_name}"
                             for n in nodes})
        if self.provider == "CPUExecutionProvider":
            # The CPU EP is the target itself: every node on it is "delegated", in one partition.
            partitions = 1 if delegated else 0
        return Coverage(
            total_ops=delegated + fallback, delegated_ops=delegated, fallback_ops=fallback,
            partitions=partitions, fallback_op_names=dict(fallback_names),
            delegates=[self.provider], method="runtime",
            # Nodes are told apart by name: a graph whose nodes are unnamed (or share names) gives none.
            **({"delegated_op_ids": taken, "fallback_reasons": left}
               if len(set(taken) | set(left)) == delegated + fallback and all(" " in op for op in [*taken, *left])
               else {}))


class OrtDecoders(DecoderRuntime):
    """Decoder LLMs with the KV cache as graph inputs/outputs (onnxruntime/decoder.py), on the CPU EP."""

    kv_cache = "dynamic (past/present grow with the context)"

    def __init__(self, name: str) -> None:
        self.name = name

    def folder_decoder(self, folder: Path) -> Path | None:
        """ONNX Runtime GenAI's export folder: the decoder its ``genai_config.json`` names; else an
        Optimum folder's ``model.onnx``."""
        from ..decoder_config import GENAI_CONFIG, genai_decoder

        decoder = genai_decoder(folder)
        if decoder is None and (folder / "model.onnx").is_file():
            decoder = folder / "model.onnx"
        if decoder is not None and not decoder.is_file():
            raise EdgeUsageError(f"{folder / GENAI_CONFIG} names the decoder {decoder.name}, which is not there")
        return decoder

    def open(self, path: Path, config: Any, threads: int) -> Decoder:
        from .decoder import OrtDecoder

        return OrtDecoder(path, config, threads, self.name)


class OrtBackend(TensorBackend):
    runtime_module = "onnxruntime"
    distribution = "onnxruntime"
    suffix = ".onnx"
    # onnx beside it: the worker's ONNX paths (intermediates.py, for node triage) import it.
    device_distributions = ("onnxruntime", "onnx")

    predicts_targets = ("nnapi", "coreml")
    # No delegate-free sibling for the CPU EP: triage compares its own graph node by node
    # (optimized, unoptimized, onnx.reference; OrtModel.intermediates).
    triage_method = "nodes"

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.name = f"onnxruntime-{ep_short_name(provider)}"
        cpu = provider == "CPUExecutionProvider"
        self.reference_sibling = None if cpu else "onnxruntime-cpu"
        # The CPU EP runs the graph as exported, with no delegate: the default golden recorder.
        self.reference_priority = 0 if cpu else None
        self.decoders = OrtDecoders(self.name) if cpu else None

    # Made on first use, each from its module (a subclass may set either, as it could before).
    @property
    def speech(self) -> SpeechRuntime | None:
        """Whisper exports in Optimum's layout on the CPU EP (onnxruntime/speech.py's OrtSpeech)."""
        if "_speech" not in self.__dict__:
            from .speech import OrtSpeech

            self._speech = OrtSpeech() if self.provider == "CPUExecutionProvider" else None
        return self._speech

    @speech.setter
    def speech(self, value: SpeechRuntime | None) -> None:
        self._speech = value

    @property
    def quant_pairs(self) -> QuantPairs | None:
        """A float .onnx against its QDQ model (onnxruntime/quant_pair.py's QdqPairs)."""
        if "_quant_pairs" not in self.__dict__:
            from .quant_pair import QdqPairs

            self._quant_pairs = QdqPairs()
        return self._quant_pairs

    @quant_pairs.setter
    def quant_pairs(self, value: QuantPairs | None) -> None:
        self._quant_pairs = value

    @classmethod
    def variant(cls, name: str) -> Backend | None:
        """``onnxruntime-<ep>`` for a provider the wheel may lack (reported as unavailable)."""
        if not name.startswith("onnxruntime-"):
            return None
        provider = _SHORT_TO_PROVIDER.get(name.removeprefix("onnxruntime-"))
        return cls(provider) if provider else None

    def external_locations(self, artifact: Path) -> tuple[str, ...]:
        """The external data files an ``.onnx`` names (onnxruntime/external_data.py, no onnx import)."""
        from .external_data import external_locations

        return external_locations(artifact)

    def predicted_coverage(self, artifact: Path, target: str) -> Coverage | None:
        from .predict import predicted_coverage

        return predicted_coverage(artifact, target, self.name)

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason:
            return reason
        if self.provider not in _local_providers():
            return f"this onnxruntime wheel has no {self.provider}"
        return None

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        # ONNX Runtime says only "INVALID_PROTOBUF ... Protobuf parsing failed" for these.
        problem = unusable_artifact(file_head(Path(path)), Path(path))
        if problem:
            raise BackendError(problem)
        session = new_session(str(path), self.provider, threads, record_assignment=True)
        return OrtModel(session, self.provider, Path(path), threads)


def backends() -> list[Backend]:
    """``onnxruntime-cpu`` always, plus every other local provider the installed wheel offers."""
    providers = ["CPUExecutionProvider", *(p for p in _local_providers() if p != "CPUExecutionProvider")]
    return [OrtBackend(p) for p in providers]


_SHORT_TO_PROVIDER = {
    "cpu": "CPUExecutionProvider", "xnnpack": "XnnpackExecutionProvider",
    "nnapi": "NnapiExecutionProvider", "coreml": "CoreMLExecutionProvider",
    "cuda": "CUDAExecutionProvider", "openvino": "OpenVINOExecutionProvider",
    "qnn": "QNNExecutionProvider", "dml": "DmlExecutionProvider",
}
