"""Counted mode's measurement as types: instructions per inference counted under Valgrind's callgrind
in fresh processes (docs/measurement.md, "Counted mode"), as the counter returns it, the gate judges
it and the record keeps it. A primitive, as :class:`~pytest_edge.measurement.timing.TimedMeasurement`
is: no pytest, nothing of the package but its codec (a leaf).

The record's ``counted`` block is ``codec.to_json(counted)``; a stored report's is read back with
``codec.from_json(CountedMeasurement, block, where)``, leniently (``codec.layout(lenient=True)``): a
report of an older pytest-edge, or an edited one, may hold anything there, and what is missing or
does not fit a field's type is its default (None: no known figure), never an error; the gate checks
what it judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from .. import codec


def _empty(cache: dict[str, float] | None) -> bool:
    return not cache  # no cache simulation: no ``cache`` key, as counted mode has always written


@codec.layout(lenient=True)
@dataclass(frozen=True)
class ProcessCount:
    """One counted process: its median run's instructions (and, with the cache simulation, its data
    reads, writes and simulated misses), how far its runs lay apart, and each run's count."""

    instructions: float | None = None
    cache: dict[str, float] | None = codec.json_field(default=None, omit=_empty)
    run_spread: float | None = None  # largest over smallest run, minus one
    run_instructions: list[float] | None = None


@codec.layout(lenient=True)  # a stored report's block: anything but an object is a process of no known figure
@dataclass(frozen=True)
class CountedMeasurement:
    """Instructions per inference of one artifact, the median over its fresh processes (each
    process's figure is its median run), their cache figures' medians, how far the processes lie
    apart (``spread``), and each process's own (``processes``)."""

    tool: str | None = None
    version: str | None = None
    instructions: float | None = None
    cache: dict[str, float] | None = codec.json_field(default=None, omit=_empty)
    runs: int | None = None
    warmup_runs: int | None = None
    spread: float | None = None  # largest over smallest process, minus one
    processes: tuple[ProcessCount, ...] = ()  # the record's ``counted`` block (docs/reports.md): these, in order

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> "CountedMeasurement | None":
        """The ``counted`` block of a record or baseline (its JSON, or a record holding the type),
        read as a CountedMeasurement; None where it has none, or something that is not one."""
        counted = figures.get("counted")
        if isinstance(counted, CountedMeasurement):
            return counted
        return codec.from_json(cls, counted, "a record's counted block") if isinstance(counted, Mapping) else None


class CountedProcess(Protocol):
    """What one counted process gave: the worker's ``count`` reply (worker.protocol.CountedRuns, from
    :func:`pytest_edge.worker.callgrind.count_runs`), a layer above this one, read by its fields."""

    runs: int
    warmup_runs: int
    instructions: float
    cache: dict[str, float]
    run_spread: float | None
    run_instructions: list[int]


def combine_counts(per_process: Sequence[CountedProcess], tool: str, version: str) -> CountedMeasurement:
    """One counted figure from the processes' own: the median, the spread, and each process's."""
    counts = [float(p.instructions) for p in per_process]
    cache_keys = sorted({k for p in per_process for k in p.cache})
    cache = {k: round(float(np.median([p.cache.get(k, 0.0) for p in per_process])), 1) for k in cache_keys}
    return CountedMeasurement(
        tool=tool, version=version, instructions=round(float(np.median(counts)), 1), cache=cache or None,
        runs=per_process[0].runs, warmup_runs=per_process[0].warmup_runs, spread=spread(counts),
        processes=tuple(ProcessCount(instructions=p.instructions, cache=p.cache or None, run_spread=p.run_spread,
                                     run_instructions=list(p.run_instructions))
                        for p in per_process))


def spread(counts: Sequence[float]) -> float:
    """Largest over smallest count, minus one (0.0: every process counted the same)."""
    return max(counts) / min(counts) - 1 if counts and min(counts) > 0 else 0.0
