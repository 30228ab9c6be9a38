"""What a microcontroller runtime planned for one model's tensors: its tensor arena, the one block of
RAM a microcontroller must have for the model (docs/backends-more-runtimes.md, "TensorFlow Lite
Micro"). Read from the runtime's own report, never estimated here; the record's ``arena`` block and
the ``max_arena_kb`` budget judge it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import codec


def _bytes(value: Any) -> int:
    """A count of bytes: a whole number, not negative."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number of bytes, got {value!r:.40}")
    return value


@dataclass(frozen=True)
class TensorArena:
    """The arena the runtime allocated for one model, in bytes, as the runtime reports it: ``total``
    = ``head`` (the non-persistent part, planned and reused across operators: activations and
    scratch) + ``tail`` (the persistent part: tensor and operator structures, kernel buffers,
    variables). ``allocations``: the runtime's own breakdown of the tail, by what it holds;
    ``flash_bytes``: the model itself, which the runtime reads in place (flash on the device)."""

    total_bytes: int = codec.json_field(decode=_bytes)
    head_bytes: int = codec.json_field(decode=_bytes)
    tail_bytes: int = codec.json_field(decode=_bytes)
    reported_by: str  # who said so, e.g. "tflite-micro 0.dev2026 (RecordingMicroAllocator)"
    allocations: dict[str, int] = field(default_factory=dict)
    flash_bytes: int | None = None

    # The record's ``arena`` block is codec.to_json(arena); Record.from_json reads it with
    # codec.from_json (a stored block that is not one is kept as it was, in the record's extra).

    @property
    def total_kib(self) -> float:
        return self.total_bytes / 1024
