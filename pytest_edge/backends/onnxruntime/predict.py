"""Predicted delegate coverage for mobile execution providers that are not on this machine.

ONNX Runtime ships its own usability checker with the support rules of the NNAPI and Core ML
execution providers (``onnxruntime.tools.mobile_helpers.usability_checker``); this runs it on the
``.onnx`` artifact so ``max_fallback`` means something on a CI machine without an NPU.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ...errors import BackendError
from ..base import Coverage

_TARGETS = {"nnapi": "NnapiExecutionProvider", "coreml": "CoreMLExecutionProvider"}


def predicted_coverage(artifact: Path, target: str, backend: str) -> Coverage:
    if artifact.suffix != ".onnx":
        raise BackendError(f"{backend}: target={target!r} predicts ONNX Runtime execution-provider coverage "
                           f"and needs an .onnx artifact, not {artifact}")
    try:
        import onnx
        from onnxruntime.tools.mobile_helpers import usability_checker as checker
    except ImportError as exc:
        raise BackendError(f"{backend}: target={target!r} needs the onnx package and onnxruntime's tools "
                           f"({exc})") from exc
    model = onnx.shape_inference.infer_shapes(onnx.load(str(artifact)), strict_mode=False)
    if target == "nnapi":
        info = checker.check_nnapi_partitions(model, require_fixed_input_sizes=False)
    else:
        info = checker.check_coreml_partitions(model, False, "coreml_supported_mlprogram_ops.md")
    ops = info.supported_ops_checker
    unsupported = Counter(n.op_type for n in model.graph.node if not ops.is_op_supported(n))
    fallback = info.num_nodes - info.num_supported_nodes
    return Coverage(
        total_ops=info.num_nodes, delegated_ops=info.num_supported_nodes, fallback_ops=fallback,
        partitions=info.num_partitions, fallback_op_names=dict(unsupported),
        delegates=[_TARGETS[target]], method="predicted",
        # nodes may be unsupported for dynamic shapes or rank as well as for their op type
        approximate=sum(unsupported.values()) != fallback)
