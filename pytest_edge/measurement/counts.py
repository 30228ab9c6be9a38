"""Counted mode's measurement as types: instructions per inference counted under Valgrind's callgrind
in fresh processes (docs/measurement.md, "Counted mode"), as the counter returns it, the gate judges
it and the record keeps it. A primitive, as :class:`~pytest_edge.measurement.timing.TimedMeasurement`
is: no pytest, nothing of the package.

The record's ``counted`` block is :meth:`CountedMeasurement.to_json`; a stored report's is read back
with :meth:`CountedMeasurement.from_json`, which keeps its figures as they were written (a report
of an older pytest-edge, or an edited one, may hold anything there: the gate checks what it judges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class ProcessCount:
    """One counted process: its median run's instructions (and, with the cache simulation, its data
    reads, writes and simulated misses), how far its runs lay apart, and each run's count."""

    instructions: float | None = None
    cache: dict[str, float] | None = None
    run_spread: float | None = None  # largest over smallest run, minus one
    run_instructions: list[float] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"instructions": self.instructions, **({"cache": self.cache} if self.cache else {}),
                "run_spread": self.run_spread, "run_instructions": self.run_instructions}

    @classmethod
    def from_json(cls, data: Any) -> "ProcessCount":
        """A report's process as written; anything but an object is a process of no known figure."""
        if not isinstance(data, Mapping):
            return cls()
        return cls(instructions=data.get("instructions"), cache=data.get("cache") or None,
                   run_spread=data.get("run_spread"), run_instructions=data.get("run_instructions"))


@dataclass(frozen=True)
class CountedMeasurement:
    """Instructions per inference of one artifact, the median over its fresh processes (each
    process's figure is its median run), their cache figures' medians, how far the processes lie
    apart (``spread``), and each process's own (``processes``)."""

    tool: str | None
    version: str | None
    instructions: float | None
    cache: dict[str, float] | None = None
    runs: int | None = None
    warmup_runs: int | None = None
    spread: float | None = None  # largest over smallest process, minus one
    processes: tuple[ProcessCount, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The record's ``counted`` block (docs/reports.md)."""
        return {"tool": self.tool, "version": self.version, "instructions": self.instructions,
                **({"cache": self.cache} if self.cache else {}),
                "runs": self.runs, "warmup_runs": self.warmup_runs, "spread": self.spread,
                "processes": [p.to_json() for p in self.processes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CountedMeasurement":
        """A record's ``counted`` block (a stored report's, the baseline twin's), figures as written."""
        try:
            processes = list(data.get("processes") or [])
        except TypeError:  # not a list of processes: none known
            processes = []
        return cls(tool=data.get("tool"), version=data.get("version"), instructions=data.get("instructions"),
                   cache=data.get("cache") or None, runs=data.get("runs"), warmup_runs=data.get("warmup_runs"),
                   spread=data.get("spread"), processes=tuple(ProcessCount.from_json(p) for p in processes))

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> "CountedMeasurement | None":
        """The ``counted`` block of a record or baseline (its JSON, or a record holding the type),
        read as a CountedMeasurement; None where it has none, or something that is not one."""
        counted = figures.get("counted")
        if isinstance(counted, CountedMeasurement):
            return counted
        return cls.from_json(counted) if isinstance(counted, Mapping) else None


def combine_counts(per_process: Sequence[Mapping[str, Any]], tool: str, version: str) -> CountedMeasurement:
    """One counted figure from the processes' own (the worker's ``count`` replies,
    :func:`pytest_edge.worker.callgrind.count_runs`): the median, the spread, and each process's."""
    counts = [float(p["instructions"]) for p in per_process]
    cache_keys = sorted({k for p in per_process for k in (p.get("cache") or {})})
    cache = {k: round(float(np.median([(p.get("cache") or {}).get(k, 0.0) for p in per_process])), 1)
             for k in cache_keys}
    return CountedMeasurement(
        tool=tool, version=version, instructions=round(float(np.median(counts)), 1), cache=cache or None,
        runs=per_process[0]["runs"], warmup_runs=per_process[0]["warmup_runs"], spread=spread(counts),
        processes=tuple(ProcessCount(instructions=p["instructions"], cache=p["cache"] if p.get("cache") else None,
                                     run_spread=p.get("run_spread"), run_instructions=p.get("run_instructions"))
                        for p in per_process))


def spread(counts: Sequence[float]) -> float:
    """Largest over smallest count, minus one (0.0: every process counted the same)."""
    return max(counts) / min(counts) - 1 if counts and min(counts) > 0 else 0.0
