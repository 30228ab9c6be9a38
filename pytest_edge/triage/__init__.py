"""Triage of a mismatch: the ladder of delegate-free siblings (:mod:`.ladder`), the per-node
comparison of ONNX Runtime's configurations (:mod:`.onnx`), the ETDump re-run of ExecuTorch
(:mod:`.etdump`), and the per-layer quantization table (:mod:`.quant`)."""

from .etdump import etdump_divergence
from .onnx import onnx_divergence

__all__ = ["etdump_divergence", "onnx_divergence"]
