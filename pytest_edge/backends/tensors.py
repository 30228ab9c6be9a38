"""What a runtime says of a model's tensors and of its delegate: one input or output
(:class:`TensorSpec`) and the delegate's coverage (:class:`Coverage`). Plain data, below the
Backend interface (base.py) and what it returns (compiled.py, quant_pair.py), so none of them
imports the interface back."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import codec

Dim = int | str | None  # a fixed size, a symbolic name, or unknown


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: name, shape (dynamic dimensions as str/None), NumPy dtype name."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str

    @property
    def is_dynamic(self) -> bool:
        return any(not isinstance(d, int) or d < 0 for d in self.shape)


# The JSON's "fallback" is the fraction, rounded (read back from the counts, never from the key).
@codec.layout(computed={"fallback": lambda coverage: round(coverage.fallback, 6)})
@dataclass
class Coverage:
    """How much of a model the delegate took, counted over the runtime's own graph."""

    total_ops: int
    delegated_ops: int
    fallback_ops: int
    partitions: int
    fallback_op_names: dict[str, int] = field(default_factory=dict)
    delegates: list[str] = field(default_factory=list)
    # "runtime" (read from the loaded runtime), "predicted" (rules) or "compiler" (an NPU compiler's
    # own placement: a compile-time target, backends/compiled.py)
    method: str = "runtime"
    approximate: bool = False
    # Placement per operator, by the runtime's own name for each (vela's "Cumsum Identity", a
    # LiteRT "CUMSUM#7"): the operators the delegate took, and those it did not with the runtime's
    # reason ("" where it gives none). Empty where the runtime names no operators: the merge gate
    # then compares the fraction only (judging/regressions.py, placement_regressions).
    delegated_op_ids: list[str] = field(default_factory=list)
    fallback_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def fallback(self) -> float:
        return self.fallback_ops / self.total_ops if self.total_ops else 0.0
