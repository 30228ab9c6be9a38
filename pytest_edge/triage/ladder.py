"""Where to look when a backend disagrees with the golden (docs/triage.md): run the same
artifact without the delegate, then name the first operator whose output diverges. A backend
without such a sibling whose runtime exposes every node output in several configurations (ONNX
Runtime: optimized, unoptimized, onnx.reference) is compared with itself node by node; ExecuTorch,
which has neither, is re-run with ETDump and its recorded operator outputs are checked (see
etdump_triage)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends import get_backend, split_device
from ..accuracy.compare import compare_output
from ..errors import EdgeError
from ..files import relative_path
from ..golden import Golden, GoldenCase
from ..accuracy.inputs import feed_order
from ..accuracy.metrics import diverges
from ..core.plan import Plan
from .etdump import etdump_triage
from .layers import layer_triage
from .nodes import node_triage
from .quant import pair_formats
from .runner import Runner

# What triage does for a backend with no delegate-free sibling, by its Backend.triage_method (the
# Intermediates.method its loaded models record): "nodes", one graph in several configurations
# compared node by node; "etdump", the runtime's record of each operator call checked; "layers", a
# toolkit's own per-layer accuracy analysis of its quantized build (rknn-toolkit2's).
TRIAGE_METHODS = {"nodes": node_triage, "etdump": etdump_triage, "layers": layer_triage}


def as_seen_by_triage(plan: Plan, golden: Golden) -> Golden:
    """The golden as triage should see it. Triage takes "the golden comes from the sibling backend"
    to mean "from the same artifact"; with reference= it came from another model's artifact, so the
    reference is labelled with that artifact too (no backend has that name, and messages read
    "the reference onnxruntime-cpu on tiny_cnn.onnx")."""
    if plan.reference is None:
        return golden
    ref = golden.meta.reference
    label = f"{ref.backend} on {ref.artifact or golden.model}"
    return replace(golden, meta=replace(golden.meta, reference=replace(ref, backend=label)))


def sibling_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any], case: GoldenCase) -> list[str]:
    """The triage lines of a mismatch: the delegate-free sibling's (see _delegate_triage), then for a
    ``reference=`` test, the command that compares the two artifacts layer by layer on its golden inputs."""
    return _delegate_triage(runner, plan, golden, feeds, case) + quant_hint(plan, golden)


def quant_hint(plan: Plan, golden: Golden) -> list[str]:
    """``pytest-edge triage quant REFERENCE ARTIFACT --inputs GOLDEN`` for a test that names a
    reference model with an artifact of the same format (the float model of a quantized one)."""
    artifact = plan.artifact
    if plan.reference is None or artifact is None:
        return []
    if artifact.suffix.lower() not in pair_formats():  # a format triage quant compares (Backend.quant_pairs)
        return []
    reference = plan.reference.artifact(artifact.suffix)
    if reference is None:
        return []
    float_model, tested, inputs = (shlex.quote(relative_path(Path(p), Path.cwd())) for p in (reference, artifact, golden.folder))
    return [f"triage: to see which layer loses accuracy, on this test's golden inputs: "
            f"pytest-edge triage quant {float_model} {tested} --inputs {inputs}"]


def _delegate_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any], case: GoldenCase) -> list[str]:
    """Run the same artifact without the delegate (litert -> litert-ref): if that agrees with the
    golden, the delegate's kernels diverge; if not, the artifact itself does (export,
    conversion, quantization)."""
    backend = plan.backend
    device = split_device(backend)[1]
    sibling = get_backend(backend).reference_sibling
    if sibling is not None and sibling == golden.reference_backend and device is None:
        return [f"triage: the golden comes from {sibling} on the same artifact: the {backend} "
                "delegate's kernels diverge, not the artifact" + first_divergence(runner, plan, sibling, feeds, golden)]
    method = TRIAGE_METHODS.get(get_backend(backend).triage_method or "")
    if sibling is None and method is not None:
        return method(runner, plan, golden, feeds, case)
    if sibling is None or (device is None and get_backend(sibling).unavailable_reason()):
        return []
    if device is not None:
        sibling = f"{sibling}@{device}"  # on the same device
    try:
        info = runner.load(plan.on(sibling))
        outputs = runner.run(info, feeds)
        order = feed_order(golden.outputs_spec, info.outputs)
    except (EdgeError, ValueError):
        return []
    disagree = [ref.name for ref, position in zip(golden.outputs_spec, order)
                if compare_output(ref.name, case.outputs[ref.name], outputs[position],
                                  plan.tolerance(ref.name, sibling)).problems]
    artifact = info.artifact.name
    if disagree:
        return [f"triage: {sibling} on the same {artifact} also differs from the golden "
                f"({', '.join(disagree)}): the artifact itself disagrees with the reference "
                f"{golden.reference_backend} (look at its export/conversion, then quantization)"]
    return [f"triage: {sibling} on the same {artifact} matches the golden: the {backend} delegate's "
            "kernels diverge, not the artifact" + first_divergence(runner, plan, sibling, feeds, golden)]


def first_divergence(runner: Runner, plan: Plan, sibling: str, feeds: list[Any], golden: Golden) -> str:
    """The first operator (in graph order) whose output differs between a backend and its
    delegate-free sibling, where the runtime exposes intermediate tensors (LiteRT)."""
    found = []
    for name in (plan.backend, sibling):
        try:
            info = runner.load(plan.on(name))
            found.append(runner.intermediates(info, feeds))
        except EdgeError:
            return ""
    mine, theirs = found
    if not mine or not theirs:
        return ""
    if not mine.delegated:
        return ("; this runtime does not delegate when intermediate tensors are preserved, so the "
                "diverging operator cannot be named")
    tolerance = plan.tolerance(golden.outputs_spec[0].name)
    atol, rtol = float(tolerance.atol or 0.0), float(tolerance.rtol or 0.0)
    for tensor in theirs.order:
        err = diverges(mine.tensors.get(tensor), theirs.tensors.get(tensor), atol, rtol)
        if err is not None:
            return (f"; first divergence: tensor {theirs.names.get(tensor, tensor)!r}, the output of "
                    f"{mine.producers[tensor]} (max |Δ| {err:.3g} against {sibling})")
    return ""
