"""The budget table: the budgets of the markers ``edge``, ``edge_llm`` and ``edge_asr`` are declared
once, in :data:`BUDGETS`. A budget is one row (:class:`~.rows.Budget`: keyword, unit parser, figure,
unit, the check that judges it on each marker it belongs to, sense, how its figure is read from what
its check is given, and where a report's record keeps that figure: :class:`~.rows.Kept`). Each
marker parses its keywords from it, the pipelines ask each check for the budgets of the table's
rows, a finding names its row, and the reports that follow figures over time (OpenMetrics, the run
history's table and trend charts) list the rows' kept figures: adding a budget is adding a row.

The checks are pure functions, measurements and budgets in, findings out (the regressions against a
baseline are in :mod:`pytest_edge.judging.regressions`), in the modules of their kind:
:mod:`.deployment` (what a deployment is: delegate coverage, an NPU compiler's plan, the tensor
arena; the sizes' check is here), :mod:`.timed` (a tensor model's timed runs) and :mod:`.blocks` (a
record block's figures, each read by its row). This module gives each, when it is called, the rows
of the table that name it (their figure and unit word its findings): the checks it exports
(``check_latency``...) are those the rows name and the pipelines call. The types of a row and of a
finding are :mod:`.rows`'."""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol

from ..errors import EdgeUsageError
from ..units import parse_drift, parse_fraction, parse_int, parse_kb, parse_mb, parse_ms, parse_number
from . import blocks, deployment, timed
from .blocks import ForcedFigures, GenerationBlock
from .rows import Budget, Budgets, Check, Finding, Kept, Rows, found

__all__ = ["BUDGET", "BUDGETS", "CONTEXT_BUDGET", "DRIFT_BUDGET", "EDGE", "EDGE_ASR", "EDGE_LLM", "MEMORY_BUDGET",
           "MIB", "MS", "TPOT_BUDGET", "TTFT_BUDGET", "Budget", "Budgets", "Check", "Finding", "Kept", "Rows",
           "budgets_for", "budgets_of", "check_arena", "check_compiled", "check_coverage", "check_drift",
           "check_generation", "check_latency", "check_load", "check_memory", "check_memory_growth", "check_sizes",
           "check_speech", "check_teacher_forced", "parse_operator_names", "parse_tokens"]


def _given_its_rows(check: Callable[..., list[Finding]]) -> Check:
    """``check`` as the pipelines call it: at each call it is given the rows of :data:`BUDGETS` that
    name it (read then, so a row added to the table is judged by its check)."""
    def judged(*args: Any, **kwargs: Any) -> list[Finding]:
        return check(*args, **kwargs, rows={row.keyword: row for row in BUDGETS if judged in row.checks.values()})
    functools.update_wrapper(judged, check, assigned=("__doc__", "__name__", "__qualname__"))  # this module's
    return judged


check_coverage = _given_its_rows(deployment.check_coverage)
check_compiled = _given_its_rows(deployment.check_compiled)
check_arena = _given_its_rows(deployment.check_arena)
check_latency = _given_its_rows(timed.check_latency)
check_load = _given_its_rows(timed.check_load)
check_drift = _given_its_rows(timed.check_drift)
check_memory = _given_its_rows(timed.check_memory)
check_memory_growth = _given_its_rows(timed.check_memory_growth)
check_generation = _given_its_rows(blocks.check_generation)
check_speech = _given_its_rows(blocks.check_speech)
check_teacher_forced = _given_its_rows(blocks.check_teacher_forced)


