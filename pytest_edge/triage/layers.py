"""The "layers" triage method: a toolkit's own per-layer accuracy analysis of a quantized build (the
float model against the quantized one, layer by layer: rknn-toolkit2's ``accuracy_analysis``), read by
the backend (``Intermediates.details``, a LayerAnalysis) and told here: the layers whose own error is worst,
and the first layer where the accumulated error falls below the budget. An analysis that could not be
run or read is said, never left out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..backends.intermediates import LayerAnalysis
from ..errors import EdgeError
from ..golden import Golden, GoldenCase
from ..core.plan import Plan
from .runner import Runner

# How many of the worst layers a failure names.
WORST = 3
# The accumulated cosine below which a layer is where the error "jumps" (a float16 build reads 0.9999).
JUMP_COSINE = 0.99


@dataclass(frozen=True)
class LayerFigure:
    """One layer of the analysis: its own (single-layer) cosine and Euclidean distance, and the
    accumulated cosine from the input; None for a layer fused into the next (no figures of its own).
    Made of the backend's rows (``LayerAnalysis.layers``: its ``entire_euclidean`` is not told here);
    it reads an AnalysisRow's JSON with the codec too."""

    name: str
    op: str = ""
    cosine: float | None = None
    euclidean: float | None = None
    entire_cosine: float | None = None

    def said(self) -> str:
        return (f"{self.name!r} [{self.op}] cosine {self.cosine:.5f} (accumulated {self.entire_cosine:.5f}, "
                f"euclidean {self.euclidean:.4g})")


def worst_layers(layers: list[LayerFigure], count: int = WORST) -> list[LayerFigure]:
    """The ``count`` layers whose own cosine is lowest, lowest first (ties in graph order)."""
    measured = [layer for layer in layers if layer.cosine is not None]
    return sorted(measured, key=lambda layer: layer.cosine)[:count]  # type: ignore[arg-type, return-value]


def first_jump(layers: list[LayerFigure], below: float = JUMP_COSINE) -> LayerFigure | None:
    """The first layer (graph order) whose accumulated cosine is below ``below``."""
    return next((layer for layer in layers if layer.entire_cosine is not None and layer.entire_cosine < below), None)


def layer_triage(runner: Runner, plan: Plan, golden: Golden, feeds: list[Any], case: GoldenCase) -> list[str]:
    """The triage lines of a mismatch on a backend whose intermediates are a toolkit's per-layer
    analysis, run on the failing case's inputs."""
    backend = plan.backend
    try:
        info = runner.load(plan)
        found = runner.intermediates(info, feeds)
    except EdgeError as exc:
        return [f"triage: {backend}: the per-layer accuracy analysis could not run: {exc}"]
    if found is None:
        return [f"triage: {backend}: the runtime gave no per-layer accuracy analysis"]
    if found.unavailable:
        return [f"triage: {backend}: no per-layer accuracy analysis: {found.unavailable}"]
    analysis = found.details if isinstance(found.details, LayerAnalysis) else LayerAnalysis()
    layers = [LayerFigure(row.name, row.op, row.cosine, row.euclidean, row.entire_cosine) for row in analysis.layers]
    worst = worst_layers(layers)
    if not worst:  # the backend's parser refuses such a file; said, never a silent pass
        return [f"triage: {backend}: the per-layer accuracy analysis named no layer with figures"]
    lines = [f"triage: {analysis.tool} ({analysis.compared}, on the failing case's inputs; {analysis.file}): worst layers by their own cosine: "
             + "; ".join(layer.said() for layer in worst)]
    jump = first_jump(layers)
    if jump is not None:
        lines.append(f"triage: {backend}: the accumulated cosine first falls below {JUMP_COSINE} at {jump.name!r} "
                     f"[{jump.op}] ({jump.entire_cosine:.5f})")
    return lines
