"""Where to look when a backend disagrees with the golden (docs/triage.md): run the same
artifact without the delegate, then name the first operator whose output diverges. A backend
without such a sibling whose runtime exposes every node output in several configurations (ONNX
Runtime: optimized, unoptimized, onnx.reference) is compared with itself node by node; ExecuTorch,
which has neither, is re-run with ETDump and its recorded operator outputs are checked (see
etdump_triage)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol, Sequence

import numpy as np

from ..backends import get_backend, split_device
from ..compare import compare_output
from ..errors import EdgeError
from ..golden import Golden, GoldenCase
from ..inputs import feed_order
from ..plan import Plan
from ..worker.pool import ModelInfo


class Runner(Protocol):
    """What triage needs of the session: load a plan's model, run it, read its intermediates."""

    def load(self, plan: Plan) -> ModelInfo: ...

    def run(self, info: ModelInfo, feeds: Sequence[Any], reset: bool = True) -> list[np.ndarray]: ...

    def intermediates(self, info: ModelInfo, feeds: Sequence[Any]) -> dict[str, Any] | None: ...


def as_seen_by_triage(plan: Plan, golden: Golden) -> Golden:
    """The golden as triage should see it. Triage takes "the golden comes from the sibling backend"
    to mean "from the same artifact"; with reference= it came from another model's artifact, so the
    reference is labelled with that artifact too (no backend has that name, and messages read
    "the reference onnxruntime-cpu on tiny_cnn.onnx")."""
    if plan.reference is None:
        return golden
    ref = golden.meta["reference"]
    label = f"{ref['backend']} on {ref.get('artifact') or golden.model}"
    return replace(golden, meta={**golden.meta, "reference": {**ref, "backend": label}})


def sibling_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any], case: GoldenCase) -> list[str]:
    """Run the same artifact without the delegate (litert -> litert-ref): if that agrees with the
    golden, the delegate's kernels diverge; if not, the artifact itself does (export,
    conversion, quantization)."""
    backend = plan.backend
    device = split_device(backend)[1]
    sibling = get_backend(backend).reference_sibling
    if sibling is not None and sibling == golden.reference_backend and device is None:
        return [f"triage: the golden comes from {sibling} on the same artifact: the {backend} "
                "delegate's kernels diverge, not the artifact" + first_divergence(runner, plan, sibling, feeds, golden)]
    if sibling is None and getattr(get_backend(backend), "per_node_triage", False):
        return node_triage(runner, plan, golden, feeds)
    if sibling is None and getattr(get_backend(backend), "etdump_triage", False):
        return etdump_triage(runner, plan, golden, feeds, case)
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
    if not mine["delegated"]:
        return ("; this runtime does not delegate when intermediate tensors are preserved, so the "
                "diverging operator cannot be named")
    tolerance = plan.tolerance(golden.outputs_spec[0].name)
    atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
    for tensor in theirs["order"]:
        a, b = mine["tensors"].get(tensor), theirs["tensors"].get(tensor)
        if a is None or b is None or a.shape != b.shape or a.dtype.kind not in "fiu":
            continue
        if not np.allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol):
            err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            return (f"; first divergence: tensor {theirs['names'].get(tensor, tensor)!r}, the output of "
                    f"{mine['producers'][tensor]} (max |Δ| {err:.3g} against {sibling})")
    return ""


def _tolerance(plan: Plan, golden: Golden) -> tuple[float, float]:
    # The first output's tolerance, as first_divergence uses: intermediates have no tolerance of their own.
    tolerance = plan.tolerance(golden.outputs_spec[0].name)
    return float(tolerance.get("atol") or 0.0), float(tolerance.get("rtol") or 0.0)


def node_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any]) -> list[str]:
    """A backend with no delegate-free sibling (onnxruntime-cpu): its own graph run optimized,
    unoptimized and by the ONNX reference evaluator, compared node by node (see onnx_divergence)."""
    try:
        info = runner.load(plan)
        found = runner.intermediates(info, feeds)
    except EdgeError:
        return []
    if not found or "runs" not in found:
        return []
    optimized = found.get("optimized", "optimized")
    line = (f"triage: {plan.backend} has no delegate-free sibling, so its {info.artifact.name} was run node by node "
            f"with {optimized}, ORT_DISABLE_ALL and onnx.reference")
    if found.get("unavailable"):
        return [f"{line}, which failed: {found['unavailable']}"]
    atol, rtol = _tolerance(plan, golden)
    divergence = onnx_divergence(found, atol, rtol, golden.reference_backend)
    line += divergence
    if "first divergence" in divergence and golden.reference_backend != plan.backend:
        # The likeliest cause is then the other runtime or artifact, which no node of this graph shows.
        line += (f"; note that the golden itself was recorded by {golden.reference_backend}"
                 f"{' on ' + golden.meta['reference']['artifact'] if golden.meta['reference'].get('artifact') else ''}"
                 f", not by {plan.backend}: a node named above differs between ORT's configurations, which "
                 "need not be why this backend misses a golden from another runtime")
    return [line]