# Beside the table rather than in deployment.py: run/pipeline.py names this check's keywords too (it
# judges a compiled artifact's size alone), and a keyword is spelled in 2 modules at most
# (tests/test_budget_rows.py).
@_given_its_rows
def check_sizes(artifact: str, artifact_bytes: int | None, runtime: str, runtime_bytes: int | None,
                budgets: Budgets, backend: str, runtime_reason: str | None = None,
                artifact_reason: str | None = None, *, rows: Rows) -> list[Finding]:
    """``max_artifact_mb`` against the artifact (with its external data), ``max_runtime_mb`` against
    the runtime's installed package; MB = 2**20 bytes."""
    problems = []
    for what, figure, key, unknown in (
            (f"artifact {artifact}", artifact_bytes, "max_artifact_mb", artifact_reason or "its size could not be read"),
            (f"runtime package {runtime}", runtime_bytes, "max_runtime_mb",
             runtime_reason or "its size could not be read")):
        budget = budgets.get(key)
        if budget is None:
            continue
        if figure is None:
            problems.append(found(rows, key, None, budget, f"{backend}: {what}: {unknown} ({key}={budget:g})"))
        elif figure / 2**20 > budget:
            problems.append(found(rows, key, figure / 2**20, budget,
                                  f"{backend}: {what} is {figure / 2**20:.4g} MB ({figure} bytes) > {key} "
                                  f"{budget:.4g} MB ({round(budget * 2**20)} bytes)"))
    return problems


def parse_operator_names(value: Any, what: str) -> tuple[str, ...]:
    """Operator names (``["CALL_ONCE"]``, or ``"CALL_ONCE, QUANTIZE"``): non-empty strings, as the
    record names operators (by type or by id)."""
    if isinstance(value, str):
        value = [name for name in value.split(",")]
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) for v in value):
        raise EdgeUsageError(f"{what}: expected operator names, e.g. [\"CALL_ONCE\"], got {value!r}")
    names = tuple(dict.fromkeys(v.strip() for v in value))
    if not names or "" in names:
        raise EdgeUsageError(f"{what}: expected operator names, e.g. [\"CALL_ONCE\"], got {value!r}")
    return names


def parse_tokens(value: Any, what: str) -> int:
    """A context length: an int of at least 2 tokens."""
    return parse_int(value, what, 2)


EDGE, EDGE_LLM, EDGE_ASR = "edge", "edge_llm", "edge_asr"  # the markers a budget belongs to


class Percentiles(Protocol):
    """A timed figure's percentiles in ms (core.generation_figures.TimingPercentiles)."""

    @property
    def p50(self) -> float | None: ...


class MeasuredGeneration(Protocol):
    """What a decoder's fresh processes measured, as its rows read it (core.generation_figures.
    GenerationFigures: a layer above the table's, so named here by what is read)."""

    @property
    def ttft_ms(self) -> Percentiles | None: ...
    @property
    def tpot_ms(self) -> Percentiles | None: ...
    @property
    def decode_tokens_per_s(self) -> float | None: ...
    @property
    def prefill_tokens_per_s(self) -> float | None: ...
    @property
    def peak_memory_mb(self) -> float | None: ...
    @property
    def load_ms(self) -> float | None: ...


class DecoderBlock(GenerationBlock, Protocol):
    """A decoder's block as the rows of check_generation read it."""

    @property
    def measured(self) -> MeasuredGeneration | None: ...


# How check_generation, check_teacher_forced and check_speech read a row's figure from the typed block
# they are given (blocks.py's protocols name what they read): None where it was not measured.
def _measured(read: Callable[[MeasuredGeneration], "float | None"]) -> Callable[[DecoderBlock], "float | None"]:
    """A figure of a decoder block's measured figures."""
    return lambda block: read(block.measured) if block.measured is not None else None


def _swept(block: GenerationBlock) -> float | None:
    return block.context.longest_stable if block.context is not None else None


def _forced(read: Callable[[ForcedFigures], "float | None"]) -> Callable[[ForcedFigures | None], "float | None"]:
    """A teacher-forced figure (no figures: not measured)."""
    return lambda figures: read(figures) if figures is not None else None


def _worst_kld(figures: ForcedFigures) -> str:
    kld, at = figures.kld, figures.max_kld_at
    if kld is None or at is None:  # the divergence's worst position is written with the divergence
        return ""
    return f" (P99 {kld.p99:.4g}, max {kld.maximum:.4g} at prompt {at.prompt} new token {at.position})"


