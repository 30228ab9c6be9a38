"""Measurement primitives: latency statistics, resident memory, machine load, what one worker
process's timed runs give (:class:`ProcessTiming`); the host combines the processes in
:mod:`.combined`. No pytest here."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import codec
from . import sensors

_KB_PER_MB = 1024.0
# Below these run counts a percentile rests on too few samples to be trusted.
MIN_RUNS = {"p50": 5, "p90": 20, "p99": 100}


def round_order(number: int, artifacts: int) -> list[int]:
    """Which artifact a round times first: A B, then B A, then A B, ... The first process of an A/B
    pair ran 1-3 % slower than the second on a busy machine (benchmarks/bench_gate.py); alternating
    cancels that instead of adding it to every pair's ratio."""
    order = list(range(artifacts))
    return order[::-1] if number % 2 else order


def latency_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    """P50/P90/P99/mean/min in milliseconds from ``perf_counter_ns`` samples."""
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99),
            "mean": float(ms.mean()), "min": float(ms.min())}


# Drift compares the runs of the first and the last fifth of a process's timed *time* (not of its
# run count: 2000 runs of a 20 us model last 40 ms, and an interrupt or a frequency step in one
# 4 ms tenth moved the old figure by 2x on an idle machine). A window shorter than
# DRIFT_MIN_WINDOW_S (thousands of runs of a small model, so a burst of a few ms cannot move its
# median), or with fewer than DRIFT_MIN_WINDOW_RUNS runs, cannot say how fast the model ran then: no
# figure. A max_drift budget therefore times each process for DRIFT_MIN_TIME_S at least: the windows
# count the runs' own time, which the timing loop's overhead keeps below the wall clock.
DRIFT_WINDOW_FRACTION = 0.2
DRIFT_MIN_WINDOW_S = 0.05
DRIFT_MIN_WINDOW_RUNS = 5
DRIFT_MIN_TIME_S = 0.4
MAX_RUNS = 100_000  # timed runs one worker process keeps (its sample buffer, allocated up front)


