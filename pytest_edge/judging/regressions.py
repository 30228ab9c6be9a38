"""Regressions of a record against a baseline record (stored, or a twin measured A/B in the same
job): latency by significance over per-process figures, peak memory, delegate coverage. Pure
functions: the merge gate (:mod:`.gate`), ``pytest-edge report compare`` and the report pages use
the same rules."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.baseline_check import GateFinding
from ..core.record import GateVerdict
from ..measurement.stats import Change, compare_groups, compare_pairs
# The timed figures are defined beside the parser that reads them (.figures) and judged here.
from .figures import GENERATION_FIGURES, LATENCY_FIGURES, GateFigures, TimedFigure, is_number  # noqa: F401


@dataclass(frozen=True)
class Regression:
    """A figure that got worse than the baseline allows. ``timed`` regressions (latency) depend on
    the machine's state, so the session re-measures them before they fail."""

    figure: str
    message: str
    timed: bool = False
    change: Change | None = None
    old: float | None = None
    new: float | None = None
    threshold: float | None = None

    def finding(self, verdict: GateVerdict, rule: str, message: str | None = None) -> "GateFinding":
        """What the merge gate decided about this figure, as the reports render it."""
        return GateFinding(self.figure, verdict, self.old, self.new, self.threshold,
                           _evidence(self.change) if self.change else None, rule, message or self.message)


# The gate's other figures, by the names its findings, an acceptance's "figures" and the pages use.
PEAK_MEMORY, ARTIFACT_SIZE, DELEGATE_COVERAGE, INSTRUCTIONS = ("peak memory", "artifact size", "delegate coverage",
                                                               "instructions")
# A compile-time target's memories as its compiler planned them (the record's npu block): exact.
NPU_MEMORY = "NPU memory"
_NPU_MEMORIES = (("sram", "SRAM"), ("off_chip_flash", "off-chip flash"), ("dram", "DRAM"))
# The compiler's estimated time per inference (exact for one compiler and configuration), and the
# delegate partitions (each boundary a copy and a layout change).
NPU_ESTIMATE, PARTITIONS = "estimated NPU time", "delegate partitions"
# A microcontroller runtime's tensor arena (the RAM the device must have), as it reports it: exact.
ARENA = "tensor arena"
GATE_FIGURES = (*(f.name for f in LATENCY_FIGURES), PEAK_MEMORY, ARTIFACT_SIZE, DELEGATE_COVERAGE, PARTITIONS,
                INSTRUCTIONS, NPU_MEMORY, NPU_ESTIMATE, ARENA, *(f.name for f in GENERATION_FIGURES))
# A P50 (or TTFT/TPOT) that grew by at most this much is not gated, whatever its percentage: between
# fresh processes on a shared runner an unchanged 8 us model read +65 % then +18 % (2 us) against its
# A/B twin in CI. Microsecond models are gated by counted mode (--edge-count=instructions) instead.
LATENCY_FLOOR_MS = 0.005
# Peak memory moves by allocator pages and arenas between processes; below this much a change is
# not reported whatever its percentage (a 1.2 MB model going to 1.4 MB is +17 % of noise).
MEMORY_FLOOR_MB = 1.0


def _per_process(figures: GateFigures, key: str) -> tuple[list[float], int | None]:
    """One figure per process (a report without per-process figures counts as one process)."""
    values = [p.timed[key] for p in figures.processes if key in p.timed]
    if values:
        fewest = min((p.runs for p in figures.processes if p.runs is not None), default=None)
        return values, fewest
    pooled = figures.pooled_ms.get(key)
    if pooled is not None and pooled > 0:
        return [float(pooled)], figures.measured_runs
    return [], None