def _first_difference(figures: ForcedFigures) -> str:
    at = figures.first_top1_difference
    return "" if at is None else f" (first at prompt {at.prompt} new token {at.position})"


# Rows other code reads by what they mean: the context sweep runs for the longest-stable-context
# budget, and each of its lengths must stay within the decoder's memory budget; the generation
# reports read the decoder's timed figures where the TTFT and TPOT budgets' rows keep them; a drift
# budget times each process longer.
CONTEXT_BUDGET = "max_context"
MEMORY_BUDGET = "peak_memory_mb"
TTFT_BUDGET, TPOT_BUDGET = "ttft_ms", "tpot_ms"
DRIFT_BUDGET = "max_drift"

MS, MIB = 1e-3, 2.0 ** 20  # a record's ms in seconds; its MB (MiB: VmHWM's kB / 1024) in bytes


# Where a typed record (core.record.Record) keeps a row's figure: each reader takes one and reads what
# its row's path names in the record's JSON (Kept.readers).
def _latency(key: str) -> Callable[[Any], "float | None"]:
    return lambda record: record.latency_ms.get(key) if record.latency_ms is not None else None


def _coverage(read: Callable[[Any], "float | None"]) -> Callable[[Any], "float | None"]:
    return lambda record: read(record.coverage) if record.coverage is not None else None


def _npu_memory(key: str) -> Callable[[Any], "float | None"]:
    return lambda record: record.npu.memories.get(key) if record.npu is not None else None


def _decoder(read: Callable[[Any], "float | None"]) -> Callable[[Any], "float | None"]:
    """A figure of a decoder record's measured generation (GenerationFigures), None where not measured."""
    return lambda record: read(record.generation.measured) \
        if record.generation is not None and record.generation.measured is not None else None