def _diverges(a: Any, b: Any, atol: float, rtol: float) -> float | None:
    """max |a - b| where the two differ beyond the tolerance; None where they agree or cannot be compared."""
    if a is None or b is None or a.shape != b.shape or a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return None
    a, b = a.astype(np.float64), b.astype(np.float64)
    if np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
        return None
    with np.errstate(invalid="ignore"):
        return float(np.nanmax(np.abs(a - b))) if np.isfinite(a - b).any() else float("inf")


def onnx_divergence(found: dict[str, Any], atol: float, rtol: float, reference_backend: str | None = None) -> str:
    """The first node (graph order) whose output differs beyond atol/rtol between ORT's optimized
    run and its unoptimized one, or between the unoptimized one and onnx.reference, from the dict
    ``OrtModel.intermediates`` returns; the other pair's first divergence follows, when it has one."""
    optimized, unoptimized = found.get("optimized", "optimized"), "ORT_DISABLE_ALL"
    runs = found["runs"]
    pairs = [(optimized, found["tensors"], unoptimized, runs.get(unoptimized, {}))]
    if "onnx.reference" in runs:
        pairs.append((unoptimized, runs.get(unoptimized, {}), "onnx.reference", runs["onnx.reference"]))
    firsts: list[tuple[int, str, str, float] | None] = []
    for mine, mine_values, theirs, their_values in pairs:
        first = None
        for position, tensor in enumerate(found["order"]):
            err = _diverges(mine_values.get(tensor), their_values.get(tensor), atol, rtol)
            if err is not None:
                first = (position, tensor, f"{mine} against {theirs}", err)
                break
        firsts.append(first)
    notes = []
    if found.get("method") == "one at a time":
        notes.append(f"{optimized}'s values were read one tensor at a time: exposing every tensor at once stopped "
                     f"fusions that change the outputs" + (f" by max |Δ| {found['exposure_delta']:.3g}"
                                                           if found.get("exposure_delta") else ""))
    if found.get("solo_stopped_at"):
        notes.append(f"{optimized} was compared before tensor {found['solo_stopped_at']!r} only: the "
                     f"{found.get('solo_budget_s', 0):g} s budget for one-at-a-time sessions ran out")
    for run, why in found.get("skipped", {}).items():
        notes.append(f"{run} skipped: {why}")
    tail = "".join(f"; {n}" for n in notes)
    named = sorted((f for f in firsts if f is not None), key=lambda f: f[0])
    if not named:
        compared = f"{optimized}, {unoptimized}" + (" and onnx.reference" if len(pairs) > 1 else "")
        return (f"; no node differs beyond atol={atol:g}, rtol={rtol:g} between {compared}: the golden's values "
                f"come from elsewhere (its reference {reference_backend or 'backend'}, another onnxruntime build "
                f"or machine, or another export){tail}")
    tensor = named[0][1]
    here = [(pair, err) for _, t, pair, err in named if t == tensor]
    message = f"; first divergence: {_describe(found, tensor, here)}"
    later = [f for f in named if f[1] != tensor]
    if later:
        message += f"; {later[0][2]} first differs at {_describe(found, later[0][1], [('', later[0][3])])}"
    elif len(here) < len(pairs):
        other = pairs[1] if firsts[0] is not None else pairs[0]
        message += f"; {other[0]} and {other[2]} agree on every node"
    return message + tail


def _describe(found: dict[str, Any], tensor: str, diffs: list[tuple[str, float]]) -> str:
    """"tensor 'x', the output of Op 'name' (node i) (max |Δ| e, A against B)" and what ORT made of the node."""
    figures = "; ".join(f"max |Δ| {err:.3g}" + (f", {pair}" if pair else "") for pair, err in diffs)
    text = f"tensor {found['names'].get(tensor, tensor)!r}, the output of {found['producers'].get(tensor, '?')} ({figures})"
    node = found.get("nodes", {}).get(tensor, {}).get("node")
    optimized = found.get("optimized", "the optimized run")
    if tensor in found.get("fused", {}):
        text += f"; {optimized} computes it with {found['fused'][tensor]}"
    elif node and node in found.get("removed", []):
        text += f"; {optimized}'s graph has no node {node!r} (fused or folded into another)"
    return text


