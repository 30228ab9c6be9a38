"""The "etdump" triage method (no delegate-free sibling): the program re-run with the runtime's record
of each operator call (ExecuTorch's ETDump; the backend's ``Intermediates``), and what that record
says about a mismatch."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..backends import Intermediates
from ..backends.intermediates import EtdumpRecord
from ..accuracy.compare import compare_output
from ..errors import EdgeError
from ..golden import Golden, GoldenCase
from ..accuracy.inputs import feed_order
from ..accuracy.metrics import diverges
from ..core.plan import Plan
from .runner import Runner, first_tolerance

EXPLOSION = 1e4  # an output this many times larger than anything before it is reported as a jump
LISTED_EVENTS = 4  # recorded operator calls described in the triage line


def etdump_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any], case: GoldenCase) -> list[str]:
    """ExecuTorch has no delegate-free sibling: its .pte is run once more with ETDump (in the worker,
    ``ExecuTorchModel.intermediates``) and what the runtime logged is checked; see etdump_divergence."""
    try:
        info = runner.load(plan)
        found = runner.intermediates(info, feeds)
    except EdgeError as exc:
        artifact = plan.artifact.name if plan.artifact else "the model"
        return [f"triage: {plan.backend}: the ETDump re-run of {artifact} failed: {exc}"]
    if found is None or found.method != "etdump":
        return []
    try:
        order = feed_order(golden.outputs_spec, info.outputs)
    except ValueError:
        order = []
    expected = [(ref.name, case.outputs[ref.name], position, plan.tolerance(ref.name))
                for ref, position in zip(golden.outputs_spec, order)]
    atol, rtol = first_tolerance(plan, golden)
    line = f"triage: {plan.backend} has no delegate-free sibling, so its {info.artifact.name} was re-run with ETDump"
    return [line + etdump_divergence(found, expected, atol, rtol, feeds, golden.reference_backend)]


def _finite_figures(array: np.ndarray) -> tuple[int, int, float]:
    """NaN count, Inf count and the largest finite magnitude of ``array`` (0 when none)."""
    if array.dtype.kind != "f":
        return 0, 0, float(np.abs(array.astype(np.float64)).max(initial=0.0))
    finite = array[np.isfinite(array)]
    return (int(np.isnan(array).sum()), int(np.isinf(array).sum()),
            float(np.abs(finite.astype(np.float64)).max(initial=0.0)))


def _stats(array: np.ndarray) -> str:
    nan, inf, _ = _finite_figures(array)
    text = f"{list(array.shape)} {array.dtype}"
    if array.size and array.dtype.kind in "biuf":
        values = array[np.isfinite(array)] if array.dtype.kind == "f" else array
        if values.size == 1:
            text += f" = {float(values.flat[0]):.3g}"
        elif values.size:
            text += f" in [{float(values.min()):.3g}, {float(values.max()):.3g}]"
    return text + (f" with {nan} NaN, {inf} Inf" if nan or inf else "")


def _kernel_floor(dtype: np.dtype) -> float:
    # Two correct kernels may round differently by a few units in the last place: not a divergence.
    return 4 * float(np.finfo(dtype).eps) if dtype.kind == "f" else 0.0


def etdump_divergence(found: Intermediates, expected: Sequence[tuple[str, np.ndarray, int, Any]],
                      atol: float, rtol: float, feeds: Sequence[Any] = (), reference_backend: str | None = None) -> str:
    """What an ExecuTorch ETDump run (``ExecuTorchModel.intermediates``) tells about a mismatch:
    whether the runtime's own record of the outputs already differs from the golden (``expected``:
    name, golden array, output position, tolerance), the first operator call whose output is NaN/Inf
    or jumps in magnitude, the first non-delegated kernel that differs from PyTorch's kernel re-run
    on the same inputs, and what cannot be named inside delegate partitions, which log only their
    boundary tensors."""
    record = found.details if isinstance(found.details, EtdumpRecord) else EtdumpRecord()
    events, partitions, kernels = record.events, record.partitions, record.kernels
    delegate = next((e.label.split(" partition")[0] for e in events if e.kind == "delegate"), "delegate")
    if found.unavailable:
        return f", which recorded nothing: {found.unavailable}"
    counts = (f"{partitions} {delegate} partition call{'s' if partitions != 1 else ''}, "
              f"{kernels} non-delegated kernel call{'s' if kernels != 1 else ''}")
    parts = [f"{len(events)} operator calls recorded ({counts})"]
    # 1. The runtime's own record of the outputs against the golden.
    recorded = record.program_outputs
    differing, matched = [], 0
    for name, golden_array, position, tolerance in expected:
        if position >= len(recorded) or recorded[position] is None:
            continue
        matched += 1
        problems = compare_output(name, golden_array, recorded[position], tolerance).problems
        if problems:
            err = diverges(np.asarray(recorded[position]), np.asarray(golden_array), 0.0, 0.0)
            differing.append(f"{name}" + (f", max |Δ| {err:.3g}" if err is not None and np.isfinite(err) else ""))
    if differing:
        parts.append(f"the runtime's own record of its outputs already differs from the golden ({'; '.join(differing)}): "
                     "the divergence is inside the runtime, not in pytest-edge's reading of the outputs")
    elif matched:
        parts.append("the runtime's own record of its outputs matches the golden: the difference arises after "
                     "execution (reading the outputs) or differs from run to run")
    # 2. The first call whose output is NaN/Inf, or jumps in magnitude, given finite inputs.
    largest = max((_finite_figures(np.asarray(f))[2] for f in feeds if np.asarray(f).dtype.kind in "biuf"),
                  default=0.0)
    inputs_bad = any(sum(_finite_figures(np.asarray(f))[:2]) for f in feeds if np.asarray(f).dtype.kind == "f")
    nonfinite = jump = None
    for event in events:
        for key, array in event.outputs.items():
            nan, inf, peak = _finite_figures(array)
            if (nan or inf) and nonfinite is None and not inputs_bad:
                nonfinite = f"{found.names.get(key, key)} of {event.label} ({nan} NaN, {inf} Inf of {array.size})"
            if jump is None and peak > EXPLOSION * max(largest, 1.0):
                jump = (f"{found.names.get(key, key)} of {event.label} (max |x| {peak:.3g}, over "
                        f"{EXPLOSION:g} times the largest magnitude before it, {largest:.3g})")
            largest = max(largest, peak)
    if inputs_bad:
        parts.append("the inputs already hold NaN/Inf")
    if nonfinite:
        parts.append(f"first non-finite output: {nonfinite}")
    if jump:
        parts.append(f"first magnitude jump: {jump}")
    # 3. Non-delegated kernels against PyTorch's kernels on the same inputs.
    checked, skipped, first = 0, [], None
    for event in events:
        if event.kind != "kernel":
            continue
        if event.reference_note:
            skipped.append(event.label.split(" at instruction")[0])
            continue
        compared = [(key, event.outputs[key], theirs) for key, theirs in event.reference.items()
                    if key in event.outputs]
        checked += bool(compared)
        for key, mine, theirs in compared:
            floor = _kernel_floor(mine.dtype) if mine.dtype.kind == "f" else 0.0
            err = diverges(mine, theirs, atol, max(rtol, floor))
            if err is not None and first is None:
                first = (f"first divergence: {event.label}: its output {found.names.get(key, key)} differs "
                         f"from PyTorch's kernel on the same inputs (max |Δ| {err:.3g})")
    if first:
        parts.append(first)
    elif checked:
        which = (f"{'all ' if not skipped else ''}{checked} non-delegated kernel calls agree" if checked != 1 else
                 f"{'the only ' if not skipped else 'one '}non-delegated kernel call agrees")
        parts.append(f"{which} with PyTorch's kernels re-run on the same inputs")
    if skipped:
        parts.append(f"{len(skipped)} kernel call{'s' if len(skipped) != 1 else ''} could not be re-run by PyTorch "
                     f"({', '.join(dict.fromkeys(skipped))})")
    if partitions and not first:
        calls = f"the {partitions} {delegate} partition calls log" if partitions != 1 else \
            f"the {delegate} partition call logs"
        why = record.unnamed_because
        parts.append(f"{calls} only the tensors at their boundary, and there are no reference tensors to match "
                     f"them with ({why}), so the diverging operator inside a partition cannot be named")
    elif not partitions and not first and checked and differing:
        parts.append(f"every operator agrees with PyTorch on the same inputs: the golden's values come from elsewhere "
                     f"(its reference {reference_backend or 'backend'}, or another export)")
    if record.unlogged:
        parts.append(f"{len(record.unlogged)} call{'s' if len(record.unlogged) != 1 else ''} logged nothing")
    # 4. The first calls, in execution order, with their output statistics.
    # Copies of scalar constants (0-d outputs) say nothing about the model: they are not listed.
    described = [e for e in events if any(a.ndim for a in e.outputs.values())]
    listed = [f"{e.label} -> " + ", ".join(_stats(a) for a in e.outputs.values())
              for e in described[:LISTED_EVENTS]]
    if listed:
        more = len(described) - len(listed)
        parts.append("recorded: " + "; ".join(listed) + (f"; and {more} more" if more > 0 else ""))
    return ": " + "; ".join(parts)
