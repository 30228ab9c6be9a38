"""Budget checks as pure functions: measurements and budgets in, findings out (the regressions
against a baseline are in :mod:`.judging.regressions`). The budgets of both markers, ``edge``
and ``edge_llm``, are declared once, in :data:`BUDGETS`: a budget is one row (keyword, unit parser,
figure, unit, the check that judges it on each marker it belongs to, sense, how its figure is read
from what its check is given, and where a report's record keeps that figure: :class:`Kept`). Each
marker parses its keywords from it, the pipelines ask each check for the budgets of the table's rows,
a finding names its row, and the reports that follow figures over time (OpenMetrics, the run
history's table and trend charts) list the rows' kept figures: adding a budget is adding a row."""

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


def _read(check: "Check", figures: Any) -> dict[str, float | None]:
    """The figure of each row ``check`` judges, read by the row from what the check is given (a
    block of the record), in the table's order: {keyword: figure}."""
    return {row.keyword: row.read(figures) for row in BUDGETS if check in row.checks.values() and row.read}


def _at(*path: str) -> Callable[[Any], Any]:
    """A reader of the figure at ``path`` in a block (None where the block does not hold it)."""
    def read(block: Any) -> Any:
        for key in path:
            block = block.get(key) if isinstance(block, Mapping) else None
        return block
    return read


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
    problems = []
    for keyword, value, budget, row in _outside(_read(check_generation, figures), budgets):
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
    problems = []
    for keyword, value, budget, row in _outside(_read(check_speech, figures), budgets):
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
    problems = []
    for keyword, value, budget, row in _outside(_read(check_teacher_forced, figures), budgets):
        if value is None:
            why = figures.get("not_measured") or "not measured"
            problems.append(_found(keyword, None, budget, f"{backend}: {row.figure} {why}; budget {keyword}={budget:g}"))
        else:
            where = row.detail(figures) if row.detail else ""
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
class Kept:
    """Where a report's record keeps the figure a budget judges (``paths``: the first holding a
    number wins; the run history reads the first) and how the reports that follow figures over time
    show it: its OpenMetrics family (``metric``, unit last, with its help, its unit and the factor
    from the record's unit to the family's), its row in ``history show`` and the HTML history table
    (``shown``, in ``fmt``) and its trend chart (``trend``, in ``trend_unit``); None: not shown
    there. ``place``: where it stands among each report's figures (theirs too: report.openmetrics,
    report.history, report.html_history), so the reports keep their order."""

    paths: tuple[tuple[str, ...], ...]
    place: float
    metric: str | None = None
    help: str = ""
    metric_unit: str | None = None
    scale: float = 1.0
    shown: str | None = None
    fmt: str = ".3f"
    trend: str | None = None
    trend_unit: str = ""


@dataclass(frozen=True)
class Budget:
    """One budget keyword: how its value is written, what it limits, on each marker it belongs to
    (``edge``, ``edge_llm``, or both) the check that judges it, how that check reads its figure
    from the block it is given (``read``, for the checks that judge a block's figures alike) and
    words where the figure lies (``detail``), and where a report's record keeps the figure
    (``kept``)."""

    keyword: str
    parse: Callable[..., float]  # (value, what) -> the value in ``unit``; an EdgeUsageError naming ``what``
    figure: str
    unit: str
    checks: Mapping[str, Check]  # {marker: the check that judges this budget on it}
    measured: bool  # judged on timed runs: a test with this budget is measured
    sense: str = "max"  # "max": the figure must not exceed the budget; "min": it must reach it
    qualifies: str | None = None  # the budget this keyword qualifies, which a marker must set beside it
    read: Callable[[Any], "float | None"] | None = None  # the figure, in ``unit``, of the block its check judges
    detail: Callable[[Any], str] | None = None  # " (where it lies)" in the block, for the finding's message
    kept: Kept | None = None
    hint: str = ""  # after "keyword=" where a first test suggests it (cli.first_tests): an example value

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(self.checks)


def _worst_kld(figures: Mapping[str, Any]) -> str:
    kld, at = figures["kld"], figures["max_kld_at"]
    return f" (P99 {kld['p99']:.4g}, max {kld['max']:.4g} at prompt {at['prompt']} new token {at['position']})"


def _first_difference(figures: Mapping[str, Any]) -> str:
    at = figures.get("first_top1_difference")
    return "" if at is None else f" (first at prompt {at['prompt']} new token {at['position']})"


