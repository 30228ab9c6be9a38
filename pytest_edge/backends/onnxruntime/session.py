"""One way to open an ONNX Runtime session, shared by the backend's load and the per-node triage."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_session(model: bytes | str, provider: str, threads: int | None, *, level: Any = None,
                save_to: Path | None = None, record_assignment: bool = False):
    """An InferenceSession on ``provider`` (with the CPU provider behind any other), quiet, with
    ``threads`` intra-op threads; optionally at an optimization ``level``, saving the optimized
    graph to ``save_to``, recording which provider runs each node (for coverage)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if record_assignment:
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if level is not None:
        options.graph_optimization_level = level
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if save_to is not None:
        options.optimized_model_filepath = str(save_to)
    providers = [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
    return ort.InferenceSession(model, options, providers=providers)
