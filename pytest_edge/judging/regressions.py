"""Regressions of a record against a baseline record (stored, or a twin measured A/B in the same
job): latency by significance over per-process figures, peak memory, delegate coverage. Pure
functions: the merge gate (:mod:`.gate`), ``pytest-edge report compare`` and the report pages use
the same rules."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..core.record import GateVerdict, dig
from ..measurement.stats import Change, compare_groups, compare_pairs
from ..measurement.timing import MIN_RUNS


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


@dataclass(frozen=True)
class GateFinding:
    """One figure the merge gate failed or left inconclusive, as the gate decided it: old and new
    value, the threshold, the statistic, the verdict and the rule. It is kept on the record
    (``baseline_check["findings"]``) and every report renders it; none judges a figure again."""

    figure: str  # the gate's name: "P50 latency", "peak memory", "delegate coverage", ...
    verdict: GateVerdict  # failed or inconclusive; accepted where an acceptance passes it
    old: float | None
    new: float | None
    threshold: float | None
    statistic: str | None
    rule: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"figure": self.figure, "verdict": str(self.verdict), "old": self.old, "new": self.new,
                "threshold": self.threshold, "statistic": self.statistic, "rule": self.rule,
                "message": self.message}


@dataclass(frozen=True)
class TimedFigure:
    """A per-process timing figure the gate judges: ``key`` in each process's figures (and in the
    record's pooled ``latency_ms``), its name in messages, the fewest runs per process from which it
    is gated, and whether it is a tail (gated in A/B mode only, with its own threshold)."""

    key: str
    name: str  # "P50 latency", "TTFT P50"
    per_process: str  # "P50", "TTFT P50": what one process contributes, in "geometric mean of 3 process P50s"
    min_runs: int = 1
    tail: bool = False


# A P99 of a few hundred runs rests on a handful of slow runs (an interrupt, a page fault): gated
# from 1000 runs, ten runs beyond it in every process.
LATENCY_FIGURES = (TimedFigure("p50", "P50 latency", "P50", MIN_RUNS["p50"]),
                   TimedFigure("p99", "P99 latency", "P99", 1000, tail=True))
# A decoder's figures (docs/llm.md): per fresh process, the median time to first token and the
# median time per output token.
GENERATION_FIGURES = (TimedFigure("ttft_p50_ms", "TTFT P50", "TTFT P50"),
                      TimedFigure("tpot_p50_ms", "TPOT P50", "TPOT P50"))
# The gate's other figures, by the names its findings, an acceptance's "figures" and the pages use.
PEAK_MEMORY, ARTIFACT_SIZE, DELEGATE_COVERAGE, INSTRUCTIONS = ("peak memory", "artifact size", "delegate coverage",
                                                               "instructions")
# A compile-time target's memories as its compiler planned them (the record's npu block): exact.
NPU_MEMORY = "NPU memory"
_NPU_MEMORIES = (("sram", "SRAM"), ("off_chip_flash", "off-chip flash"), ("dram", "DRAM"))
GATE_FIGURES = (*(f.name for f in LATENCY_FIGURES), PEAK_MEMORY, ARTIFACT_SIZE, DELEGATE_COVERAGE, INSTRUCTIONS,
                NPU_MEMORY, *(f.name for f in GENERATION_FIGURES))
# A P50 (or TTFT/TPOT) that grew by at most this much is not gated, whatever its percentage: between
# fresh processes on a shared runner an unchanged 8 us model read +65 % then +18 % (2 us) against its
# A/B twin in CI. Microsecond models are gated by counted mode (--edge-count=instructions) instead.
LATENCY_FLOOR_MS = 0.005
# Peak memory moves by allocator pages and arenas between processes; below this much a change is
# not reported whatever its percentage (a 1.2 MB model going to 1.4 MB is +17 % of noise).
MEMORY_FLOOR_MB = 1.0


def _per_process(record: Mapping[str, Any], key: str) -> tuple[list[float], int | None]:
    """One figure per process (a report without per-process figures counts as one process)."""
    processes = record.get("processes") or []
    values = [p.get(key) for p in processes if isinstance(p, Mapping)]
    values = [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
    runs = [p.get("runs") for p in processes if isinstance(p, Mapping)]
    if values:
        fewest = min((r for r in runs if isinstance(r, int)), default=None)
        return values, fewest
    pooled = dig(record, "latency_ms", key)
    if isinstance(pooled, (int, float)) and pooled > 0:
        runs_total = record.get("measured_runs")
        return [float(pooled)], runs_total if isinstance(runs_total, int) else None
    return [], None


def latency_regressions(record: Mapping[str, Any], baseline: Mapping[str, Any], max_regression: float,
                        paired: bool = False, significant: bool = True,
                        p99_regression: float | None = None,
                        figures: tuple[TimedFigure, ...] = LATENCY_FIGURES) -> tuple[list[Regression], list[str]]:
    """The timed ``figures`` (P50, and P99 where the run counts support it) of ``record`` against
    ``baseline``: above ``max_regression`` and, with ``significant``, significant (without: suspects,
    to re-measure). ``paired``: the two were measured as A/B pairs in one job; only then is a tail
    gated, and only with its own threshold ``p99_regression`` (None: reported, not gated). Returns
    the regressions and notes on what could not be gated."""
    backend = record["backend"]
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
        pooled = dig(record, "latency_ms", key)
        if len(new) > 1 and _number(pooled):
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


def resource_regressions(record: Mapping[str, Any], baseline: Mapping[str, Any],
                         max_regression: float, what: str = "the baseline") -> list[Regression]:
    """Peak memory above ``max_regression`` (and MEMORY_FLOOR_MB), an artifact grown by more than
    ``max_regression``, or a higher fallback fraction."""
    backend = record["backend"]
    found = []
    new, old = dig(record, "peak_memory_mb"), dig(baseline, "peak_memory_mb")
    if _number(new) and _number(old) and old > 0:
        change = new / old - 1
        if change > max_regression and new - old > MEMORY_FLOOR_MB:
            found.append(Regression(PEAK_MEMORY, f"{backend}: peak memory {new:.3f} MB is {change:+.1%} against "
                                    f"{what} {old:.3f} MB (allowed +{max_regression:.0%})",
                                    old=float(old), new=float(new), threshold=max_regression))
    # The artifact's size is exact (no noise floor): growth beyond the same threshold fails.
    new_size, old_size = dig(record, "artifact_bytes"), dig(baseline, "artifact_bytes")
    if _number(new_size) and _number(old_size) and old_size > 0 and new_size / old_size - 1 > max_regression:
        found.append(Regression(ARTIFACT_SIZE, f"{backend}: artifact {dig(record, 'model', 'artifact') or '?'} is "
                                f"{new_size} bytes ({new_size / 2**20:.3f} MB), {new_size / old_size - 1:+.1%} against "
                                f"{what} {old_size} bytes (allowed +{max_regression:.0%})",
                                old=float(old_size), new=float(new_size), threshold=max_regression))
    found += npu_memory_regressions(record, baseline, max_regression, what)
    new_cov, old_cov = dig(record, "coverage", "fallback"), dig(baseline, "coverage", "fallback")
    if _number(new_cov) and _number(old_cov) and new_cov > old_cov + 1e-12:
        found.append(Regression(DELEGATE_COVERAGE, f"{backend}: delegate coverage dropped: fallback "
                                f"{new_cov:.1%} against {what} {old_cov:.1%}",
                                old=float(old_cov), new=float(new_cov), threshold=0.0))
    found += placement_regressions(record, baseline, what)
    return found


def npu_memory_regressions(record: Mapping[str, Any], baseline: Mapping[str, Any], max_regression: float,
                           what: str = "the baseline") -> list[Regression]:
    """A compile-time target's SRAM, off-chip flash or DRAM (the compiler's plan, exact: no noise
    floor) grown beyond ``max_regression`` against the baseline's, as the artifact's size is; a
    memory the baseline did not use (0) and the candidate does fails too. One finding per memory."""
    found = []
    for key, name in _NPU_MEMORIES:
        new, old = dig(record, "npu", "memories", key), dig(baseline, "npu", "memories", key)
        if not (_number(new) and _number(old)) or new <= old or (old > 0 and new / old - 1 <= max_regression):
            continue
        change = f"{new / old - 1:+.1%}" if old > 0 else "none before"
        found.append(Regression(NPU_MEMORY, f"{record['backend']}: {name} used {new / 1024:.2f} KiB ({new} bytes), "
                                f"{change} against {what} {old / 1024:.2f} KiB ({old} bytes) (allowed "
                                f"+{max_regression:.0%})", old=float(old), new=float(new), threshold=max_regression))
    return found


def left_the_delegate(record: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, str]:
    """The operators ``baseline``'s delegate took that ``record``'s did not, by the runtime's own
    name for each, with the runtime's reason ("" where it gives none). Only operators both name
    count: one the change removed or renamed did not leave."""
    was_delegated = dig(baseline, "coverage", "delegated_op_ids")
    fallback = dig(record, "coverage", "fallback_reasons")
    if not isinstance(was_delegated, list) or not isinstance(fallback, Mapping):
        return {}
    return {op: str(fallback[op] or "") for op in was_delegated if op in fallback}


def placement_regressions(record: Mapping[str, Any], baseline: Mapping[str, Any],
                          what: str = "the baseline") -> list[Regression]:
    """Placement per operator (SPEC section 6): every operator that left the delegate against
    ``baseline`` is a regression, named with the runtime's reason, even where the fallback fraction
    did not grow (one operator moved off the delegate and another onto it)."""
    left = left_the_delegate(record, baseline)
    if not left:
        return []
    backend = record["backend"]
    named = "; ".join(f"{op}" + (f" ({reason})" if reason else "") for op, reason in left.items())
    fraction = dig(record, "coverage", "fallback")
    return [Regression(DELEGATE_COVERAGE, f"{backend}: {len(left)} operator(s) left the delegate against {what}: "
                                          f"{named}", old=float(dig(baseline, "coverage", "fallback") or 0.0),
                       new=float(fraction) if _number(fraction) else None, threshold=0.0)]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_baseline(record: Mapping[str, Any], baseline: Mapping[str, Any] | None,
                   max_regression: float, figures: tuple[TimedFigure, ...] = LATENCY_FIGURES) -> list[str]:
    """Every regression of ``record`` against a stored ``baseline`` record, as messages (no
    re-measurement: what ``pytest-edge report compare`` says about two finished reports); a
    decoder's timed ``figures`` are GENERATION_FIGURES."""
    if baseline is None:
        return []
    if record.get("timing_not_judged"):  # an emulated device: its coverage is judged, its timing and memory not
        return [r.message for r in resource_regressions(record, baseline, max_regression)
                if r.figure == DELEGATE_COVERAGE]
    timed, _ = latency_regressions(record, baseline, max_regression, figures=figures)
    return [r.message for r in [*timed, *resource_regressions(record, baseline, max_regression)]]