def drift_windows(samples_ns: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Indices of the runs in the first and the last fifth of the timed time (the runs laid end to
    end), or None where either window is too short to judge."""
    samples = np.asarray(samples_ns, dtype=np.float64)
    if samples.size == 0:
        return None
    ends = np.cumsum(samples)
    window = float(ends[-1]) * DRIFT_WINDOW_FRACTION
    if window < DRIFT_MIN_WINDOW_S * 1e9:
        return None
    early = np.flatnonzero(ends <= window)
    late = np.flatnonzero(ends - samples >= ends[-1] - window)
    if early.size < DRIFT_MIN_WINDOW_RUNS or late.size < DRIFT_MIN_WINDOW_RUNS:
        return None
    return early, late


def drift(samples_ns: Sequence[int]) -> float | None:
    """Median run of the last fifth of the timed time over that of the first fifth (>1: got
    slower); None where the windows are too short (see DRIFT_MIN_WINDOW_S)."""
    windows = drift_windows(samples_ns)
    if windows is None:
        return None
    samples = np.asarray(samples_ns, dtype=np.float64)
    early, late = (float(np.median(samples[w])) for w in windows)
    return late / early if early > 0 else None


def probe_drift(samples_ns: Sequence[int], probe_after: Sequence[int], probes_ns: Sequence[int]) -> float | None:
    """The machine probe's drift over the same windows as :func:`drift`: ``probe_after[i]`` is how
    many timed runs preceded probe ``i``. Near 1 while the model drifted: the model changed; as
    large: the machine did (another process, another virtual machine, frequency)."""
    windows = drift_windows(samples_ns)
    if windows is None or not len(probes_ns):
        return None
    after = np.asarray(probe_after)
    probes = np.asarray(probes_ns, dtype=np.float64)
    early = probes[after <= windows[0][-1] + 1]
    late = probes[after >= windows[1][0]]
    if early.size == 0 or late.size == 0:
        return None
    return float(np.median(late) / np.median(early))


# Resident memory is read this many times (at least) over a process's timed runs, between runs and
# outside their timing: enough points for a slope that one step of the allocator does not tilt.
RSS_POINTS = 16


def memory_growth_kb_per_run(points: Sequence[Sequence[float]]) -> float | None:
    """How fast resident memory grew over the timed runs, in KB per run: the Theil-Sen slope (the
    median of the slopes between every two readings) of RSS (MB) against the run count, robust to
    the single steps an allocator takes when it extends an arena; None from fewer than 4 readings.
    Per run, not per minute: a leak of so much per inference reads the same on a machine 3x faster."""
    pairs = [(float(n), float(mb)) for n, mb in points if mb is not None]
    if len(pairs) < 4:
        return None
    if len(pairs) > SLOPE_POINTS:  # the pairs grow as the square: a long window is thinned evenly
        pairs = [pairs[i] for i in np.linspace(0, len(pairs) - 1, SLOPE_POINTS).round().astype(int)]
    runs, mb = np.array(pairs).T
    first, second = np.triu_indices(len(runs), k=1)
    apart = runs[second] - runs[first]
    slopes = (mb[second] - mb[first])[apart > 0] / apart[apart > 0]
    return float(np.median(slopes)) * 1024 if slopes.size else None


# The most readings a slope is taken over (their pairs: about 20,000).
SLOPE_POINTS = 200


@dataclass
class ProcessTiming:
    """What one process's timed runs gave (a worker's reply to Measure, typed as Generation is
    Generate's): the runs' latency and samples, drift of the model and of the machine probe, first
    inference, memory over the load's base (None where the high-water mark could not be reset),
    other cores' load, the sensors around the window, and how the process started. ``load_ms`` is
    the Load reply's, set by the caller."""

    first_inference_ms: float | None
    latency_ms: dict[str, float]
    drift: float | None
    probe_drift: float | None
    warmup_runs: int
    measured_runs: int
    peak_memory_mb: float | None
    steady_memory_mb: float | None
    other_cores_busy: float | None
    samples_ns: np.ndarray
    probe_us: float | None = None
    power_and_temperature: sensors.SensorWindow | None = None
    hwm_reset: bool = False
    process_start: str | None = None
    # Resident memory during the timed runs, [run count, RSS MB] (RSS_POINTS readings at least), and
    # its growth: KB per run, and MB per minute of timed runs (the field's unit, for a reader).
    rss_points: list[list[float]] | None = None
    memory_growth_kb_per_run: float | None = None
    memory_growth_mb_per_min: float | None = None
    # The Load reply's, set by the caller: not in the reply (codec.to_json(timing); the host reads it
    # with worker.protocol.reply_as, a ProtocolError naming the request and the field).
    load_ms: float | None = codec.json_field(default=None, skip=True)


# The machine probe: a fixed piece of pure-Python CPU work (about 0.1 ms here), timed between a
# model's runs, once per PROBE_EVERY_NS of timing and a few times around the window. Its median
# tells how fast this machine ran at that moment, whatever slowed it: other processes, other
# virtual machines on the same host (invisible in /proc/stat), CPU frequency. The merge gate
# compares it with the baseline's probe (docs/gate.md).
PROBE_EVERY_NS = 5_000_000
PROBE_AROUND = 5
_PROBE_LOOP = 2000


def machine_probe_ns() -> int:
    """Time one run of the probe's fixed work, in ns."""
    clock = time.perf_counter_ns
    start = clock()
    total = 0
    for i in range(_PROBE_LOOP):
        total += i * i
    return clock() - start


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
    return kb / _KB_PER_MB if kb is not None else None


def address_space_mb() -> float | None:
    """The process's mapped address space (VmSize)."""
    kb = _status_kb("VmSize")
    return kb / _KB_PER_MB if kb is not None else None


def limit_address_space(limit_mb: float) -> int:
    """Let this process map at most ``limit_mb`` more than it has now (as a device with that much
    free memory would): an allocation past it fails inside the runtime, as it would there. The
    limit in bytes; RuntimeError where /proc/self/status cannot say the address space (not Linux)."""
    import resource

    size = address_space_mb()
    if size is None:
        raise RuntimeError("memory_limit_mb needs /proc/self/status (Linux)")
    limit = int((size + limit_mb) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit


def hwm_mb() -> float | None:
    """The process's peak resident set (VmHWM), which counts native allocations too."""
    kb = _status_kb("VmHWM")
    return kb / _KB_PER_MB if kb is not None else None


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` value 5); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


class MachineLoad:
    """CPU time the rest of the machine used while we timed, in cores (0.0: idle machine).

    Busy time from /proc/stat counts in 10 ms ticks, so a window shorter than ``MIN_WINDOW_S``
    cannot be judged and gives None rather than a made-up figure.
    """

    MIN_WINDOW_S = 0.25

    def __init__(self) -> None:
        self._start = (self._busy_s(), time.perf_counter(), time.process_time())

    @staticmethod
    def _busy_s() -> float | None:
        try:
            with open("/proc/stat") as stat:
                fields = [float(v) for v in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
        return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")

    def other_cores(self) -> float | None:
        busy0, wall0, own0 = self._start
        busy1 = self._busy_s()
        wall = time.perf_counter() - wall0
        if busy0 is None or busy1 is None or wall < self.MIN_WINDOW_S:
            return None
        own = time.process_time() - own0
        return max(0.0, (busy1 - busy0 - own) / wall)