def latency_regressions(record: GateFigures, baseline: GateFigures, max_regression: float,
                        paired: bool = False, significant: bool = True,
                        p99_regression: float | None = None,
                        figures: tuple[TimedFigure, ...] = LATENCY_FIGURES) -> tuple[list[Regression], list[str]]:
    """The timed ``figures`` (P50, and P99 where the run counts support it) of ``record`` against
    ``baseline``: above ``max_regression`` and, with ``significant``, significant (without: suspects,
    to re-measure). ``paired``: the two were measured as A/B pairs in one job; only then is a tail
    gated, and only with its own threshold ``p99_regression`` (None: reported, not gated). Returns
    the regressions and notes on what could not be gated."""
    backend = record.backend
    found, notes = [], []
    for figure in figures:
        key = figure.key
        new, new_runs = _per_process(record, key)
        old, old_runs = _per_process(baseline, key)
        if not new or not old:
            continue
        fewest = min(r for r in (new_runs, old_runs, figure.min_runs * 10**6) if r is not None)
        if fewest < figure.min_runs:
            notes.append(f"{backend}: {figure.per_process} not gated: {fewest} runs per process, "
                         f"{figure.min_runs} needed")
            continue
        gated = not figure.tail or (paired and p99_regression is not None)
        threshold = max_regression if not figure.tail or p99_regression is None else p99_regression
        change = compare_pairs(new, old) if paired else compare_groups(old, new)
        if not (change.exceeds(threshold) if significant else change.ratio - 1 > threshold):
            continue
        new_mean, old_mean = _geomean(new), _geomean(old)
        if new_mean - old_mean <= LATENCY_FLOOR_MS:
            notes.append(f"{backend}: {figure.name} {change.ratio - 1:+.1%} is {new_mean - old_mean:.4f} ms, "
                         f"not more than the {LATENCY_FLOOR_MS} ms fresh processes resolve: not gated (counted mode "
                         "gates microsecond models)")
            continue
        if not gated:
            # A tail moves between fresh processes (interrupts, page faults, the host's other guests)
            # by more than a median: an unchanged model read +18 % on P99 in an A/B gate on a shared
            # machine. Against stored numbers it is never gated; A/B mode gates it on request.
            how = ("not gated unless asked (--edge-gate-p99=25%)" if paired else
                   "not gated against stored numbers (A/B mode gates it with --edge-gate-p99)")
            notes.append(f"{backend}: {figure.name} {change.describe()} against the "
                         f"{'baseline twin' if paired else 'stored baseline'}; {how}")
            continue
        what = "the baseline twin" if paired else "the baseline"
        per = f"geometric mean of {len(new)} process {figure.per_process}s" if len(new) > 1 else "one process"
        pooled = record.pooled_ms.get(key)
        if len(new) > 1 and is_number(pooled):
            # The terminal table shows the pooled percentile of the first measurement's runs.
            per += f"; pooled over the runs, as in the table: {pooled:.3f} ms"
        found.append(Regression(
            figure.name,
            f"{backend}: {figure.name} {new_mean:.3f} ms ({per}) is {change.ratio - 1:+.1%} against {what} "
            f"{old_mean:.3f} ms (allowed +{threshold:.0%}; {_evidence(change)})", timed=True, change=change,
            old=old_mean, new=new_mean, threshold=threshold))
    return found, notes


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _evidence(change: Change) -> str:
    text = change.describe()
    return text[text.index("(") + 1:-1] if "(" in text else text


def resource_regressions(record: GateFigures, baseline: GateFigures,
                         max_regression: float, what: str = "the baseline") -> list[Regression]:
    """Peak memory above ``max_regression`` (and MEMORY_FLOOR_MB), an artifact grown by more than
    ``max_regression``, or a higher fallback fraction."""
    backend = record.backend
    found = []
    new, old = record.peak_memory_mb, baseline.peak_memory_mb
    if new is not None and old is not None and old > 0:
        change = new / old - 1
        if change > max_regression and new - old > MEMORY_FLOOR_MB:
            found.append(Regression(PEAK_MEMORY, f"{backend}: peak memory {new:.3f} MB is {change:+.1%} against "
                                    f"{what} {old:.3f} MB (allowed +{max_regression:.0%})",
                                    old=float(old), new=float(new), threshold=max_regression))
    # The artifact's size is exact (no noise floor): growth beyond the same threshold fails.
    new_size, old_size = record.artifact_bytes, baseline.artifact_bytes
    if new_size is not None and old_size is not None and old_size > 0 and new_size / old_size - 1 > max_regression:
        found.append(Regression(ARTIFACT_SIZE, f"{backend}: artifact {record.artifact or '?'} is "
                                f"{new_size} bytes ({new_size / 2**20:.3f} MB), {new_size / old_size - 1:+.1%} against "
                                f"{what} {old_size} bytes (allowed +{max_regression:.0%})",
                                old=float(old_size), new=float(new_size), threshold=max_regression))
    found += npu_memory_regressions(record, baseline, max_regression, what)
    new_est, old_est = record.npu_estimated_ms, baseline.npu_estimated_ms
    if new_est is not None and old_est is not None and new_est / old_est - 1 > max_regression:
        found.append(Regression(NPU_ESTIMATE, f"{backend}: the compiler's estimated NPU time {new_est:.4g} ms is "
                                f"{new_est / old_est - 1:+.1%} against {what} {old_est:.4g} ms (allowed "
                                f"+{max_regression:.0%}; an estimate, not a measurement)",
                                old=old_est, new=new_est, threshold=max_regression))
    new_arena, old_arena = record.arena_bytes, baseline.arena_bytes
    if new_arena is not None and old_arena is not None and new_arena > old_arena and (
            old_arena == 0 or new_arena / old_arena - 1 > max_regression):
        change = f"{new_arena / old_arena - 1:+.1%}" if old_arena else "none before"
        found.append(Regression(ARENA, f"{backend}: tensor arena {new_arena / 1024:.2f} KiB ({new_arena:.0f} bytes), "
                                f"{change} against {what} {old_arena / 1024:.2f} KiB ({old_arena:.0f} bytes) (allowed "
                                f"+{max_regression:.0%})", old=float(old_arena), new=float(new_arena),
                                threshold=max_regression))
    if record.partitions is not None and baseline.partitions is not None and record.partitions > baseline.partitions:
        found.append(Regression(PARTITIONS, f"{backend}: {record.partitions} delegate partitions against {what}'s "
                                f"{baseline.partitions} (each boundary a copy and a layout change)",
                                old=float(baseline.partitions), new=float(record.partitions), threshold=0.0))
    new_cov, old_cov = record.fallback, baseline.fallback
    if new_cov is not None and old_cov is not None and new_cov > old_cov + 1e-12:
        found.append(Regression(DELEGATE_COVERAGE, f"{backend}: delegate coverage dropped: fallback "
                                f"{new_cov:.1%} against {what} {old_cov:.1%}",
                                old=float(old_cov), new=float(new_cov), threshold=0.0))
    found += placement_regressions(record, baseline, what)
    return found


