"""The parts of a decoder's record (``GenerationRecord``, the report's ``llm`` block) as types: each
prompt's result, the teacher-forced figures, the figures measured in fresh processes (per process
and pooled, with the runtime's own counters) and the context sweep. Written and read by the
package's codec (:mod:`pytest_edge.codec`), in the report's keys and order (docs/reports.md); a
figure that was not measured is None (null), never a made-up number. A leaf of core: the judging,
llm and run layers build these, the record holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..codec import json_field, optional
from ..measurement.stats import MeanSd  # a figure's mean and sd over the generations (MeanSd.of)


# ------------------------------------------------------------------ accuracy


@dataclass(frozen=True)
class TokenPosition:
    """Where a teacher-forced figure lies over every prompt: the prompt's index and the new token's."""

    prompt: int
    position: int


@dataclass(frozen=True)
class KlDivergence:
    """The KL divergence of the reference's distribution to the backend's over the positions, in nats."""

    mean: float
    p99: float
    maximum: float = json_field(key="max")


@dataclass(frozen=True)
class TeacherForcedFigures:
    """One prompt's teacher-forced figures (llm.metrics.TeacherForced): top-1 agreement over its
    positions, the first position whose argmax is not the golden's, and where the golden keeps its
    distributions the KL divergence, the position of its maximum and the most mass the golden's
    top-k leaves out (how much the divergence may understate)."""

    positions: int
    top1_agreement: float
    first_top1_difference: int | None
    kld: KlDivergence | None
    # Written with the KL divergence only (the report has never had them without it).
    max_kld_at: int | None = optional()
    golden_rest_mass_max: float | None = optional()


@dataclass(frozen=True)
class TeacherForcedOverall:
    """The teacher-forced figures over every prompt's positions (what ``min_top1_agreement`` and
    ``max_kld`` judge), positions named by prompt and new token; ``not_measured`` says why a figure
    is missing (a runtime without logits, a golden without distributions)."""

    positions: int
    top1_agreement: float | None  # None: not measured (no logits)
    first_top1_difference: TokenPosition | None
    kld: KlDivergence | None
    max_kld_at: TokenPosition | None = optional()
    golden_rest_mass_max: float | None = optional()
    not_measured: str | None = optional()


@dataclass(frozen=True)
class PromptResult:
    """One prompt of a decoder check: the golden's and this run's new tokens, where they part, the
    first step's logits against the golden's (None where not comparable: NaN, another shape, a
    runtime without logits, said by ``shape`` or ``not_measured``), the prompt's teacher-forced
    figures and the backend that recorded the golden."""

    prompt_tokens: int
    golden_tokens: tuple[int, ...]
    tokens: tuple[int, ...]
    token_agreement: float
    first_difference: int | None
    max_abs_err: float | None
    cosine: float | None
    # The golden's and this run's logits shapes, where they differ.
    shape: tuple[tuple[int, ...], tuple[int, ...]] | None = optional()
    not_measured: str | None = optional()  # why the runtime gives no logits
    teacher_forced: TeacherForcedFigures | None = None
    reference: str | None = None


# ------------------------------------------------------------------ measured in fresh processes


@dataclass(frozen=True)
class TimingPercentiles:
    """A timed figure's P50 and P90 over the timed generations, in ms (None: no sample)."""

    p50: float | None
    p90: float | None


@dataclass(frozen=True)
class GenerationProcessFigures:
    """One fresh process's figures, what the merge gate compares (judging.figures.ProcessFigures
    reads them): its TTFT and TPOT P50s and, where the worker probed the machine, the probe's time
    and the fastest whole generation (the slower-machine rule's figures)."""

    ttft_p50_ms: float | None
    tpot_p50_ms: float | None  # None: one new token, no TPOT sample
    probe_us: float | None = optional()
    fastest_ms: float | None = optional(key="min")


@dataclass(frozen=True)
class CountedShare:
    """The share of our prefill and decode time the runtime's own counters count (median over the
    generations; 1.0: none of it is outside the runtime)."""

    prefill: float | None
    decode: float | None


@dataclass(frozen=True)
class RuntimePerGeneration:
    """The runtime's speeds per timed generation, taken as ours are (llm.metrics.timing_figures)."""

    generations: int
    prefill_tokens_per_s: MeanSd
    decode_tokens_per_s: MeanSd
    counted: CountedShare


@dataclass(frozen=True)
class RuntimeTimings:
    """The runtime's own counters (llama.cpp's llama_perf_context, LiteRT-LM's BenchmarkInfo)
    summed over every process's timed generations, the speeds the sums give, and per generation."""

    source: str
    prompt_eval_ms: float
    prompt_tokens: int
    eval_ms: float
    eval_tokens: int
    ttft_ms: float | None = optional()  # a runtime that keeps its own time to first token
    prompt_tokens_per_s: float | None = None
    eval_tokens_per_s: float | None = None
    per_generation: RuntimePerGeneration | None = None


@dataclass(frozen=True)
class GenerationFigures:
    """What a decoder's fresh processes measured (the ``llm`` block's measured keys, written flat in
    it): TTFT and TPOT, the field's speeds, the samples and their 0..100th percentiles
    (llm.metrics.timing_figures), then load time, memory, each process's figures, the runtime's own
    counters, why fewer generations were timed than asked, and the KV cache's estimate. Every figure
    defaults to not measured: an older report's block lacks some."""

    prompt_tokens: int | None = None
    ttft_ms: TimingPercentiles | None = None
    tpot_ms: TimingPercentiles | None = None
    prefill_tokens_per_s: float | None = None
    prefill_tokens_per_s_sd: float | None = None
    decode_tokens_per_s: float | None = None
    decode_tokens_per_s_sd: float | None = None
    timed_generations: int | None = None
    ttft_samples: int | None = None
    tpot_samples: int | None = None
    ttft_quantiles_ms: tuple[float, ...] | None = None
    tpot_quantiles_ms: tuple[float, ...] | None = None
    load_ms: float | None = None
    peak_memory_mb: float | None = None
    steady_memory_mb: float | None = None
    processes: tuple[GenerationProcessFigures, ...] = ()
    runtime_timings: RuntimeTimings | None = None
    runs_capped: str | None = optional()
    kv_cache_estimate_mb: float | None = None


# The measured block's keys (written flat in the llm block: no field of it is renamed).
GENERATION_FIGURE_KEYS = frozenset(f.name for f in fields(GenerationFigures))


# ------------------------------------------------------------------ the context sweep


@dataclass(frozen=True)
class ContextLength:
    """One length of the context sweep, in a fresh worker: its status ("ok", "out of memory",
    "failed", "killed", "crashed", "timed out", "over memory budget"), peak memory (None where not
    measured), the KV cache's estimate and, where it stopped, the runtime's or the worker's reason."""

    tokens: int
    status: str
    peak_memory_mb: float | None
    kv_cache_estimate_mb: float | None
    error: str | None = optional()


@dataclass(frozen=True)
class ContextStop:
    """The length where the sweep stopped and why."""

    tokens: int
    reason: str


@dataclass(frozen=True)
class ContextSweep:
    """The context sweep (edge_llm's contexts=): each length tried, shortest first, the longest
    that ran within its limits (None: none did), where it stopped and whether the OS killed one."""

    points: tuple[ContextLength, ...]
    longest_stable: int | None
    stopped: ContextStop | None
    os_killed: bool
