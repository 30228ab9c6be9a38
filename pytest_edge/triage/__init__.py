"""Triage of a mismatch: the ladder of delegate-free siblings (:mod:`.ladder`), the per-node
comparison of a graph's configurations (:mod:`.nodes`: ONNX Runtime's), the ETDump re-run of
ExecuTorch (:mod:`.etdump`), and the per-layer quantization table (:mod:`.quant`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .etdump import etdump_divergence
    from .nodes import node_divergence

__all__ = ["etdump_divergence", "node_divergence"]


def __getattr__(name: str) -> Any:
    # On first use: every check reads .cross_isa's verdict names; the triage itself runs on a mismatch only.
    if name == "etdump_divergence":
        from .etdump import etdump_divergence

        return etdump_divergence
    if name == "node_divergence":
        from .nodes import node_divergence

        return node_divergence
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