def npu_memory_regressions(record: GateFigures, baseline: GateFigures, max_regression: float,
                           what: str = "the baseline") -> list[Regression]:
    """A compile-time target's SRAM, off-chip flash or DRAM (the compiler's plan, exact: no noise
    floor) grown beyond ``max_regression`` against the baseline's, as the artifact's size is; a
    memory the baseline did not use (0) and the candidate does fails too. One finding per memory."""
    found = []
    for key, name in _NPU_MEMORIES:
        new, old = record.npu_memories.get(key), baseline.npu_memories.get(key)
        if new is None or old is None or new <= old or (old > 0 and new / old - 1 <= max_regression):
            continue
        change = f"{new / old - 1:+.1%}" if old > 0 else "none before"
        found.append(Regression(NPU_MEMORY, f"{record.backend}: {name} used {new / 1024:.2f} KiB ({new} bytes), "
                                f"{change} against {what} {old / 1024:.2f} KiB ({old} bytes) (allowed "
                                f"+{max_regression:.0%})", old=float(old), new=float(new), threshold=max_regression))
    return found


def left_the_delegate(record: GateFigures, baseline: GateFigures) -> dict[str, str]:
    """The operators ``baseline``'s delegate took that ``record``'s did not, by the runtime's own
    name for each, with the runtime's reason ("" where it gives none). Only operators both name
    count: one the change removed or renamed did not leave."""
    was_delegated, fallback = baseline.delegated_op_ids, record.fallback_reasons
    if was_delegated is None or fallback is None:
        return {}
    return {op: str(fallback[op] or "") for op in was_delegated if op in fallback}


def newly_on_the_cpu(record: GateFigures, baseline: GateFigures) -> dict[str, tuple[int, int]]:
    """The operator types the candidate runs on the CPU more often than the baseline did (moved
    there, or new in the graph), by the runtime's name: {type: (count before, count now)}. Counted by
    type, not by id, so a graph whose operators were renumbered by an insertion is no false alarm."""
    new, old = record.fallback_op_names, baseline.fallback_op_names
    if new is None or old is None:
        return {}
    return {op: (old.get(op, 0), count) for op, count in sorted(new.items()) if count > old.get(op, 0)}


