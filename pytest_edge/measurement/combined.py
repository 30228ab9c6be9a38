"""One timed measurement from the timed runs of several fresh worker processes (pyperf's
practice), as the pipeline judges it and the record keeps it: :class:`TimedMeasurement`, with
each process's own figures (:class:`MeasuredProcess`, the record's ``processes``), made by
:func:`combine_processes` on the host from the workers' :class:`~.timing.ProcessTiming` replies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import codec
from . import sensors
from .timing import ProcessTiming, latency_stats


@dataclass(frozen=True)
class MeasuredProcess(codec.StoredBlock):
    """One fresh process's own figures, as the record keeps them (each key written, null where not
    measured; a stored report's read leniently): P50 and P99 and the fastest run (``min``) in ms, its
    timed runs, load time, peak memory over its load's base, other cores' load, the CPU probe's
    median, drift of the model and of the probe, how it started, its memory growth and readings."""

    p50: float | None = None
    p99: float | None = None
    fastest_ms: float | None = codec.json_field(key="min", default=None)
    runs: int | None = None
    load_ms: float | None = None
    peak_memory_mb: float | None = None
    other_cores_busy: float | None = None
    probe_us: float | None = None
    drift: float | None = None
    probe_drift: float | None = None
    start: str | None = None  # "forked" (from a zygote) or "spawned"
    memory_growth_kb_per_run: float | None = None
    rss_points: list[list[float]] | None = None  # [run count, RSS MB] over the timed runs

    @classmethod
    def of(cls, timing: ProcessTiming) -> "MeasuredProcess":
        latency = timing.latency_ms
        return cls(latency["p50"], latency["p99"], latency["min"], timing.measured_runs, timing.load_ms,
                   timing.peak_memory_mb, timing.other_cores_busy, timing.probe_us, timing.drift, timing.probe_drift,
                   timing.process_start, timing.memory_growth_kb_per_run, timing.rss_points)


# The keys in the order combine_processes has always given them (EdgeModel.measure() returns this JSON).
@codec.layout(order=("latency_ms", "latency_quantiles_ms", "drift", "probe_drift", "warmup_runs", "measured_runs",
                     "load_ms", "first_inference_ms", "peak_memory_mb", "steady_memory_mb", "memory_growth_kb_per_run",
                     "memory_growth_mb_per_min", "other_cores_busy", "under_load", "hwm_reset", "processes",
                     "process_spread", "power_and_temperature", "samples_ns"))
@dataclass(frozen=True)
class TimedMeasurement:
    """One timed measurement of a model in fresh worker processes (:func:`combine_processes`), as the
    pipeline judges it and the record keeps it: latency pooled over the runs (ms), load time, first
    inference and memory as medians over the processes, drift as their geometric mean, each
    process's own figures in ``processes``; the pooled samples (pytest-benchmark's statistics)."""

    latency_ms: dict[str, float] | None = None
    latency_quantiles_ms: list[float] | None = None
    drift: float | None = None
    probe_drift: float | None = None
    warmup_runs: int | None = None
    measured_runs: int | None = None
    load_ms: float | None = None
    first_inference_ms: float | None = None
    peak_memory_mb: float | None = None
    steady_memory_mb: float | None = None
    other_cores_busy: float | None = None
    under_load: bool | None = None
    processes: list[MeasuredProcess] | None = None
    process_spread: float | None = None
    power_and_temperature: sensors.SensorWindow | None = None
    memory_growth_kb_per_run: float | None = None  # the median over processes
    memory_growth_mb_per_min: float | None = None
    hwm_reset: bool | None = None  # every process's high-water mark was reset before its runs
    samples_ns: np.ndarray | None = None  # every timed run, pooled

    @property
    def per_process_drift(self) -> list[float | None]:
        return [p.drift for p in self.processes or []]


def geometric_mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and v > 0]
    return float(np.exp(np.mean(np.log(present)))) if present else None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def combine_processes(results: Sequence[ProcessTiming], load_threshold_cores: float) -> TimedMeasurement:
    """One measurement from the timed runs of several fresh worker processes (pyperf's practice).

    Percentiles come from all runs pooled; load time, first inference and memory are the median
    over processes, drift their geometric mean. ``processes`` keeps each process's own figures, which the significance
    tests of :mod:`pytest_edge.measurement.stats` use, and ``process_spread`` says how far their P50s lie apart.
    A window counts as under load when any process's window was (None where none could be judged).
    """
    pooled = np.concatenate([np.asarray(r.samples_ns, dtype=np.int64) for r in results])
    per_process = [MeasuredProcess.of(r) for r in results]
    busy = [r.other_cores_busy for r in results if r.other_cores_busy is not None]
    p50s = [p.p50 for p in per_process]
    return TimedMeasurement(
        latency_ms=latency_stats(pooled),
        # The pooled distribution in 101 quantiles (0 %, 1 %, ... 100 %), in ms: enough to draw its
        # ECDF or compare distributions in a report, at a few hundred bytes a record.
        latency_quantiles_ms=[round(float(q), 6) for q in np.percentile(pooled / 1e6, np.arange(101))],
        # Each process's own drift is kept in ``processes``; max_drift judges them as a sample.
        drift=geometric_mean([r.drift for r in results]),
        probe_drift=geometric_mean([r.probe_drift for r in results]),
        warmup_runs=results[0].warmup_runs,
        measured_runs=int(pooled.size),
        load_ms=_median([r.load_ms for r in results]),
        first_inference_ms=_median([r.first_inference_ms for r in results]),
        peak_memory_mb=_median([r.peak_memory_mb for r in results]),
        steady_memory_mb=_median([r.steady_memory_mb for r in results]),
        # A leak grows in every process: the median process's growth, not one disturbed process's.
        memory_growth_kb_per_run=_median([r.memory_growth_kb_per_run for r in results]),
        memory_growth_mb_per_min=_median([r.memory_growth_mb_per_min for r in results]),
        other_cores_busy=max(busy) if busy else None,
        under_load=(max(busy) > load_threshold_cores) if busy else None,
        hwm_reset=all(r.hwm_reset for r in results),
        processes=per_process,
        process_spread=(max(p50s) / min(p50s)) if len(p50s) > 1 and min(p50s) > 0 else None,
        power_and_temperature=sensors.combine([r.power_and_temperature for r in results]),
        samples_ns=pooled,
    )
