"""Signature alignment: which tensor of a loaded model each tensor of the golden's signature is,
and what makes them unusable together (a reference= test names both models)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..backends import TensorSpec
from ..errors import BackendError, EdgeUsageError
from . import Golden
from ..accuracy.inputs import feed_order, shapes_differ, signature_problems
from ..core.plan import Plan
from ..worker.pool import ModelInfo


def reference_problems(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec], plan: Plan,
                        golden: Golden, kind: str) -> tuple[list[int], list[str]]:
    """Tensor matching and its problems for a reference= test, naming both models."""
    tested, ref_model = plan.model.name, golden.model
    try:
        order = feed_order(reference, actual)
    except ValueError:
        return [], [f"{tested} has {len(actual)} {kind}s ({', '.join(s.name for s in actual)}), "
                    f"{ref_model} has {len(reference)} ({', '.join(s.name for s in reference)})"]
    problems = []
    for ref, index in zip(reference, order):
        act = actual[index]
        pair = f"{kind} {act.name!r} of {tested} (matched to {ref.name!r} of {ref_model})"
        if np.dtype(ref.dtype) != np.dtype(act.dtype):
            problems.append(f"{pair}: dtype {act.dtype}, {ref_model} has {ref.dtype}")
        if shapes_differ(ref.shape, act.shape):
            problems.append(f"{pair}: shape {list(act.shape)}, {ref_model} has {list(ref.shape)}")
    return order, problems


def quantized_io_hint(problems: Sequence[str]) -> str:
    """For an artifact with integer I/O checked against a float golden: what to do instead."""
    if any(re.search(r": dtype u?int(8|16), \S+ has float", p) for p in problems):
        return ("; reference= does not quantize inputs or dequantize outputs: export the quantized model with "
                "float inputs and outputs, or compare the two artifacts layer by layer with "
                "pytest-edge triage quant FLOAT.tflite INT8.tflite")
    return ""


def aligned(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec], info: ModelInfo,
             golden: Golden, kind: str, plan: Plan | None = None) -> list[int]:
    if plan is not None and plan.reference is not None:
        order, problems = reference_problems(reference, actual, plan, golden, kind)
        if not problems:
            return order
        # The pairing of models is the user's choice, so this is a usage error, not a runtime's.
        raise EdgeUsageError(
            f"signature mismatch: {plan.model.name} ({info.artifact.name} on {info.backend}) cannot be checked "
            f"against the golden of reference model {golden.model} ({golden.folder / 'meta.json'}): "
            + "; ".join(problems) + " (reference= needs the same input and output names, or the same "
            "order, with the same shapes and dtypes)" + quantized_io_hint(problems))
    try:
        order = feed_order(reference, actual)
    except ValueError as exc:
        problems = [f"{kind}s: {exc}"]
    else:
        problems = signature_problems(reference, actual, order, kind)
        if not problems:
            return order
    raise BackendError(f"signature mismatch: {info.artifact} on {info.backend} does not match the "
                       f"golden signature recorded in {golden.folder / 'meta.json'} "
                       f"(from {golden.reference_backend}): " + "; ".join(problems))
