"""What a result from another instruction set means: a mismatch between a golden recorded on one
ISA and the same artifact run on another (x86-64 host, emulated or real aarch64 device) is said to
be the ISA's, with the worst element and the first node whose output differs between the two
machines; an emulated device's timing and memory are not the target's, so they are not judged."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..backends import Intermediates, split_device
from ..backends.intermediates import NodeRuns, NodeWalk
from ..errors import EdgeError
from ..files import sha256_file
from ..golden import Golden, GoldenCase
from ..accuracy.inputs import feed_order
from ..core.plan import Plan
from ..worker.pool import ModelInfo
from .runner import Runner



def _where(arch: str, emulated: str | None) -> str:
    return arch + (f" (emulated: {emulated})" if emulated else "")


def worst_element(expected: np.ndarray, actual: np.ndarray) -> tuple[tuple[int, ...], Any, Any] | None:
    """Index and the two values where ``actual`` is farthest from ``expected`` (NaN/Inf count as farthest)."""
    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape or e.size == 0:
        return None
    with np.errstate(all="ignore"):
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return index, a[index].item(), e[index].item()


def cross_isa_note(runner: Runner, plan: Plan, info: ModelInfo, golden: Golden, host_arch: str | None,
                   case: GoldenCase, outputs: Sequence[np.ndarray], out_order: Sequence[int]) -> list[str]:
    """The line explaining a mismatch as an ISA difference, when the golden was recorded on another
    ISA from this very artifact; [] otherwise (another artifact, same ISA, ISA not recorded).
    ``host_arch``: this machine's ISA, for a model that runs here (no device's machine block)."""
    # A device's worker describes its machine (arch, "emulated" on qemu); this machine is not emulated.
    isa = (info.device.arch or None) if info.device else host_arch
    emulated = (info.device.emulated or None) if info.device else None
    golden_isa = golden.meta.reference.isa
    if plan.reference is not None or not golden_isa or not isa or golden_isa == isa:
        return []
    digest = sha256_file(info.artifact)
    if golden.meta.artifacts.get(info.artifact.name) != digest:
        return []  # another artifact (or a stale golden, reported on its own): not the ISA's doing
    worst = ""
    for ref, position in zip(golden.outputs_spec, out_order):
        found = worst_element(case.outputs[ref.name], outputs[position])
        if found is not None and found[1] != found[2]:
            index, got, want = found
            worst = (f"; worst element: output {ref.name!r} at index {index}: {got!r} on {isa}, "
                     f"{want!r} in the golden ({golden_isa})")
            break
    line = (f"cross-ISA: {plan.backend} ran the same artifact the golden was recorded from ({info.artifact.name}, "
            f"sha256 {digest[:12]}) on {_where(isa, emulated)}; the golden was recorded by {golden.reference_backend} on "
            f"{golden_isa}: the ISA differs ({golden_isa} vs {isa}), so these outputs come from the runtime's "
            f"{isa} kernels, not from the artifact{worst}")
    return [line + _node_divergence(runner, plan, golden, case)]


def _twin(plan: Plan, golden: Golden) -> str | None:
    """The same runtime on the golden's machine: the host for a device backend, the golden's
    device for a host backend checked against a golden recorded on a device."""
    base, device = split_device(plan.backend)
    reference_base, reference_device = split_device(golden.reference_backend)
    if device is not None and reference_device is None:
        return base
    if device is None and reference_device is not None and reference_base == base:
        return golden.reference_backend
    return None


def _values(found: Intermediates) -> Mapping[Any, Any]:
    # Of a "nodes" method, its unoptimized run (NodeWalk.unoptimized names it), whose tensors are the
    # graph's own on every machine (the optimized graphs differ per ISA: other fusions); else the
    # operators' outputs.
    details = found.details
    runs = details.runs if isinstance(details, NodeRuns) else {}
    unoptimized = details.unoptimized if isinstance(details, NodeWalk) else None
    return runs.get(unoptimized) or found.tensors or {}


def _node_divergence(runner: Runner, plan: Plan, golden: Golden, case: GoldenCase) -> str:
    """"; first node that differs between the two machines: ..." by their intermediate tensors."""
    twin = _twin(plan, golden)
    if twin is None:
        return ""
    found = []
    for backend in (plan.backend, twin):
        try:
            info = runner.load(plan.on(backend))
            feeds: list[Any] = [None] * len(info.inputs)
            for spec, position in zip(golden.inputs_spec, feed_order(golden.inputs_spec, info.inputs)):
                feeds[position] = case.inputs[spec.name]
            found.append(runner.intermediates(info, feeds))
        except (EdgeError, ValueError):
            return ""
    mine, theirs = found
    if not mine or not theirs:
        return ""
    a_values, b_values = _values(mine), _values(theirs)
    for tensor in mine.order:
        a, b = a_values.get(tensor), b_values.get(tensor)
        if a is None or b is None or np.shape(a) != np.shape(b) or np.asarray(a).dtype.kind not in "biuf":
            continue
        if np.array_equal(a, b, equal_nan=True):
            continue
        worst = worst_element(b, a)
        where = f" (worst at index {worst[0]}: {worst[1]!r} on {plan.backend}, {worst[2]!r} on {twin})" if worst else ""
        name = mine.names.get(tensor, tensor)
        return (f"; first node whose output differs between the two machines: tensor {name!r}, the output of "
                f"{mine.producers.get(tensor, '?')}{where}")
    return "; every intermediate tensor compared agrees between the two machines"
