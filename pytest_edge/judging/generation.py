"""A decoder's generation measured and gated as every model is: TTFT and TPOT in fresh worker
processes of its backend (:func:`measure_rounds`, through :func:`.measurer.fresh_rounds`, the one
policy of tensor models and decoders), and the merge gate on those figures
(:func:`gate_generation`, through :func:`.gate.run_gate`, the package's one gate, with its rules
unchanged: docs/gate.md):

- **A/B** (``--edge-baseline-models=DIR``): the twin of the artifact in DIR (at the artifact's path
  under the folder its model's key is relative to: ``Model.twin``; its own configuration beside it,
  or this one's) measured alternately with it in this job, as pairs;
- **stored** (``--edge-baseline=REPORT``): the per-process figures of the same test and backend in
  an earlier report (its ``llm.processes``), found as a tensor model's record is (:func:`.baseline.find_baseline`).

A figure above the threshold is measured again in fresh processes; it fails only when it is above
the threshold both times, the second measurement significant on its own, and both together too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import codec
from ..backends.decoder import RuntimeCounters
from ..backends.decoder_config import LlmConfig, read_config
from ..core.generation_figures import (ContextLength, ContextStop, ContextSweep, CountedShare, GenerationProcessFigures,
                                       MeanSd, RuntimePerGeneration, RuntimeTimings)
from ..core.models import Model
from ..core.record import Record
from ..core.settings import Settings
from ..core.sizes import artifact_size
from ..errors import BackendCrash, BackendError, EdgeUsageError
from ..files import relative_path
from ..worker.pool import WorkerPool
from ..worker.protocol import (GENERATION_TIME_CAP_S, ContextMemory, DecoderLoaded, GenerationTimes, LimitAddressSpace,
                               Load, MeasureGeneration, ProbeContext, reply_as)
from .baseline import BaselineChoice, choose_baseline, gated
from .figures import GateFigures
from .gate import AB_REMEASURE_PAIRS, GateResult, run_gate
from .regressions import GENERATION_FIGURES


@dataclass(frozen=True)
class GenerationMeasurement:
    """A decoder's generation measured in fresh worker processes (:func:`measure_rounds`), the
    decoders' counterpart of a tensor model's ``TimedMeasurement``: every timed generation's TTFT,
    TPOT and decode time pooled over the processes (seconds), each process's own figures
    (``processes``, what the merge gate compares), the load time as the processes' median, memory
    as their maximum, the runtime's own counters beside ours and the generations each process
    timed (fewer than ``runs=`` where the worker's time cap stopped it)."""

    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    decode_s: list[float] = field(default_factory=list)  # per generation, with ttft_s
    # per fresh process: its TTFT and TPOT P50s and, where the worker probed the machine, the probe
    # and the fastest whole generation, which the gate's slower-machine rule reads as it reads a
    # tensor model's fastest run
    processes: tuple[GenerationProcessFigures, ...] = ()
    load_ms: float | None = None
    peak_memory_mb: float | None = None
    steady_memory_mb: float | None = None
    runtime_timings: RuntimeTimings | None = None
    runs: list[int] = field(default_factory=list)

    def capped(self, runs: int) -> str | None:
        """Why fewer than ``runs`` generations were timed in a process (None: every process timed them all)."""
        if self.runs and min(self.runs) < runs:
            return (f"{min(self.runs)} of runs={runs} timed generations in a process: the worker stops after "
                    f"{GENERATION_TIME_CAP_S:g} s")
        return None


# rounds -> one pooled measurement per artifact, this one first, then its twin (measure_rounds)
MeasureRounds = Callable[[int], "list[GenerationMeasurement]"]


def measure_rounds(pool: WorkerPool, backend: str, models: Sequence[tuple[Path, LlmConfig]], prompt: Sequence[int],
                   new_tokens: int, warmup: int, runs: int, rounds: int, threads: int = 1) -> list[GenerationMeasurement]:
    """TTFT and TPOT of each model in ``rounds`` fresh worker processes of ``backend`` (the one
    measurement policy of tensor models, measurer.fresh_rounds: A B, B A, ... under the machine's
    measurement lock, forked or spawned or on a device as the session's workers are, each within
    edge_timeout); one pooled result per model (see :func:`_pooled`). A process that failed raises
    BackendError naming the artifact and the backend."""
    from .measurer import fresh_rounds

    configs = {str(artifact): config for artifact, config in models}

    def measure_one(worker: Any, artifact: Path) -> tuple[DecoderLoaded, GenerationTimes]:
        key = f"decoder|{artifact}"
        try:
            loaded = reply_as(DecoderLoaded, Load.op, worker.request(
                Load(key, str(artifact), threads, with_coverage=False, decoder=configs[str(artifact)]),
                artifact=str(artifact)))
            result = reply_as(GenerationTimes, MeasureGeneration.op, worker.request(
                MeasureGeneration(key, list(prompt), new_tokens, warmup, runs), artifact=str(artifact)))
        except BackendError as exc:
            raise BackendError(f"{artifact} ({backend}): measuring failed: {exc}") from None
        return loaded, result

    results = fresh_rounds(pool, backend, [artifact for artifact, _ in models], rounds, measure_one)
    return [_pooled(r) for r in results]


def _pooled(processes: Sequence[tuple[DecoderLoaded, GenerationTimes]]) -> GenerationMeasurement:
    results = [times for _, times in processes]
    peaks = [r.peak_memory_mb for r in results if r.peak_memory_mb is not None]
    steadies = [r.steady_memory_mb for r in results if r.steady_memory_mb is not None]
    return GenerationMeasurement(
        ttft_s=[t for r in results for t in r.ttft_s], tpot_s=[t for r in results for t in r.tpot_s],
        decode_s=[t for r in results for t in r.decode_s],
        processes=tuple(_process_figures(r) for r in results),
        load_ms=float(np.median([loaded.load_ms for loaded, _ in processes])),
        peak_memory_mb=max(peaks) if peaks else None, steady_memory_mb=max(steadies) if steadies else None,
        runtime_timings=_runtime_timings([r.runtime_timings for r in results],
                                         [(r.ttft_s, r.decode_s) for r in results]),
        runs=[r.runs for r in results])


def _process_figures(times: GenerationTimes) -> GenerationProcessFigures:
    probed = bool(times.probe_us and times.generation_s)  # a probe of 0 is none
    return GenerationProcessFigures(
        ttft_p50_ms=float(np.median(times.ttft_s)) * 1000.0,
        tpot_p50_ms=float(np.median(times.tpot_s)) * 1000.0 if times.tpot_s else None,
        probe_us=times.probe_us if probed else None, fastest_ms=min(times.generation_s) * 1000.0 if probed else None)


def _runtime_timings(per_process: Sequence[Sequence[RuntimeCounters | None] | None],
                     ours: Sequence[tuple[Sequence[float], Sequence[float]]] = ()) -> RuntimeTimings | None:
    """The runtime's own counters (llama.cpp's llama_perf_context), read per timed generation: summed
    over every process's generations, with the tokens per second the sums give, and per generation
    (``per_generation``) the field's speeds as ours are taken (metrics.timing_figures), mean and
    standard deviation over the same generations, and ``counted``: the share of our prefill and
    decode time (each process's TTFTs and decode times, ``ours``) the runtime's counters count,
    median over the generations (1.0: none of it is outside the runtime)."""
    found = [t for process in per_process if process for t in process if t]
    if not found:
        return None
    prefill_shares: list[float] = []
    decode_shares: list[float] = []
    for process, (ttft_s, decode_s) in zip(per_process, ours):
        for counted, ttft, decode in zip(process or [], ttft_s, decode_s):
            if counted and ttft > 0 and decode > 0:
                prefill_shares.append(counted.prompt_eval_ms / 1000 / ttft)
                decode_shares.append(counted.eval_ms / 1000 / decode)
    total = RuntimeCounters.summed(found)
    prefill = [t.prompt_tokens / t.prompt_eval_ms * 1000 for t in found if t.prompt_eval_ms > 0]
    decode = [t.eval_tokens / t.eval_ms * 1000 for t in found if t.eval_ms > 0]
    return RuntimeTimings(
        source=total.source, prompt_eval_ms=total.prompt_eval_ms, prompt_tokens=total.prompt_tokens,
        eval_ms=total.eval_ms, eval_tokens=total.eval_tokens, ttft_ms=total.ttft_ms,
        prompt_tokens_per_s=total.prompt_tokens / total.prompt_eval_ms * 1000 if total.prompt_eval_ms else None,
        eval_tokens_per_s=total.eval_tokens / total.eval_ms * 1000 if total.eval_ms else None,
        per_generation=RuntimePerGeneration(len(found), MeanSd.of(prefill), MeanSd.of(decode),
                                            CountedShare(_median(prefill_shares), _median(decode_shares))))


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


def twin_config(twin: Path, fallback: LlmConfig) -> LlmConfig:
    """The twin's own configuration (its exporter's files beside it), else the tested artifact's."""
    try:
        return read_config(twin)
    except EdgeUsageError:
        return fallback


def stored_figures(record: Record, backend: str) -> GateFigures:
    """A stored report's record as the gate reads a decoder's: its per-process generation figures
    (none where the record has no ``llm.processes``: its timed figures are then not compared), its
    peak memory and artifact size, read from its JSON by the one parser, as a live record is."""
    stored = record.to_json()
    processes = (stored.get("llm") or {}).get("processes") or []
    return GateFigures.from_json({"backend": backend, "processes": processes,
                                  "peak_memory_mb": stored.get("peak_memory_mb"),
                                  "artifact_bytes": stored.get("artifact_bytes"), "model": stored.get("model")},
                                 source=record.test)


def as_gated(backend: str, measured: GenerationMeasurement, artifact: Path | None = None,
             rootdir: Path | None = None) -> GateFigures:
    """A measurement (measure_rounds) of ``artifact`` as the gate reads a record: with the
    artifact's size, gated as every model's."""
    path = relative_path(artifact, rootdir or Path.cwd()) if artifact is not None else None
    sized = {"artifact_bytes": artifact_size(artifact, backend)[0], "model": {"artifact": path}} if artifact else {}
    return GateFigures.from_json({"backend": backend, "processes": codec.to_json(measured.processes),
                                  "peak_memory_mb": measured.peak_memory_mb, **sized},
                                 source=path or "a decoder's measurement")


def judge(backend: str, measured: GenerationMeasurement, baseline: GateFigures, *, paired: bool,
          measure_again: MeasureRounds, processes: int, max_regression: float, strict: bool,
          source: str, artifact: Path | None = None, rootdir: Path | None = None) -> GateResult:
    """The gate's decision on one measurement against the twin's (``paired``: ``baseline`` is the
    twin measured in the same rounds) or a stored record. ``measure_again(rounds)`` measures this
    artifact (and the twin, in A/B mode) again in fresh processes: at least AB_REMEASURE_PAIRS pairs
    in A/B mode, ``processes`` otherwise, as for every other model."""

    def remeasure() -> tuple[GateFigures, GateFigures | None]:
        again, *twin_again = measure_again(max(processes, AB_REMEASURE_PAIRS) if paired else processes)
        return as_gated(backend, again, artifact, rootdir), (as_gated(backend, twin_again[0]) if twin_again else None)

    return run_gate(as_gated(backend, measured, artifact, rootdir), baseline, paired=paired, max_regression=max_regression,
                    strict=strict, remeasure=remeasure, source=source, figures=GENERATION_FIGURES)


def gate_generation(settings: Settings, test_id: str, backend: str, model: Model, artifact: Path,
                    twin: Path | None, measured: GenerationMeasurement, twin_measured: GenerationMeasurement | None,
                    rounds: MeasureRounds) -> GateResult | None:
    """The merge gate's decision on a decoder's generation figures, against the baseline the one
    rule chooses (baseline.choose_baseline, as for every kind): ``twin`` (measured with it in the
    same rounds), else the stored report's record; a model with neither is new in this change,
    listed and not judged (None: no baseline asked for)."""
    choice = choose_baseline(settings, model, artifact, test_id, backend)

    def against(baseline: GateFigures, paired: bool) -> GateResult:
        return judge(backend, measured, baseline, paired=paired, measure_again=rounds, processes=settings.processes,
                     max_regression=settings.max_regression, strict=settings.strict_timing, source=choice.source,
                     artifact=artifact, rootdir=settings.rootdir)

    def judged(choice: BaselineChoice) -> GateResult:
        if choice.twin is not None:
            if twin_measured is None or twin != choice.twin:
                raise RuntimeError(f"the baseline twin {choice.source} of {artifact} was not measured")
            return against(as_gated(backend, twin_measured, twin, settings.rootdir), paired=True)
        assert choice.stored is not None  # neither a twin nor new: the stored report's record
        return against(stored_figures(choice.stored, backend), paired=False)

    return gated(choice, judged)


# ------------------------------------------------------------ the context sweep
# The runtime's words for an allocation that failed (ONNX Runtime's std::bad_alloc or its arena's
# message, Python's MemoryError, GenAI's), whether it raised them or aborted on them.
_OUT_OF_MEMORY = ("bad_alloc", "MemoryError", "MemoryAllocationFailed", "Failed to allocate memory")


def context_lengths(start: int, cap: int) -> list[int]:
    """Doubling lengths from ``start`` up to ``cap``, ``cap`` itself last."""
    lengths, n = [], max(2, start)
    while n < cap:
        lengths.append(n)
        n *= 2
    return lengths + [cap]


@dataclass(frozen=True)
class ContextProbe:
    """How one length of the sweep ended in its worker (:func:`context_point`): its status, the
    memory where it ran, the worker's or the runtime's reason where it did not."""

    status: str
    peak_memory_mb: float | None = None
    steady_memory_mb: float | None = None
    error: str | None = None


def context_point(pool: WorkerPool, backend: str, artifact: Path, config: LlmConfig, length: int,
                  memory_limit_mb: float | None, threads: int = 1) -> ContextProbe:
    """One length of the sweep in a fresh worker of ``backend`` (this machine's or a device's), under
    an address-space limit of ``memory_limit_mb`` over what it maps before the load: the decoder
    loaded with a cache for ``length`` positions (llama.cpp's n_ctx, GenAI's max_length, not the
    model's maximum), a prompt of ``length`` - 1 tokens and one decode step. Its status ("ok", "out of
    memory", "failed", "killed", "crashed", "timed out") and, where it stopped, ``error``: how the
    worker ended and the runtime's own reason as it gave it."""
    worker = pool.fresh(backend)
    key = f"context|{artifact}|{length}"
    try:
        if memory_limit_mb:
            worker.request(LimitAddressSpace(float(memory_limit_mb)), artifact=str(artifact))
        worker.request(Load(key, str(artifact), threads, with_coverage=False,
                            decoder=config.for_context(int(length))), artifact=str(artifact))
        reply = reply_as(ContextMemory, ProbeContext.op, worker.request(ProbeContext(key, int(length), config.vocab_size),
                                                                        artifact=str(artifact)))
        return ContextProbe("ok", reply.peak_memory_mb, reply.steady_memory_mb)
    except BackendCrash as exc:
        status, error = _ended(exc)
        return ContextProbe(status, error=error)
    except BackendError as exc:  # the runtime raised: its reason, after the worker's words for the request
        reason = str(exc).partition(f"{artifact}: ")[2] or str(exc)
        return ContextProbe("out of memory" if any(w in reason for w in _OUT_OF_MEMORY) else "failed", error=reason)
    finally:
        worker.close()


def _ended(crash: BackendCrash) -> tuple[str, str]:
    """(status, error) of a worker that died during a point: the signal or exit status and the last
    line the runtime printed. Only SIGKILL is the OOM killer's signal (or a kill from outside); a
    runtime that aborted on a failed allocation (SIGABRT after std::bad_alloc) ran out of memory
    under the limit, and one that crashed otherwise crashed."""
    ended, said = crash.ended, crash.printed.strip().splitlines()[-1:] if crash.printed else []
    if ended is None:  # no answer within edge_timeout (the worker was killed), or its zygote went
        return ("timed out" if "did not answer" in str(crash) else "crashed"), str(crash).split("\n")[0]
    how = "killed by SIGKILL" if ended == "signal SIGKILL" else f"ended by {ended.removeprefix('signal ')}"
    reason = f"{how}{': ' + said[0] if said else ''}"
    if ended == "signal SIGKILL":
        return "killed", f"{reason} (the OOM killer, or a kill from outside)"
    if said and any(word in said[0] for word in _OUT_OF_MEMORY):
        return "out of memory", reason
    return "crashed", reason


def context_sweep(pool: WorkerPool, backend: str, artifact: Path, config: LlmConfig, lengths: Sequence[int],
                  memory_budget_mb: float | None, memory_limit_mb: float | None = None,
                  threads: int = 1) -> ContextSweep:
    """Each length in a fresh worker (:func:`context_point`), shortest first, until one fails (an
    allocation past ``memory_limit_mb`` fails), is killed, or goes over ``memory_budget_mb``: the
    longest stable length and where it stopped (its length and the reason, as recorded)."""
    points: list[ContextLength] = []
    longest, stopped = None, None
    for length in sorted(int(n) for n in lengths):
        result = context_point(pool, backend, artifact, config, length, memory_limit_mb, threads)
        status = result.status
        if result.error is None and memory_budget_mb is not None and (result.peak_memory_mb or 0.0) > memory_budget_mb:
            status = "over memory budget"
        points.append(ContextLength(length, status, result.peak_memory_mb, config.kv_cache_bytes(length) / 2**20,
                                    result.error))
        if status != "ok":
            stopped = ContextStop(length, result.error or status)
            break
        longest = length
    return ContextSweep(tuple(points), longest, stopped, any(p.status == "killed" for p in points))