# ---------------------------------------------------------------- ExecuTorch (ETDump)

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
    if not found or "events" not in found:
        return []
    try:
        order = feed_order(golden.outputs_spec, info.outputs)
    except ValueError:
        order = []
    expected = [(ref.name, case.outputs[ref.name], position, plan.tolerance(ref.name))
                for ref, position in zip(golden.outputs_spec, order)]
    atol, rtol = _tolerance(plan, golden)
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


def etdump_divergence(found: dict[str, Any], expected: Sequence[tuple[str, np.ndarray, int, Any]],
                      atol: float, rtol: float, feeds: Sequence[Any] = (), reference_backend: str | None = None) -> str:
    """What an ExecuTorch ETDump run (``ExecuTorchModel.intermediates``) tells about a mismatch:
    whether the runtime's own record of the outputs already differs from the golden (``expected``:
    name, golden array, output position, tolerance), the first operator call whose output is NaN/Inf
    or jumps in magnitude, the first non-delegated kernel that differs from PyTorch's kernel re-run
    on the same inputs, and what cannot be named inside delegate partitions, which log only their
    boundary tensors."""
    events, partitions, kernels = found["events"], found.get("partitions", 0), found.get("kernels", 0)
    delegate = next((e["label"].split(" partition")[0] for e in events if e["kind"] == "delegate"), "delegate")
    if found.get("unavailable"):
        return f", which recorded nothing: {found['unavailable']}"
    counts = (f"{partitions} {delegate} partition call{'s' if partitions != 1 else ''}, "
              f"{kernels} non-delegated kernel call{'s' if kernels != 1 else ''}")
    parts = [f"{len(events)} operator calls recorded ({counts})"]
    # 1. The runtime's own record of the outputs against the golden.
    recorded = found.get("program_outputs", [])
    differing, matched = [], 0
    for name, golden_array, position, tolerance in expected:
        if position >= len(recorded) or recorded[position] is None:
            continue
        matched += 1
        problems = compare_output(name, golden_array, recorded[position], tolerance).problems
        if problems:
            err = _diverges(np.asarray(recorded[position]), np.asarray(golden_array), 0.0, 0.0)
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
        for key, array in event["outputs"].items():
            nan, inf, peak = _finite_figures(array)
            if (nan or inf) and nonfinite is None and not inputs_bad:
                nonfinite = f"{found['names'].get(key, key)} of {event['label']} ({nan} NaN, {inf} Inf of {array.size})"
            if jump is None and peak > EXPLOSION * max(largest, 1.0):
                jump = (f"{found['names'].get(key, key)} of {event['label']} (max |x| {peak:.3g}, over "
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
        if event["kind"] != "kernel":
            continue
        if event.get("reference_note"):
            skipped.append(event["label"].split(" at instruction")[0])
            continue
        compared = [(key, event["outputs"][key], theirs) for key, theirs in event["reference"].items()
                    if key in event["outputs"]]
        checked += bool(compared)
        for key, mine, theirs in compared:
            floor = _kernel_floor(mine.dtype) if mine.dtype.kind == "f" else 0.0
            err = _diverges(mine, theirs, atol, max(rtol, floor))
            if err is not None and first is None:
                first = (f"first divergence: {event['label']}: its output {found['names'].get(key, key)} differs "
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
        parts.append(f"{calls} only the "
                     "tensors at their boundary, and there are no reference tensors to match them with (a .pte keeps "
                     "no tensor names, the golden holds only the model's outputs, and no ETRecord is at hand), so "
                     "the diverging operator inside a partition cannot be named")
    elif not partitions and not first and checked and differing:
        parts.append(f"every operator agrees with PyTorch on the same inputs: the golden's values come from elsewhere "
                     f"(its reference {reference_backend or 'backend'}, or another export)")
    if found.get("unlogged"):
        parts.append(f"{len(found['unlogged'])} call{'s' if len(found['unlogged']) != 1 else ''} logged nothing")
    # 4. The first calls, in execution order, with their output statistics.
    # Copies of scalar constants (0-d outputs) say nothing about the model: they are not listed.
    described = [e for e in events if any(a.ndim for a in e["outputs"].values())]
    listed = [f"{e['label']} -> " + ", ".join(_stats(a) for a in e["outputs"].values())
              for e in described[:LISTED_EVENTS]]
    if listed:
        more = len(described) - len(listed)
        parts.append("recorded: " + "; ".join(listed) + (f"; and {more} more" if more > 0 else ""))
    return ": " + "; ".join(parts)