BUDGETS: tuple[Budget, ...] = (
    Budget("max_fallback", parse_fraction, "delegate fallback", "fraction", {EDGE: check_coverage}, measured=False,
           hint="0 (every operator on the accelerator)",
           kept=Kept((("coverage", "fallback"),), 50, "fallback_ratio",
                     "share of the model's operators outside the delegate", "ratio", shown="fallback",
                     trend="fallback share", trend_unit="fraction of operators",
                     readers=(_coverage(lambda coverage: coverage.fallback),))),
    Budget("max_partitions", parse_int, "delegate partitions", "partitions", {EDGE: check_coverage}, measured=False,
           kept=Kept((("coverage", "partitions"),), 51, "delegate_partitions", "partitions the delegate took",
                     readers=(_coverage(lambda coverage: coverage.partitions),))),
    # Not a figure: the operators max_fallback leaves out (expected on the CPU), named in its message.
    Budget("allowed_cpu_ops", parse_operator_names, "operators allowed on the CPU", "operators",
           {EDGE: check_coverage}, measured=False, qualifies="max_fallback",
           hint='["CALL_ONCE"] (named operators may stay on the CPU)'),
    Budget("p50_ms", parse_ms, "P50 latency", "ms", {EDGE: check_latency}, measured=True,
           kept=Kept((("latency_ms", "p50"),), 10, "latency_p50_seconds", "median latency of the timed runs",
                     "seconds", MS, shown="P50 ms", readers=(_latency("p50"),))),
    Budget("p90_ms", parse_ms, "P90 latency", "ms", {EDGE: check_latency}, measured=True,
           kept=Kept((("latency_ms", "p90"),), 11, "latency_p90_seconds", "90th percentile latency of the timed runs",
                     "seconds", MS, readers=(_latency("p90"),))),
    Budget("p99_ms", parse_ms, "P99 latency", "ms", {EDGE: check_latency}, measured=True,
           kept=Kept((("latency_ms", "p99"),), 12, "latency_p99_seconds", "99th percentile latency of the timed runs",
                     "seconds", MS, shown="P99 ms", readers=(_latency("p99"),))),
    Budget("max_drift", parse_drift, "drift", "ratio", {EDGE: check_drift}, measured=True),
    Budget("max_memory_growth_kb_per_run", parse_kb, "memory growth", "KB per run", {EDGE: check_memory_growth},
           measured=True),
    Budget("max_artifact_mb", parse_mb, "artifact size", "MB", {EDGE: check_sizes}, measured=False,
           kept=Kept((("artifact_bytes",),), 40, "artifact_size_bytes", "size of the model's files", "bytes",
                     shown="artifact B", fmt=".0f", trend="artifact size", trend_unit="bytes",
                     readers=(lambda record: record.artifact_bytes,))),
    Budget("max_runtime_mb", parse_mb, "runtime package size", "MB", {EDGE: check_sizes}, measured=False),
    # A compile-time target's (an NPU compiler's, docs/npu.md): memory it planned and its estimate.
    Budget("max_sram_kb", parse_kb, "SRAM used", "KiB", {EDGE: check_compiled}, measured=False,
           kept=Kept((("npu", "memories", "sram"),), 60, "npu_sram_bytes", "SRAM the NPU compiler planned", "bytes",
                     shown="SRAM B", fmt=".0f", trend="NPU SRAM", trend_unit="bytes", readers=(_npu_memory("sram"),))),
    Budget("max_flash_kb", parse_kb, "off-chip flash used", "KiB", {EDGE: check_compiled}, measured=False,
           kept=Kept((("npu", "memories", "off_chip_flash"),), 61, "npu_off_chip_flash_bytes",
                     "off-chip flash the NPU compiler planned", "bytes", shown="flash B", fmt=".0f",
                     readers=(_npu_memory("off_chip_flash"),))),
    Budget("max_dram_kb", parse_kb, "DRAM used", "KiB", {EDGE: check_compiled}, measured=False,
           kept=Kept((("npu", "memories", "dram"),), 62, "npu_dram_bytes", "DRAM the NPU compiler planned", "bytes",
                     readers=(_npu_memory("dram"),))),
    Budget("max_npu_estimated_ms", parse_ms, "estimated NPU inference time", "ms", {EDGE: check_compiled},
           measured=False),
    # A microcontroller runtime's tensor arena, as the runtime reports it (backends/arena.py).
    Budget("max_arena_kb", parse_kb, "tensor arena", "KiB", {EDGE: check_arena}, measured=False),
    # A decoder's timed figures, read from its record's llm block (what check_generation is given).
    Budget("ttft_ms", parse_ms, "TTFT P50", "ms", {EDGE_LLM: check_generation}, measured=True,
           read=_measured(lambda measured: measured.ttft_ms and measured.ttft_ms.p50),
           kept=Kept((("llm", "ttft_ms", "p50"),), 70, "llm_ttft_p50_seconds", "decoder: median time to first token",
                     "seconds", MS, shown="TTFT ms", trend="TTFT P50", trend_unit="ms",
                     readers=(_decoder(lambda measured: measured.ttft_ms and measured.ttft_ms.p50),))),
    Budget("tpot_ms", parse_ms, "TPOT P50", "ms", {EDGE_LLM: check_generation}, measured=True,
           read=_measured(lambda measured: measured.tpot_ms and measured.tpot_ms.p50),
           kept=Kept((("llm", "tpot_ms", "p50"),), 71, "llm_tpot_p50_seconds", "decoder: median time per output token",
                     "seconds", MS, shown="TPOT ms", trend="TPOT P50", trend_unit="ms",
                     readers=(_decoder(lambda measured: measured.tpot_ms and measured.tpot_ms.p50),))),
    Budget("min_decode_tps", parse_number, "decode tokens/s", "tokens/s", {EDGE_LLM: check_generation},
           measured=True, sense="min", read=_measured(lambda measured: measured.decode_tokens_per_s),
           kept=Kept((("llm", "decode_tokens_per_s"),), 81, "llm_decode_tokens_per_second", "decoder: decode throughput",
                     shown="decode tok/s", fmt=".0f",
                     readers=(_decoder(lambda measured: measured.decode_tokens_per_s),))),
    Budget("min_prefill_tps", parse_number, "prefill tokens/s", "tokens/s", {EDGE_LLM: check_generation},
           measured=True, sense="min", read=_measured(lambda measured: measured.prefill_tokens_per_s),
           kept=Kept((("llm", "prefill_tokens_per_s"),), 80, "llm_prefill_tokens_per_second",
                     "decoder: prefill throughput",
                     readers=(_decoder(lambda measured: measured.prefill_tokens_per_s),))),
    # Both markers': a tensor model's from its pipeline, a decoder's from its llm block.
    Budget("peak_memory_mb", parse_mb, "peak memory", "MB", {EDGE: check_memory, EDGE_LLM: check_generation},
           measured=True, read=_measured(lambda measured: measured.peak_memory_mb),
           kept=Kept((("peak_memory_mb",), ("llm", "peak_memory_mb")), 30, "peak_memory_bytes",
                     "peak resident memory of the measuring process", "bytes", MIB, shown="peak MB", fmt=".1f",
                     trend="peak memory", trend_unit="MB",
                     readers=(lambda record: record.peak_memory_mb,
                              _decoder(lambda measured: measured.peak_memory_mb)))),
    Budget("max_load_ms", parse_ms, "load time", "ms", {EDGE: check_load, EDGE_LLM: check_generation}, measured=True,
           read=_measured(lambda measured: measured.load_ms),
           kept=Kept((("load_ms",), ("llm", "load_ms")), 20, "load_seconds", "time to load the model", "seconds", MS,
                     shown="load ms", fmt=".1f",
                     readers=(lambda record: record.load_ms, _decoder(lambda measured: measured.load_ms)))),
    # Teacher-forced over the golden continuation (llama-perplexity --kl-divergence's figures): not timed.
    Budget("min_top1_agreement", parse_fraction, "teacher-forced top-1 agreement", "fraction",
           {EDGE_LLM: check_teacher_forced, EDGE_ASR: check_teacher_forced}, measured=False, sense="min",
           read=_forced(lambda figures: figures.top1_agreement), detail=_first_difference),
    Budget("max_kld", parse_number, "teacher-forced mean KL divergence", "nats",
           {EDGE_LLM: check_teacher_forced, EDGE_ASR: check_teacher_forced}, measured=False,
           read=_forced(lambda figures: figures.kld.mean if figures.kld is not None else None), detail=_worst_kld),
    # Measured by the context sweep, which stops at the first length over the peak_memory_mb budget.
    Budget("max_context", parse_tokens, "longest stable context", "tokens", {EDGE_LLM: check_generation},
           measured=True, sense="min", read=_swept),
    # A speech export's worst error rates over its audio files (the record's speech block).
    Budget("max_wer", parse_fraction, "word error rate against the reference's transcript", "fraction",
           {EDGE_ASR: check_speech}, measured=False, read=lambda rates: rates.wer),
    Budget("max_cer", parse_fraction, "character error rate against the reference's transcript", "fraction",
           {EDGE_ASR: check_speech}, measured=False, read=lambda rates: rates.cer),
)
BUDGET = {budget.keyword: budget for budget in BUDGETS}


def budgets_for(marker: str) -> tuple[Budget, ...]:
    """The rows of ``marker``'s budget keywords (``EDGE`` or ``EDGE_LLM``)."""
    return tuple(budget for budget in BUDGETS if marker in budget.checks)


def budgets_of(check: Check, values: Callable[[str], "float | None"]) -> dict[str, float | None]:
    """The budgets ``check`` judges, each keyword's value read by ``values`` (a marker's)."""
    return {budget.keyword: values(budget.keyword) for budget in BUDGETS if check in budget.checks.values()}
