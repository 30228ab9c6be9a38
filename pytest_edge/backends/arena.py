"""What a microcontroller runtime planned for one model's tensors: its tensor arena, the one block of
RAM a microcontroller must have for the model (docs/backends-more-runtimes.md, "TensorFlow Lite
Micro"). Read from the runtime's own report, never estimated here; the record's ``arena`` block and
the ``max_arena_kb`` budget judge it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class TensorArena:
    """The arena the runtime allocated for one model, in bytes, as the runtime reports it: ``total``
    = ``head`` (the non-persistent part, planned and reused across operators: activations and
    scratch) + ``tail`` (the persistent part: tensor and operator structures, kernel buffers,
    variables). ``allocations``: the runtime's own breakdown of the tail, by what it holds;
    ``flash_bytes``: the model itself, which the runtime reads in place (flash on the device)."""

    total_bytes: int
    head_bytes: int
    tail_bytes: int
    reported_by: str  # who said so, e.g. "tflite-micro 0.dev2026 (RecordingMicroAllocator)"
    allocations: dict[str, int] = field(default_factory=dict)
    flash_bytes: int | None = None

    @property
    def total_kib(self) -> float:
        return self.total_bytes / 1024

    def to_json(self) -> dict[str, Any]:
        """The record's ``arena`` block."""
        return {"total_bytes": self.total_bytes, "head_bytes": self.head_bytes, "tail_bytes": self.tail_bytes,
                "reported_by": self.reported_by, "allocations": dict(self.allocations),
                "flash_bytes": self.flash_bytes}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TensorArena | None":
        """From :meth:`to_json` (a worker's reply, a stored report: untrusted); None where a figure
        is missing or not a whole number of bytes."""
        figures = [data.get(key) for key in ("total_bytes", "head_bytes", "tail_bytes")]
        if not all(isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in figures):
            return None
        allocations = data.get("allocations")
        flash = data.get("flash_bytes")
        return cls(*figures, str(data.get("reported_by") or ""),  # type: ignore[arg-type]
                   {str(k): v for k, v in allocations.items() if isinstance(v, int)} if isinstance(allocations, Mapping)
                   else {}, flash if isinstance(flash, int) and not isinstance(flash, bool) else None)