# Rows other code reads by what they mean: the context sweep runs for the longest-stable-context
# budget, and each of its lengths must stay within the decoder's memory budget; the generation
# reports read the decoder's timed figures where the TTFT and TPOT budgets' rows keep them; a drift
# budget times each process longer.
CONTEXT_BUDGET = "max_context"
MEMORY_BUDGET = "peak_memory_mb"
TTFT_BUDGET, TPOT_BUDGET = "ttft_ms", "tpot_ms"
DRIFT_BUDGET = "max_drift"

MS, MIB = 1e-3, 2.0 ** 20  # a record's ms in seconds; its MB (MiB: VmHWM's kB / 1024) in bytes

BUDGETS: tuple[Budget, ...] = (
    Budget("max_fallback", parse_fraction, "delegate fallback", "fraction", {EDGE: check_coverage}, measured=False,
           hint="0 (every operator on the accelerator)",
           kept=Kept((("coverage", "fallback"),), 50, "fallback_ratio",
                     "share of the model's operators outside the delegate", "ratio", shown="fallback",
                     trend="fallback share", trend_unit="fraction of operators")),
    Budget("max_partitions", parse_int, "delegate partitions", "partitions", {EDGE: check_coverage}, measured=False,
           kept=Kept((("coverage", "partitions"),), 51, "delegate_partitions", "partitions the delegate took")),
    # Not a figure: the operators max_fallback leaves out (expected on the CPU), named in its message.
    Budget("allowed_cpu_ops", parse_operator_names, "operators allowed on the CPU", "operators",
           {EDGE: check_coverage}, measured=False, qualifies="max_fallback",
           hint='["CALL_ONCE"] (named operators may stay on the CPU)'),
    Budget("p50_ms", parse_ms, "P50 latency", "ms", {EDGE: check_latency}, measured=True,
           kept=Kept((("latency_ms", "p50"),), 10, "latency_p50_seconds", "median latency of the timed runs",
                     "seconds", MS, shown="P50 ms")),
    Budget("p90_ms", parse_ms, "P90 latency", "ms", {EDGE: check_latency}, measured=True,
           kept=Kept((("latency_ms", "p90"),), 11, "latency_p90_seconds", "90th percentile latency of the timed runs",
                     "seconds", MS)),
    Budget("p99_ms", parse_ms, "P99 latency", "ms", {EDGE: check_latency}, measured=True,
           kept=Kept((("latency_ms", "p99"),), 12, "latency_p99_seconds", "99th percentile latency of the timed runs",
                     "seconds", MS, shown="P99 ms")),
    Budget("max_drift", parse_drift, "drift", "ratio", {EDGE: check_drift}, measured=True),
    Budget("max_memory_growth_kb_per_run", parse_kb, "memory growth", "KB per run", {EDGE: check_memory_growth},
           measured=True),
    Budget("max_artifact_mb", parse_mb, "artifact size", "MB", {EDGE: check_sizes}, measured=False,
           kept=Kept((("artifact_bytes",),), 40, "artifact_size_bytes", "size of the model's files", "bytes",
                     shown="artifact B", fmt=".0f", trend="artifact size", trend_unit="bytes")),
    Budget("max_runtime_mb", parse_mb, "runtime package size", "MB", {EDGE: check_sizes}, measured=False),
    # A compile-time target's (an NPU compiler's, docs/npu.md): memory it planned and its estimate.
    Budget("max_sram_kb", parse_kb, "SRAM used", "KiB", {EDGE: check_compiled}, measured=False,
           kept=Kept((("npu", "memories", "sram"),), 60, "npu_sram_bytes", "SRAM the NPU compiler planned", "bytes",
                     shown="SRAM B", fmt=".0f", trend="NPU SRAM", trend_unit="bytes")),
    Budget("max_flash_kb", parse_kb, "off-chip flash used", "KiB", {EDGE: check_compiled}, measured=False,
           kept=Kept((("npu", "memories", "off_chip_flash"),), 61, "npu_off_chip_flash_bytes",
                     "off-chip flash the NPU compiler planned", "bytes", shown="flash B", fmt=".0f")),
    Budget("max_dram_kb", parse_kb, "DRAM used", "KiB", {EDGE: check_compiled}, measured=False,
           kept=Kept((("npu", "memories", "dram"),), 62, "npu_dram_bytes", "DRAM the NPU compiler planned", "bytes")),
    Budget("max_npu_estimated_ms", parse_ms, "estimated NPU inference time", "ms", {EDGE: check_compiled},
           measured=False),
    # A microcontroller runtime's tensor arena, as the runtime reports it (backends/arena.py).
    Budget("max_arena_kb", parse_kb, "tensor arena", "KiB", {EDGE: check_arena}, measured=False),
    # A decoder's timed figures, read from its record's llm block (what check_generation is given).
    Budget("ttft_ms", parse_ms, "TTFT P50", "ms", {EDGE_LLM: check_generation}, measured=True,
           read=_at("ttft_ms", "p50"),
           kept=Kept((("llm", "ttft_ms", "p50"),), 70, "llm_ttft_p50_seconds", "decoder: median time to first token",
                     "seconds", MS, shown="TTFT ms", trend="TTFT P50", trend_unit="ms")),
    Budget("tpot_ms", parse_ms, "TPOT P50", "ms", {EDGE_LLM: check_generation}, measured=True,
           read=_at("tpot_ms", "p50"),
           kept=Kept((("llm", "tpot_ms", "p50"),), 71, "llm_tpot_p50_seconds", "decoder: median time per output token",
                     "seconds", MS, shown="TPOT ms", trend="TPOT P50", trend_unit="ms")),
    Budget("min_decode_tps", parse_number, "decode tokens/s", "tokens/s", {EDGE_LLM: check_generation},
           measured=True, sense="min", read=_at("decode_tokens_per_s"),
           kept=Kept((("llm", "decode_tokens_per_s"),), 81, "llm_decode_tokens_per_second", "decoder: decode throughput",
                     shown="decode tok/s", fmt=".0f")),
    Budget("min_prefill_tps", parse_number, "prefill tokens/s", "tokens/s", {EDGE_LLM: check_generation},
           measured=True, sense="min", read=_at("prefill_tokens_per_s"),
           kept=Kept((("llm", "prefill_tokens_per_s"),), 80, "llm_prefill_tokens_per_second",
                     "decoder: prefill throughput")),
    # Both markers': a tensor model's from its pipeline, a decoder's from its llm block.
    Budget("peak_memory_mb", parse_mb, "peak memory", "MB", {EDGE: check_memory, EDGE_LLM: check_generation},
           measured=True, read=_at("peak_memory_mb"),
           kept=Kept((("peak_memory_mb",), ("llm", "peak_memory_mb")), 30, "peak_memory_bytes",
                     "peak resident memory of the measuring process", "bytes", MIB, shown="peak MB", fmt=".1f",
                     trend="peak memory", trend_unit="MB")),
    Budget("max_load_ms", parse_ms, "load time", "ms", {EDGE: check_load, EDGE_LLM: check_generation}, measured=True,
           read=_at("load_ms"),
           kept=Kept((("load_ms",), ("llm", "load_ms")), 20, "load_seconds", "time to load the model", "seconds", MS,
                     shown="load ms", fmt=".1f")),
    # Teacher-forced over the golden continuation (llama-perplexity --kl-divergence's figures): not timed.
    Budget("min_top1_agreement", parse_fraction, "teacher-forced top-1 agreement", "fraction",
           {EDGE_LLM: check_teacher_forced, EDGE_ASR: check_teacher_forced}, measured=False, sense="min",
           read=_at("top1_agreement"), detail=_first_difference),
    Budget("max_kld", parse_number, "teacher-forced mean KL divergence", "nats",
           {EDGE_LLM: check_teacher_forced, EDGE_ASR: check_teacher_forced}, measured=False,
           read=_at("kld", "mean"), detail=_worst_kld),
    # Measured by the context sweep, which stops at the first length over the peak_memory_mb budget.
    Budget("max_context", parse_tokens, "longest stable context", "tokens", {EDGE_LLM: check_generation},
           measured=True, sense="min", read=_at("context", "longest_stable")),
    # A speech export's worst error rates over its audio files (the record's speech block).
    Budget("max_wer", parse_fraction, "word error rate against the reference's transcript", "fraction",
           {EDGE_ASR: check_speech}, measured=False, read=_at("wer")),
    Budget("max_cer", parse_fraction, "character error rate against the reference's transcript", "fraction",
           {EDGE_ASR: check_speech}, measured=False, read=_at("cer")),
)
BUDGET = {budget.keyword: budget for budget in BUDGETS}


def budgets_for(marker: str) -> tuple[Budget, ...]:
    """The rows of ``marker``'s budget keywords (``EDGE`` or ``EDGE_LLM``)."""
    return tuple(budget for budget in BUDGETS if marker in budget.checks)


def budgets_of(check: Check, values: Callable[[str], "float | None"]) -> dict[str, float | None]:
    """The budgets ``check`` judges, each keyword's value read by ``values`` (a marker's)."""
    return {budget.keyword: values(budget.keyword) for budget in BUDGETS if check in budget.checks.values()}
