"""Triage of a mismatch: the ladder of delegate-free siblings (:mod:`.ladder`), the per-node
comparison of a graph's configurations (:mod:`.nodes`: ONNX Runtime's), the ETDump re-run of
ExecuTorch (:mod:`.etdump`), and the per-layer quantization table (:mod:`.quant`)."""

from .etdump import etdump_divergence
from .nodes import node_divergence

__all__ = ["etdump_divergence", "node_divergence"]
