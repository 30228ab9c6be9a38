"""Budget checks as pure functions: measurements and budgets in, findings out (the regressions
against a baseline are in :mod:`.judging.regressions`). The budgets of both markers, ``edge``
and ``edge_llm``, are declared once, in :data:`BUDGETS` (keyword, unit parser, figure, unit, the
check that judges it on each marker it belongs to, sense): each marker parses its keywords from it,
the pipelines ask each check for the budgets of the table's rows, and a finding names its row."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from .backends import Coverage
from .backends.arena import TensorArena
from .backends.compiled import Compilation
from .errors import EdgeUsageError
from .units import parse_drift, parse_fraction, parse_int, parse_kb, parse_mb, parse_ms, parse_number
from .measurement.stats import compare_pairs
from .measurement.timing import (DRIFT_MIN_TIME_S, DRIFT_MIN_WINDOW_RUNS, DRIFT_MIN_WINDOW_S, DRIFT_WINDOW_FRACTION,
                                 MIN_RUNS)

Budgets = Mapping[str, "float | None"]


@dataclass(frozen=True)
class Finding:
    """A budget a check found exceeded, or could not judge (``value`` None: the figure was not
    measured here): what the record keeps, beside the message the failure shows."""

    check: str  # the budget's keyword, a row of BUDGETS: "p50_ms"
    figure: str  # what it limits, in words: "P50 latency"
    value: float | None  # the measured figure in the budget's unit
    budget: float
    unit: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "figure": self.figure, "value": self.value, "budget": self.budget,
                "unit": self.unit, "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Finding":
        return cls(str(data.get("check")), str(data.get("figure")), data.get("value"), data.get("budget"),  # type: ignore[arg-type]
                   str(data.get("unit", "")), str(data.get("message")))


def _found(keyword: str, value: float | None, budget: float, message: str) -> Finding:
    row = BUDGET[keyword]
    return Finding(keyword, row.figure, value, budget, row.unit, message)


def _allowed(coverage: Coverage, allowed: Sequence[str]) -> tuple[Counter[str], set[str], list[str]]:
    """What of the CPU's operators ``allowed`` names, by type (``CALL_ONCE``: every one of it) or by
    the id the record gives one (``ASSIGN_VARIABLE Variable [init]``): (how many per type, the ids,
    the names that match nothing)."""
    wanted = {name.casefold(): name for name in allowed}

    def kind_of(op: str) -> str:
        return next((k for k in coverage.fallback_op_names if op == k or op.startswith(k + " ")), op)

    by_type = {kind for kind in coverage.fallback_op_names if kind.casefold() in wanted}
    kinds: Counter[str] = Counter({kind: coverage.fallback_op_names[kind] for kind in by_type})
    ids = {op for op in coverage.fallback_reasons if kind_of(op) in by_type}
    for op in coverage.fallback_reasons:
        if op.casefold() in wanted and kind_of(op) not in by_type:  # one named by its id
            ids.add(op)
            kinds[kind_of(op)] += 1
    matched = {kind.casefold() for kind in by_type} | {op.casefold() for op in ids}
    return kinds, ids, [name for key, name in wanted.items() if key not in matched]


def check_coverage(coverage: Coverage | None, budgets: Budgets, backend: str) -> list[Finding]:
    """``max_fallback`` and ``max_partitions`` against the delegate coverage the backend read;
    ``allowed_cpu_ops`` names operators expected on the CPU (a streaming model's CALL_ONCE), left out
    of the fraction ``max_fallback`` judges and named as allowed."""
    max_fallback, max_partitions = budgets.get("max_fallback"), budgets.get("max_partitions")
    allowed_names: Sequence[str] = budgets.get("allowed_cpu_ops") or ()  # type: ignore[assignment]
    if max_fallback is None and max_partitions is None:
        return []
    if coverage is None:
        keyword = "max_fallback" if max_fallback is not None else "max_partitions"
        return [_found(keyword, None, budgets[keyword],  # type: ignore[arg-type]
                       f"{backend}: delegate coverage cannot be read on this backend, so max_fallback/"
                       "max_partitions cannot be checked")]
    if coverage.total_ops == 0:  # a fraction of nothing is no 0 %: the budget judged nothing
        keyword = "max_fallback" if max_fallback is not None else "max_partitions"
        return [_found(keyword, None, budgets[keyword],  # type: ignore[arg-type]
                       f"{backend}: the runtime counted no operators in this model, so {keyword} judged nothing "
                       "(a graph without operators, or one the runtime did not read)")]
    problems = []
    how = " (predicted)" if coverage.method == "predicted" else ""
    how += " (approximate)" if coverage.approximate else ""
    kinds, allowed, unmatched = _allowed(coverage, allowed_names) if allowed_names else (Counter(), set(), [])
    excused = sum(kinds.values())
    fallback_ops, total_ops = coverage.fallback_ops - excused, coverage.total_ops - excused
    fallback = fallback_ops / total_ops if total_ops > 0 else 0.0
    if max_fallback is not None and fallback > max_fallback + 1e-12:
        counts = {name: count - kinds[name] for name, count in coverage.fallback_op_names.items()}
        ops = ", ".join(f"{name} x{count}" for name, count in
                        sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if count > 0)
        # An NPU compiler's placement names each operator it left on the CPU, with its reason.
        reasons = "".join(f"; {op}: {reason or 'no reason given'}" for op, reason in coverage.fallback_reasons.items()
                          if op not in allowed) if coverage.method == "compiler" else ""
        where = "left on the CPU by the NPU compiler" if coverage.method == "compiler" else "on default CPU kernels"
        let = ""
        if allowed_names:
            let = (f"; allowed on the CPU (allowed_cpu_ops, not counted): "
                   f"{', '.join(f'{kind} x{count}' for kind, count in sorted(kinds.items())) or 'none'}"
                   + (f" (allowed_cpu_ops names {', '.join(unmatched)}, which no CPU operator is)" if unmatched else ""))
        problems.append(_found("max_fallback", fallback, max_fallback,
            f"{backend}: fallback {fallback:.1%}{how} ({fallback_ops} of "
            f"{total_ops} operators {where}{' besides those allowed' if excused else ''}) > max_fallback "
            f"{max_fallback:.1%}; fell back: {ops or 'none named'}{reasons}{let}"))
    if max_partitions is not None and coverage.partitions > max_partitions:
        problems.append(_found("max_partitions", coverage.partitions, max_partitions,
                               f"{backend}: {coverage.partitions} delegate partitions{how} > max_partitions "
                               f"{max_partitions}"))
    return problems


def check_compiled(compiled: Compilation | None, budgets: Budgets, backend: str) -> list[Finding]:
    """``max_sram_kb``, ``max_flash_kb``, ``max_dram_kb`` and ``max_npu_estimated_ms`` against an NPU
    compiler's result (a compile-time target's); on any other backend such a budget is a finding:
    nothing compiled it."""
    figures = {"max_sram_kb": (compiled.sram_kib, "SRAM used") if compiled else None,
               "max_flash_kb": (compiled.flash_kib, "off-chip flash used") if compiled else None,
               "max_dram_kb": (compiled.dram_kib, "DRAM used") if compiled else None,
               "max_npu_estimated_ms": (compiled.estimated_ms, "estimated NPU inference time") if compiled else None}
    problems = []
    for keyword, figure in figures.items():
        budget = budgets.get(keyword)
        if budget is None:
            continue
        if figure is None:
            problems.append(_found(keyword, None, budget,
                                   f"{backend}: {keyword}={budget:g} judges an NPU compiler's figure, and {backend} "
                                   "is no compile-time target (docs/npu.md): name one in backends="))
            continue
        value, what = figure
        assert compiled is not None
        by = f" ({compiled.compiler}, {compiled.settings.get('system_config') or 'default system'}, " \
             f"{compiled.settings.get('memory_mode') or 'default memory mode'})"
        if value is None:
            problems.append(_found(keyword, None, budget, f"{backend}: {compiled.compiler} reported no {what} "
                                                          f"({keyword}={budget:g})"))
        elif keyword == "max_npu_estimated_ms" and value > budget:
            problems.append(_found(keyword, value, budget,
                                   f"{backend}: {what} {value:.4g} ms ({compiled.estimated_cycles} cycles at "
                                   f"{(compiled.clock_hz or 0) / 1e6:g} MHz, an estimate{by}) > {keyword} {budget:g} ms"))
        elif keyword != "max_npu_estimated_ms" and value > budget:
            exact = {"max_sram_kb": compiled.sram_bytes, "max_flash_kb": compiled.flash_bytes,
                     "max_dram_kb": compiled.memories.get("dram")}[keyword]
            problems.append(_found(keyword, value, budget,
                                   f"{backend}: {what} {value:.2f} KiB ({exact} bytes){by} > {keyword} {budget:g} KiB "
                                   f"({round(budget * 1024)} bytes)"))
    return problems


def check_arena(arena: TensorArena | None, budgets: Budgets, backend: str) -> list[Finding]:
    """``max_arena_kb`` against the tensor arena a microcontroller runtime reported for the model (its
    total: the RAM the device must give it); on a backend that reports none, a finding: nothing
    planned an arena there."""
    budget = budgets.get("max_arena_kb")
    if budget is None:
        return []
    if arena is None:
        return [_found("max_arena_kb", None, budget,
                       f"{backend}: max_arena_kb={budget:g} judges the tensor arena a microcontroller runtime "
                       f"reports, and {backend} reports none: name such a backend in backends= "
                       "(docs/backends-more-runtimes.md)")]
    if arena.total_kib > budget:
        return [_found("max_arena_kb", arena.total_kib, budget,
                       f"{backend}: tensor arena {arena.total_kib:.2f} KiB ({arena.total_bytes} bytes: head "
                       f"{arena.head_bytes}, tail {arena.tail_bytes}; {arena.reported_by}) > max_arena_kb "
                       f"{budget:g} KiB ({round(budget * 1024)} bytes)")]
    return []


def check_latency(latency: Mapping[str, float] | None, runs: int | None, budgets: Budgets,
                  backend: str) -> list[Finding]:
    problems = []
    for key in ("p50", "p90", "p99"):
        budget = budgets.get(f"{key}_ms")
        if budget is None:
            continue
        if latency is None:
            problems.append(_found(f"{key}_ms", None, budget,
                                   f"{backend}: {key.upper()} latency was not measured ({key}_ms={budget:g})"))
            continue
        figure = latency[key]
        if figure > budget:
            weak = ""
            if runs is not None and runs < MIN_RUNS[key]:
                weak = (f" [weak evidence: {key.upper()} from only {runs} runs; "
                        f"use runs>={MIN_RUNS[key]}]")
            problems.append(_found(f"{key}_ms", figure, budget,
                                   f"{backend}: {key.upper()} latency {figure:.3f} ms > {key}_ms {budget:g} ms "
                                   f"(over {runs} runs){weak}"))
    return problems


def check_load(load_ms: float | None, budgets: Budgets, backend: str) -> list[Finding]:
    budget = budgets.get("max_load_ms")
    if budget is None:
        return []
    if load_ms is None:
        return [_found("max_load_ms", None, budget, f"{backend}: load time was not measured (max_load_ms={budget:g})")]
    if load_ms > budget:
        return [_found("max_load_ms", load_ms, budget,
                       f"{backend}: load time {load_ms:.2f} ms > max_load_ms {budget:g} ms")]
    return []


def check_drift(drift: float | None, budgets: Budgets, per_process: Sequence[float | None], backend: str,
                probe_drift: float | None = None) -> list[Finding]:
    """``max_drift``: the runs of the last fifth of the timed time against those of the first fifth
    (``drift``: the geometric mean over the measuring processes, ``per_process`` each one's figure)
    must not be slower than the budget. With several processes the drift must also be significant
    over their spread (a one-sample t-test on log drift, as the gate judges latency), so one process
    hit by an interrupt storm in one window does not fail an unchanged model. Where the machine probe
    slowed down over the same windows (``probe_drift`` > 1: other load, frequency), the model is
    judged by its drift divided by the probe's, as the gate divides out a slower machine: a busy CI
    runner read drift 1.54 on an unchanged 7 us model while its probe drifted 1.18 (1.30 of the model's own)."""
    budget = budgets.get("max_drift")
    if budget is None:
        return []
    if drift is None:
        return [_found("max_drift", None, budget,
                       f"{backend}: drift was not measured (max_drift={budget:g}): the first and last fifth of "
                       f"each process's timed runs must last {DRIFT_MIN_WINDOW_S:g} s with {DRIFT_MIN_WINDOW_RUNS} runs "
                       f"at least (a max_drift test times {DRIFT_MIN_TIME_S:g} s per process; a slow model needs "
                       f"runs>={DRIFT_MIN_WINDOW_RUNS / DRIFT_WINDOW_FRACTION:.0f})")]
    machine_slowdown = probe_drift if probe_drift is not None and probe_drift > 1 else 1.0
    if drift <= budget or drift / machine_slowdown <= budget:
        return []
    figures = [d for d in per_process if d is not None and d > 0]
    if len(figures) > 1:
        change = compare_pairs(figures, [1.0] * len(figures))
        if not change.significant:
            return []
        evidence = (f"geometric mean of {len(figures)} processes: {', '.join(f'{d:.2f}' for d in figures)}; "
                    f"t={change.t:.2f}, needs > {change.critical:.2f}")
    else:
        evidence = "one process: no spread to judge it against"
    machine = (f"; the machine probe drifted {probe_drift:.2f} over the same windows"
               if probe_drift is not None else "")
    return [_found("max_drift", drift, budget,
                   f"{backend}: drift {drift:.3f} > max_drift {budget:g} (median run of the last fifth of the timed "
                   f"time over the first fifth, {evidence}); the model got slower while it ran: thermal throttling, "
                   f"a growing cache or allocation, or a busy machine{machine}")]


def check_memory(peak_mb: float | None, budgets: Budgets, backend: str) -> list[Finding]:
    budget = budgets.get("peak_memory_mb")
    if budget is None:
        return []
    if peak_mb is None:
        return [_found("peak_memory_mb", None, budget,
                       f"{backend}: peak memory could not be measured here (peak_memory_mb={budget:g})")]
    if peak_mb > budget:
        return [_found("peak_memory_mb", peak_mb, budget,
                       f"{backend}: peak memory {peak_mb:.1f} MB over the runtime's baseline > "
                       f"peak_memory_mb {budget:g} MB")]
    return []


def check_memory_growth(kb_per_run: float | None, mb_per_min: float | None, budgets: Budgets,
                        backend: str) -> list[Finding]:
    """``max_memory_growth_kb_per_run``: resident memory must not keep growing over the timed runs
    (a leak: the first on-device incident). Per run, so a machine's speed does not move it."""
    budget = budgets.get("max_memory_growth_kb_per_run")
    if budget is None:
        return []
    if kb_per_run is None:
        return [_found("max_memory_growth_kb_per_run", None, budget,
                       f"{backend}: memory growth could not be measured here (too few readings of resident "
                       f"memory; max_memory_growth_kb_per_run={budget:g})")]
    if kb_per_run > budget:
        per_min = f", {mb_per_min:.1f} MB per minute of runs" if mb_per_min is not None else ""
        return [_found("max_memory_growth_kb_per_run", kb_per_run, budget,
                       f"{backend}: resident memory grew {kb_per_run:.1f} KB per run over the timed runs{per_min} "
                       f"(the median process's slope) > max_memory_growth_kb_per_run {budget:g} KB: a leak")]
    return []


def check_sizes(artifact: str, artifact_bytes: int | None, runtime: str, runtime_bytes: int | None,
                budgets: Budgets, backend: str, runtime_reason: str | None = None,
                artifact_reason: str | None = None) -> list[Finding]:
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
            problems.append(_found(key, None, budget, f"{backend}: {what}: {unknown} ({key}={budget:g})"))
        elif figure / 2**20 > budget:
            problems.append(_found(key, figure / 2**20, budget,
                                   f"{backend}: {what} is {figure / 2**20:.4g} MB ({figure} bytes) > {key} "
                                   f"{budget:.4g} MB ({round(budget * 2**20)} bytes)"))
    return problems


def _outside(measured: Mapping[str, float | None], budgets: Budgets) -> Iterator[tuple[str, float | None, float, "Budget"]]:
    """(keyword, value, budget, row) of each budgeted figure of ``measured`` that was not measured
    (value None) or lies on the wrong side of its budget (``row.sense``); the caller words it."""
    for keyword, value in measured.items():
        budget = budgets.get(keyword)
        if budget is None:
            continue
        row = BUDGET[keyword]
        if value is None or ((value > budget) if row.sense == "max" else (value < budget)):
            yield keyword, value, budget, row


def _beyond(row: "Budget") -> str:
    return "exceeds" if row.sense == "max" else "is under"


def _shown(value: float, unit: str, digits: str) -> str:
    """A figure or budget as a person writes it: a count of tokens whole (16777216, not 1.67772e+07)."""
    return str(int(value)) if unit == "tokens" and float(value).is_integer() else format(value, digits)


def check_generation(figures: Mapping[str, Any], budgets: Budgets, backend: str) -> list[Finding]:
    """The ``edge_llm`` marker's budgets against one backend's generation figures (its record's
    ``llm`` block): TTFT and TPOT P50, decode and prefill tokens/s, peak memory, load time, the
    longest stable context. A budgeted figure that was not measured is a finding too (a budget is
    never passed by silence)."""
    measured = {  # budget keyword: the figure it judges, in the row's unit
        "ttft_ms": (figures.get("ttft_ms") or {}).get("p50"),
        "tpot_ms": (figures.get("tpot_ms") or {}).get("p50"),
        "min_decode_tps": figures.get("decode_tokens_per_s"),
        "min_prefill_tps": figures.get("prefill_tokens_per_s"),
        "peak_memory_mb": figures.get("peak_memory_mb"),
        "max_load_ms": figures.get("load_ms"),
        "max_context": (figures.get("context") or {}).get("longest_stable"),
    }
    problems = []
    for keyword, value, budget, row in _outside(measured, budgets):
        if value is None:
            problems.append(_found(keyword, None, budget, f"{backend}: {row.figure} was not measured; budget "
                                                          f"{keyword}={_shown(budget, row.unit, 'g')} {row.unit}"))
        else:
            problems.append(_found(keyword, value, budget, f"{backend}: {row.figure} {_shown(value, row.unit, '.4g')} "
                                                           f"{row.unit} {_beyond(row)} the budget "
                                                           f"{keyword}={_shown(budget, row.unit, 'g')} {row.unit}"))
    return problems


def check_speech(figures: Mapping[str, float | None], budgets: Budgets, backend: str) -> list[Finding]:
    """``max_wer`` and ``max_cer`` against a speech export's worst word and character error rates
    over its audio files (the record's ``speech`` block), each the transcript's against the
    reference's. A budgeted rate that was not measured is a finding."""
    measured = {"max_wer": figures.get("wer"), "max_cer": figures.get("cer")}
    problems = []
    for keyword, value, budget, row in _outside(measured, budgets):
        if value is None:
            problems.append(_found(keyword, None, budget, f"{backend}: {row.figure} was not measured; budget "
                                                          f"{keyword}={budget:g}"))
        else:
            problems.append(_found(keyword, value, budget, f"{backend}: {row.figure} {value:.4g} {_beyond(row)} the "
                                                           f"budget {keyword}={budget:g}"))
    return problems


def check_teacher_forced(figures: Mapping[str, Any] | None, budgets: Budgets, backend: str) -> list[Finding]:
    """``min_top1_agreement`` and ``max_kld`` against the teacher-forced figures over every prompt
    (the record's ``llm.teacher_forced``: llama-perplexity's "Same top p" and mean KL divergence).
    A budgeted figure the golden cannot give (a golden recorded without distributions) is a finding."""
    figures = figures or {}
    kld = figures.get("kld") or {}
    measured = {"min_top1_agreement": figures.get("top1_agreement"), "max_kld": kld.get("mean")}
    problems = []
    for keyword, value, budget, row in _outside(measured, budgets):
        if value is None:
            why = figures.get("not_measured") or "not measured"
            problems.append(_found(keyword, None, budget, f"{backend}: {row.figure} {why}; budget {keyword}={budget:g}"))
        else:
            where = ""
            if keyword == "max_kld":
                where = (f" (P99 {kld['p99']:.4g}, max {kld['max']:.4g} at prompt {figures['max_kld_at']['prompt']} "
                         f"new token {figures['max_kld_at']['position']})")
            elif figures.get("first_top1_difference") is not None:
                at = figures["first_top1_difference"]
                where = f" (first at prompt {at['prompt']} new token {at['position']})"
            problems.append(_found(keyword, value, budget,
                                   f"{backend}: {row.figure} {value:.4g} over {figures.get('positions')} positions"
                                   f"{where} {_beyond(row)} the budget {keyword}={budget:g}"))
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

Check = Callable[..., list[Finding]]


@dataclass(frozen=True)
class Budget:
    """One budget keyword: how its value is written, what it limits, and on each marker it belongs
    to (``edge``, ``edge_llm``, or both) the check that judges it."""

    keyword: str
    parse: Callable[..., float]  # (value, what) -> the value in ``unit``; an EdgeUsageError naming ``what``
    figure: str
    unit: str
    checks: Mapping[str, Check]  # {marker: the check that judges this budget on it}
    measured: bool  # judged on timed runs: a test with this budget is measured
    sense: str = "max"  # "max": the figure must not exceed the budget; "min": it must reach it
    qualifies: str | None = None  # the budget this keyword qualifies, which a marker must set beside it

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(self.checks)


# Rows other code reads by what they mean: the context sweep runs for the longest-stable-context
# budget, and each of its lengths must stay within the decoder's memory budget.
CONTEXT_BUDGET = "max_context"
MEMORY_BUDGET = "peak_memory_mb"

BUDGETS: tuple[Budget, ...] = (
    Budget("max_fallback", parse_fraction, "delegate fallback", "fraction", {EDGE: check_coverage}, measured=False),
    Budget("max_partitions", parse_int, "delegate partitions", "partitions", {EDGE: check_coverage}, measured=False),
    # Not a figure: the operators max_fallback leaves out (expected on the CPU), named in its message.
    Budget("allowed_cpu_ops", parse_operator_names, "operators allowed on the CPU", "operators",
           {EDGE: check_coverage}, measured=False, qualifies="max_fallback"),
    Budget("p50_ms", parse_ms, "P50 latency", "ms", {EDGE: check_latency}, measured=True),
    Budget("p90_ms", parse_ms, "P90 latency", "ms", {EDGE: check_latency}, measured=True),
    Budget("p99_ms", parse_ms, "P99 latency", "ms", {EDGE: check_latency}, measured=True),
    Budget("max_load_ms", parse_ms, "load time", "ms", {EDGE: check_load, EDGE_LLM: check_generation}, measured=True),
    Budget("peak_memory_mb", parse_mb, "peak memory", "MB", {EDGE: check_memory, EDGE_LLM: check_generation},
           measured=True),
    Budget("max_drift", parse_drift, "drift", "ratio", {EDGE: check_drift}, measured=True),
    Budget("max_memory_growth_kb_per_run", parse_kb, "memory growth", "KB per run", {EDGE: check_memory_growth},
           measured=True),
    Budget("max_artifact_mb", parse_mb, "artifact size", "MB", {EDGE: check_sizes}, measured=False),
    Budget("max_runtime_mb", parse_mb, "runtime package size", "MB", {EDGE: check_sizes}, measured=False),
    # A compile-time target's (an NPU compiler's, docs/npu.md): memory it planned and its estimate.
    Budget("max_sram_kb", parse_kb, "SRAM used", "KiB", {EDGE: check_compiled}, measured=False),
    Budget("max_flash_kb", parse_kb, "off-chip flash used", "KiB", {EDGE: check_compiled}, measured=False),
    Budget("max_dram_kb", parse_kb, "DRAM used", "KiB", {EDGE: check_compiled}, measured=False),
    Budget("max_npu_estimated_ms", parse_ms, "estimated NPU inference time", "ms", {EDGE: check_compiled},
           measured=False),
    # A microcontroller runtime's tensor arena, as the runtime reports it (backends/arena.py).
    Budget("max_arena_kb", parse_kb, "tensor arena", "KiB", {EDGE: check_arena}, measured=False),
    Budget("ttft_ms", parse_ms, "TTFT P50", "ms", {EDGE_LLM: check_generation}, measured=True),
    Budget("tpot_ms", parse_ms, "TPOT P50", "ms", {EDGE_LLM: check_generation}, measured=True),
    Budget("min_decode_tps", parse_number, "decode tokens/s", "tokens/s", {EDGE_LLM: check_generation},
           measured=True, sense="min"),
    Budget("min_prefill_tps", parse_number, "prefill tokens/s", "tokens/s", {EDGE_LLM: check_generation},
           measured=True, sense="min"),
    # Teacher-forced over the golden continuation (llama-perplexity --kl-divergence's figures): not timed.
    Budget("min_top1_agreement", parse_fraction, "teacher-forced top-1 agreement", "fraction",
           {EDGE_LLM: check_teacher_forced, EDGE_ASR: check_teacher_forced}, measured=False, sense="min"),
    Budget("max_kld", parse_number, "teacher-forced mean KL divergence", "nats",
           {EDGE_LLM: check_teacher_forced, EDGE_ASR: check_teacher_forced}, measured=False),
    # Measured by the context sweep, which stops at the first length over the peak_memory_mb budget.
    Budget("max_context", parse_tokens, "longest stable context", "tokens", {EDGE_LLM: check_generation},
           measured=True, sense="min"),
    Budget("max_wer", parse_fraction, "word error rate against the reference's transcript", "fraction",
           {EDGE_ASR: check_speech}, measured=False),
    Budget("max_cer", parse_fraction, "character error rate against the reference's transcript", "fraction",
           {EDGE_ASR: check_speech}, measured=False),
)
BUDGET = {budget.keyword: budget for budget in BUDGETS}


def budgets_for(marker: str) -> tuple[Budget, ...]:
    """The rows of ``marker``'s budget keywords (``EDGE`` or ``EDGE_LLM``)."""
    return tuple(budget for budget in BUDGETS if marker in budget.checks)


def budgets_of(check: Check, values: Callable[[str], "float | None"]) -> dict[str, float | None]:
    """The budgets ``check`` judges, each keyword's value read by ``values`` (a marker's)."""
    return {budget.keyword: values(budget.keyword) for budget in BUDGETS if check in budget.checks.values()}
