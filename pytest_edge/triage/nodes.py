"""The "nodes" triage method, for a backend with no delegate-free sibling: its own graph run in
several configurations (ONNX Runtime: optimized, unoptimized and by its reference evaluator; the
backend names them in its ``Intermediates``), compared node by node in that order, and the first
node whose output differs between two of them."""

from __future__ import annotations

from typing import Any

from ..backends import Intermediates
from ..backends.intermediates import NodeRuns, NodeWalk
from ..errors import EdgeError
from ..golden import Golden, GoldenCase
from ..accuracy.metrics import diverges
from ..core.plan import Plan
from .runner import Runner, first_tolerance


def node_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any], case: GoldenCase) -> list[str]:
    """A backend with no delegate-free sibling: its own graph run in the configurations its
    intermediates name, compared node by node (see node_divergence); ``case`` (the golden case
    missed) is not needed: the graph is compared with itself."""
    try:
        info = runner.load(plan)
        found = runner.intermediates(info, feeds)
    except EdgeError:
        return []
    if found is None or found.method != "nodes":
        return []
    details = _runs(found)
    optimized = details.optimized if isinstance(details, NodeWalk) else "optimized"
    line = (f"triage: {plan.backend} has no delegate-free sibling, so its {info.artifact.name} was run node by node "
            f"with {_listed([optimized, *_configurations(found)], ', ')}")
    if found.unavailable:
        return [f"{line}, which failed: {found.unavailable}"]
    atol, rtol = first_tolerance(plan, golden)
    divergence = node_divergence(found, atol, rtol, golden.reference_backend)
    line += divergence
    if "first divergence" in divergence and golden.reference_backend != plan.backend:
        # The likeliest cause is then the other runtime or artifact, which no node of this graph shows.
        line += (f"; note that the golden itself was recorded by {golden.reference_backend}"
                 f"{' on ' + golden.meta.reference.artifact if golden.meta.reference.artifact else ''}"
                 f", not by {plan.backend}: a node named above differs between "
                 f"{details.runtime_short}'s configurations, which "
                 "need not be why this backend misses a golden from another runtime")
    return [line]


def _runs(found: Intermediates) -> NodeRuns:
    """The "nodes" method's details (none where a runtime sent none: nothing ran)."""
    return found.details if isinstance(found.details, NodeRuns) else NodeRuns()


def _configurations(found: Intermediates) -> list[str]:
    details = _runs(found)
    return [str(name) for name in details.configurations or details.runs]


def _listed(names: list[str], first_join: str) -> str:
    """"A, B and C" (``first_join`` between the first two)."""
    return first_join.join(names[:2]) + "".join(f" and {name}" for name in names[2:])


def node_divergence(found: Intermediates, atol: float, rtol: float, reference_backend: str | None = None) -> str:
    """The first node (graph order) whose output differs beyond atol/rtol between two consecutive
    configurations of the graph (ONNX Runtime: the optimized run against the unoptimized one, the
    unoptimized one against the reference evaluator), from the ``Intermediates`` of a "nodes"
    backend; the other pair's first divergence follows, when it has one. The configurations come in
    the order ``details.configurations`` names them; one the backend skipped is left out."""
    details = _runs(found)
    walk = details if isinstance(details, NodeWalk) else NodeWalk()  # not walked: a walk's defaults
    optimized = walk.optimized
    runs = details.runs
    ran = [name for name in _configurations(found) if name in runs]
    unoptimized = ran[0] if ran else (_configurations(found) or ["unoptimized"])[0]
    pairs = [(optimized, found.tensors, unoptimized, runs.get(unoptimized, {}))]
    pairs += [(mine, runs[mine], theirs, runs[theirs]) for mine, theirs in zip(ran, ran[1:])]
    firsts: list[tuple[int, str, str, float] | None] = []
    for mine, mine_values, theirs, their_values in pairs:
        first = None
        for position, tensor in enumerate(found.order):
            err = diverges(mine_values.get(tensor), their_values.get(tensor), atol, rtol)
            if err is not None:
                first = (position, tensor, f"{mine} against {theirs}", err)
                break
        firsts.append(first)
    notes = []
    if walk.exposure == "one at a time":
        notes.append(f"{optimized}'s values were read one tensor at a time: exposing every tensor at once stopped "
                     f"fusions that change the outputs" + (f" by max |Δ| {walk.exposure_delta:.3g}"
                                                           if walk.exposure_delta else ""))
    if walk.solo_stopped_at:
        notes.append(f"{optimized} was compared before tensor {walk.solo_stopped_at!r} only: the "
                     f"{walk.solo_budget_s:g} s budget for one-at-a-time sessions ran out")
    for run, why in details.skipped.items():
        notes.append(f"{run} skipped: {why}")
    tail = "".join(f"; {n}" for n in notes)
    named = sorted((f for f in firsts if f is not None), key=lambda f: f[0])
    if not named:
        compared = _listed([optimized, unoptimized, *ran[1:]], ", ")
        return (f"; no node differs beyond atol={atol:g}, rtol={rtol:g} between {compared}: the golden's values "
                f"come from elsewhere (its reference {reference_backend or 'backend'}, another "
                f"{details.runtime} build or machine, or another export){tail}")
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


def _describe(found: Intermediates, tensor: str, diffs: list[tuple[str, float]]) -> str:
    """"tensor 'x', the output of Op 'name' (node i) (max |Δ| e, A against B)" and what the optimized
    run made of the node."""
    figures = "; ".join(f"max |Δ| {err:.3g}" + (f", {pair}" if pair else "") for pair, err in diffs)
    text = f"tensor {found.names.get(tensor, tensor)!r}, the output of {found.producers.get(tensor, '?')} ({figures})"
    details = _runs(found)
    if not isinstance(details, NodeWalk):
        return text
    of = details.nodes.get(tensor)
    node, optimized = of.node if of is not None else None, details.optimized
    if tensor in details.fused:
        text += f"; {optimized} computes it with {details.fused[tensor]}"
    elif node and node in details.removed:
        text += f"; {optimized}'s graph has no node {node!r} (fused or folded into another)"
    return text