def placement_regressions(record: GateFigures, baseline: GateFigures,
                          what: str = "the baseline") -> list[Regression]:
    """Placement per operator (SPEC section 6): every operator on the CPU in the candidate that was
    not on the CPU in ``baseline`` fails, named with the runtime's or compiler's reason, even where
    the fallback fraction did not grow: one that left the delegate (by the runtime's id for it), and
    every operator type the CPU runs more of (moved there, or new in the change)."""
    left = left_the_delegate(record, baseline)
    grown = newly_on_the_cpu(record, baseline)
    if not left and not grown:
        return []
    reasons = record.fallback_reasons or {}
    was_on_cpu = set((baseline.fallback_reasons or {}).keys())
    parts = []
    if left:
        parts.append(f"{len(left)} operator(s) left the delegate against {what}: " + "; ".join(
            f"{op}" + (f" ({reason})" if reason else "") for op, reason in left.items()))
    if grown:
        named = ", ".join(f"{op} x{now}" + (f" (was x{before})" if before else " (new)")
                          for op, (before, now) in grown.items())
        # The candidate's CPU operators the baseline had nowhere on the CPU, with their reasons.
        new_ids = "; ".join(f"{op}" + (f" ({reasons[op]})" if reasons[op] else "") for op in reasons
                            if op not in was_on_cpu and op not in left)
        parts.append(f"operator(s) newly on the CPU against {what}: {named}" + (f": {new_ids}" if new_ids else ""))
    fraction = record.fallback
    return [Regression(DELEGATE_COVERAGE, f"{record.backend}: {'; '.join(parts)}", old=float(baseline.fallback or 0.0),
                       new=float(fraction) if fraction is not None else None, threshold=0.0)]


def compared_figures(record: GateFigures, baseline: GateFigures,
                     figures: tuple[TimedFigure, ...] = LATENCY_FIGURES) -> list[str]:
    """The gate's figures both sides hold, so that the gate compared them: a record counts as
    compared on the gate's line only where this is not empty (a baseline with none of the
    candidate's figures compared nothing, it did not pass)."""
    both = [f.name for f in figures if _per_process(record, f.key)[0] and _per_process(baseline, f.key)[0]]
    pairs = ((PEAK_MEMORY, record.peak_memory_mb, baseline.peak_memory_mb),
             (ARTIFACT_SIZE, record.artifact_bytes, baseline.artifact_bytes),
             (DELEGATE_COVERAGE, record.fallback, baseline.fallback),
             (PARTITIONS, record.partitions, baseline.partitions),
             (NPU_MEMORY, record.npu_memories or None, baseline.npu_memories or None),
             (NPU_ESTIMATE, record.npu_estimated_ms, baseline.npu_estimated_ms),
             (ARENA, record.arena_bytes, baseline.arena_bytes),
             (INSTRUCTIONS, record.counted, baseline.counted))
    return both + [name for name, new, old in pairs if new is not None and old is not None]


def uncompared_note(record: GateFigures, baseline: GateFigures, what: str = "the baseline") -> list[str]:
    """A note naming the resource figures the candidate holds and ``baseline`` does not (a record
    written without them, or with them null), so that a figure the gate could not compare is said,
    never passed in silence; none where the baseline holds every one."""
    pairs = ((PEAK_MEMORY, record.peak_memory_mb, baseline.peak_memory_mb),
             (ARTIFACT_SIZE, record.artifact_bytes, baseline.artifact_bytes),
             (DELEGATE_COVERAGE, record.fallback, baseline.fallback),
             (PARTITIONS, record.partitions, baseline.partitions),
             (NPU_ESTIMATE, record.npu_estimated_ms, baseline.npu_estimated_ms),
             (ARENA, record.arena_bytes, baseline.arena_bytes),
             *((name, record.npu_memories.get(key), baseline.npu_memories.get(key)) for key, name in _NPU_MEMORIES))
    missing = [name for name, new, old in pairs if new is not None and old is None]
    if not missing:
        return []
    return [f"{record.backend}: not compared: {', '.join(missing)}: {what} ({baseline.source}) holds no such figure "
            "(recorded without it, or null); record the baseline again to gate it"]


def check_baseline(record: GateFigures, baseline: GateFigures | None,
                   max_regression: float, figures: tuple[TimedFigure, ...] = LATENCY_FIGURES) -> list[str]:
    """Every regression of ``record`` against a stored ``baseline`` record, as messages (no
    re-measurement: what ``pytest-edge report compare`` says about two finished reports); a
    decoder's timed ``figures`` are GENERATION_FIGURES."""
    if baseline is None:
        return []
    if record.timing_not_judged:  # an emulated device: its coverage is judged, its timing and memory not
        return [r.message for r in resource_regressions(record, baseline, max_regression)
                if r.figure == DELEGATE_COVERAGE]
    timed, _ = latency_regressions(record, baseline, max_regression, figures=figures)
    return [r.message for r in [*timed, *resource_regressions(record, baseline, max_regression)]]
