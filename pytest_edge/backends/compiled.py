"""What an NPU compiler made of an artifact (docs/npu.md): a compile-time target's result.

A compile-time target (a backend with a :class:`Compiler`, ``Backend.compiler``) runs the NPU's own compiler on this machine and
reads back its placement (operators on the NPU and on the CPU, each CPU operator with the
compiler's reason), the memory it planned and its estimate of the NPU's cycles. Nothing executes:
the estimate is the compiler's model of the hardware, never a measurement, and is kept apart from
every measured figure (its own block of the record, its own budget).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import codec
from .tensors import Coverage


@codec.layout(lenient=True)  # a stored report's operator: what is missing or does not fit, "" or None
@dataclass(frozen=True)
class CompiledOperator:
    """One operator of the compiler's per-operator report: its type and name as the compiler gives
    them, where it was placed, and the compiler's estimated cycles for it (None where it gives none)."""

    op: str = ""  # the operator's type, as the compiler names it ("Conv2D")
    name: str = ""  # the compiler's name for it (the output tensor's: "Relu;add;Conv2D")
    placed_on: str = ""  # "NPU" or "CPU"
    estimated_cycles: int | None = None


def _no_coverage() -> Coverage:
    return Coverage(0, 0, 0, 0, method="compiler")


# The record's ``npu`` block (docs/reports.md): codec.to_json(compilation), in this order, saying
# that nothing executed; a stored report's is read leniently (Compilation.of_record), as the gate
# checks what it judges. Its coverage is the record's ``coverage``, not repeated.
@codec.layout(lenient=True, computed={"executed": lambda _: False},
              order=("target", "compiler", "settings", "executed", "sram_bytes", "flash_bytes", "memories", "clock_hz",
                     "estimated_cycles", "estimated_ms", "estimate_note", "macs", "operators"))
@dataclass
class Compilation:
    """An NPU compiler's result for one artifact and one configuration. Sizes in bytes; the
    estimate at the configured clock; ``coverage`` judged by max_fallback / max_partitions like any
    delegate's (``method="compiler"``)."""

    target: str = ""  # the accelerator configuration, e.g. "ethos-u55-128"
    compiler: str = ""  # name and version, e.g. "vela 5.2.0"
    settings: dict[str, str] = field(default_factory=dict)  # the configuration it compiled for: system_config, ...
    coverage: Coverage = codec.json_field(skip=True, default_factory=_no_coverage)  # the record's own
    sram_bytes: int | None = None
    flash_bytes: int | None = None  # off-chip flash (weights in the embedded memory modes)
    memories: dict[str, int] = field(default_factory=dict)  # every memory the compiler reports it used
    clock_hz: float | None = None
    estimated_cycles: int | None = None  # per inference, the compiler's total
    estimated_ms: float | None = None  # estimated_cycles at clock_hz: an estimate, never a measurement
    macs: int | None = None
    operators: list[CompiledOperator] = field(default_factory=list)
    # What the estimate covers and what it leaves out, in words (the CPU's operators, for one).
    estimate_note: str = ""

    @property
    def sram_kib(self) -> float | None:
        return self.sram_bytes / 1024 if self.sram_bytes is not None else None

    @property
    def flash_kib(self) -> float | None:
        return self.flash_bytes / 1024 if self.flash_bytes is not None else None

    @property
    def dram_kib(self) -> float | None:
        """DRAM used (the compiler's ``memories["dram"]``), where a memory mode puts weights or the
        tensor arena there (U65, U85); None where the compiler reports none."""
        return self.memories["dram"] / 1024 if "dram" in self.memories else None

    @classmethod
    def of_record(cls, npu: Any, coverage: Any) -> "Compilation":
        """A stored record's ``npu`` block with the record's ``coverage`` (the compiler's empty one
        where that is missing or does not read: the report's reader judges it, not this)."""
        try:
            known = codec.from_json(Coverage, coverage, "a report's coverage") if isinstance(coverage, Mapping) else None
        except ValueError:
            known = None
        return codec.from_json(cls, npu, "a report's npu block", given={"coverage": known or _no_coverage()})


class Compiler(ABC):
    """A backend's capability to compile an artifact for its NPU on this machine (``Backend.compiler``;
    None on a backend that compiles nothing): what makes it a compile-time target."""

    @abstractmethod
    def compile(self, artifact: Path, options: Mapping[str, str], timeout_s: float) -> Compilation:
        """Compile ``artifact`` for this target with the user's ``options`` (edge_compile_options); a
        DoesNotConvert where the compiler cannot take the artifact (a float model for an int8 NPU), a
        BackendError naming the file where the compiler fails."""
