"""Measurement primitives: latency statistics, resident memory, machine load. No pytest here."""

from __future__ import annotations

import os
import platform
from typing import Sequence

import numpy as np

_PAGE_KB = 1024.0


def latency_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    """P50/P90/P99/mean/min in milliseconds from ``perf_counter_ns`` samples."""
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99),
            "mean": float(ms.mean()), "min": float(ms.min())}


def drift(samples_ns: Sequence[int]) -> float | None:
    """Median of the last tenth of runs over the median of the first tenth (>1: got slower)."""
    tenth = len(samples_ns) // 10
    if tenth < 1:
        return None
    early = float(np.median(samples_ns[:tenth]))
    late = float(np.median(samples_ns[-tenth:]))
    return late / early if early > 0 else None


def _status_kb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float | None:
    kb = _status_kb("VmRSS")
    return kb / _PAGE_KB if kb is not None else None


def hwm_mb() -> float | None:
    """The process's peak resident set (VmHWM), which counts native allocations too."""
    kb = _status_kb("VmHWM")
    return kb / _PAGE_KB if kb is not None else None


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` value 5); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


class MachineLoad:
    """How many other tasks wanted a CPU while we timed: the mean of ``procs_running`` samples
    (from /proc/stat) minus this process. Busy-time deltas are too coarse (10 ms ticks) for
    sub-millisecond runs, a snapshot of the run queue is not."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.sample()

    def sample(self) -> None:
        try:
            with open("/proc/stat") as stat:
                for line in stat:
                    if line.startswith("procs_running"):
                        self.samples.append(int(line.split()[1]))
                        return
        except (OSError, ValueError):
            pass

    def other_cores(self) -> float | None:
        if not self.samples:
            return None
        return max(0.0, sum(self.samples) / len(self.samples) - 1)


def machine_info() -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_mb = None
    try:
        memory_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)
    except (ValueError, OSError, AttributeError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_mb": memory_mb,
            "os": platform.platform(), "python": platform.python_version()}
