"""What a runtime computed on the way for one run (:meth:`LoadedModel.intermediates`), for triage:
:class:`Intermediates`, and what each triage method adds to it (``details``), typed per method:
:class:`NodeRuns` ("nodes": ONNX Runtime's graph in several configurations), :class:`EtdumpRecord`
("etdump": ExecuTorch's record of each operator call), :class:`LayerAnalysis` ("layers": a toolkit's
per-layer accuracy analysis). The worker's reply to ReadIntermediates is ``codec.to_json(found)``
(arrays travel as arrays); the host reads it back with ``worker.protocol.reply_as``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from .. import codec


@dataclass(frozen=True)
class NodeOf:
    """The ONNX node that computes a tensor: its name, its op_type, its index in the graph."""

    node: str
    op_type: str
    index: int


@dataclass
class NodeRuns:
    """The "nodes" method's details where the graph was not walked (``Intermediates.unavailable``
    says why): the configurations it is run in after the optimized one, in the order compared, what
    ran and what was skipped, and the runtime's names."""

    runs: dict[str, dict[Any, np.ndarray]] = field(default_factory=dict)  # configuration -> tensor id -> value
    skipped: dict[str, str] = field(default_factory=dict)  # configuration -> why not
    configurations: list[str] = field(default_factory=list)
    runtime: str = "runtime"
    runtime_short: str = "the runtime"


@dataclass
class NodeWalk(NodeRuns):
    """The "nodes" method's details of a walked graph: each tensor's node, the optimized run's level
    name, the unoptimized configuration (the graph as exported, the same on every machine: a key of
    ``runs``), how the optimized values were read ("all at once" or "one at a time", and by how much
    exposing every tensor moved the outputs), where the one-at-a-time budget ran out, what the
    optimized graph fused (tensor -> its node there) and removed (node names)."""

    nodes: dict[str, NodeOf] = field(default_factory=dict)
    optimized: str = "optimized"
    unoptimized: str = ""
    exposure: str = "all at once"
    exposure_delta: float | None = None
    solo_stopped_at: str | None = None
    fused: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    solo_budget_s: float = 0.0


@dataclass
class EtdumpEvent:
    """One operator call ETDump logged: a delegate partition's ("delegate") or a CPU kernel's
    ("kernel"), its logged inputs and outputs by value id ("v12"), and for a kernel PyTorch's own
    kernel re-run on the same inputs (``reference``, or ``reference_note``: why not)."""

    instruction: int
    kind: str
    label: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray] = field(default_factory=dict)
    reference_note: str | None = None


@dataclass
class EtdumpRecord:
    """The "etdump" method's details: each operator call in execution order, the program's outputs
    as the runtime recorded them (None: a dtype not read), the calls that logged nothing, why a
    partition's inside cannot be named, and how many partition and kernel calls the plan has."""

    runtime: str = "ETDump"
    events: list[EtdumpEvent] = field(default_factory=list)
    program_outputs: list[np.ndarray | None] = field(default_factory=list)
    unlogged: list[str] = field(default_factory=list)
    unnamed_because: str = "the golden holds only the model's outputs"
    partitions: int = 0
    kernels: int = 0


@dataclass(frozen=True)
class LayerRow:
    """One layer of a toolkit's per-layer accuracy analysis. ``cosine``/``euclidean``: the layer alone;
    ``entire_*``: accumulated from the input. None for a layer fused into the next (no figures)."""

    name: str
    op: str
    cosine: float | None
    euclidean: float | None
    entire_cosine: float | None
    entire_euclidean: float | None


@dataclass
class LayerAnalysis:
    """The "layers" method's details: the rows in the toolkit's order, the tool, its file, and what
    it compared."""

    layers: list[LayerRow] = field(default_factory=list)
    tool: str = "the toolkit's per-layer analysis"
    file: str = "its file"
    compared: str = "float against quantized"


# What a method adds; None for "tensors" (LiteRT, OpenVINO), which adds nothing.
Details = Union[NodeRuns, EtdumpRecord, LayerAnalysis, None]


def _details_json(details: Details) -> Any:
    return {} if details is None else codec.to_json(details)  # {}: as a method that adds nothing always sent it


def _details_of(data: Any) -> Details:
    """The details a reply holds, by the key only that method's have."""
    if not isinstance(data, dict):
        raise ValueError(f"expected an object, got {type(data).__name__}")
    if not data:
        return None
    kind = (EtdumpRecord if "events" in data else LayerAnalysis if "layers" in data
            else NodeWalk if "nodes" in data else NodeRuns)
    return codec.reader(kind)(data)


@dataclass
class Intermediates:
    """Tensors a runtime computed on the way for one run (:meth:`LoadedModel.intermediates`), for triage.

    ``method`` says how they were taken, and so which triage reads them: ``"tensors"`` (LiteRT: every
    tensor this configuration computes, compared with the delegate-free sibling's), ``"nodes"`` (ONNX
    Runtime: the graph in several configurations, :class:`NodeRuns`), ``"etdump"`` (ExecuTorch: the
    runtime's record of each operator call, :class:`EtdumpRecord`), ``"layers"`` (a toolkit's per-layer
    analysis, :class:`LayerAnalysis`). Tensor ids are the runtime's own (LiteRT tensor indices, ONNX
    tensor names, ExecuTorch value ids).
    """

    method: str
    order: list[Any] = field(default_factory=list)  # tensor ids in graph (execution) order
    producers: dict[Any, str] = field(default_factory=dict)  # id -> the node or partition computing it
    tensors: dict[Any, np.ndarray] = field(default_factory=dict)
    names: dict[Any, str] = field(default_factory=dict)  # id -> tensor name
    delegated: bool = False  # whether a delegate ran
    unavailable: str | None = None  # why nothing (or not everything) could be recorded
    details: Details = codec.json_field(default=None, encode=_details_json, decode=_details_of)  # what the method adds
