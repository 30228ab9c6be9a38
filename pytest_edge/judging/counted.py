"""Counted mode's gate: instructions per inference, counted under Valgrind's callgrind in fresh
processes (docs/measurement.md, "Counted mode"), judged against a baseline's. Pure logic, no pytest;
the measurement itself is :class:`~pytest_edge.measurement.counts.CountedMeasurement`.

A count does not depend on load, frequency or the host's other guests: two processes of the same
model agree to about 0.01 % (each process's figure is its median run, see
:func:`pytest_edge.worker.callgrind.count_runs`). The runs within a process can differ by their
position (a runtime's allocator cycle), so a growth of the median run counts only where the least
run grew beyond the threshold too: added work moves every run. So the gate needs no significance test and, where
each side's processes agree within :data:`AGREE`, no second measurement: a growth above the threshold (default 1 %) fails at once. Where they do not agree (a
runtime whose work depends on timing, e.g. threads that spin), the suspect is counted again and
fails only when above the threshold twice.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.baseline_check import BaselineCheck
from ..measurement.counts import CountedMeasurement
from .figures import GateFigures
from .gate import GateResult, rule_of
from .regressions import INSTRUCTIONS, Regression, compared_figures, resource_regressions, uncompared_note

# Per-process counts that lie within this fraction of each other count as exact: one measurement decides.
AGREE = 0.005
# Counted figures of a record or twin: (the new counted measurement, the twin's or None) from fresh processes.
Recount = Callable[[], "tuple[CountedMeasurement, CountedMeasurement | None]"]


def _agrees(counted: CountedMeasurement) -> bool:
    return float(counted.spread or 0.0) <= AGREE


def _ratio(mine: CountedMeasurement, theirs: CountedMeasurement) -> float:
    return float(mine.instructions) / float(theirs.instructions)


def least_run(counted: CountedMeasurement) -> float | None:
    """The median over processes of each process's least counted run; None where a process did not
    record its runs (a report of an older pytest-edge) or recorded something that is not counts."""
    least = []
    for process in counted.processes:
        runs = process.run_instructions
        if not isinstance(runs, list) or not runs or not all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < float("inf") for r in runs):
            return None
        figure = process.instructions
        # The least run cannot exceed the process's own median run: a report saying so was edited,
        # and judging by it could hide a regression the median shows.
        if not isinstance(figure, (int, float)) or min(runs) > float(figure) + 1:
            return None
        least.append(min(runs))
    return float(np.median(least)) if least else None


def run_spread_of(*counted: CountedMeasurement) -> float | None:
    """The largest run spread (largest over smallest run, minus one) of any process of these sides."""
    spreads = [p.run_spread for c in counted for p in c.processes]
    spreads = [float(s) for s in spreads if isinstance(s, (int, float)) and not isinstance(s, bool) and 0 <= s < 10]
    return max(spreads) if spreads else None


def run_count_gate(record: GateFigures, baseline: GateFigures, *, paired: bool, threshold: float,
                   recount: Recount, source: str, max_regression: float, strict: bool = False) -> GateResult:
    """``record`` and ``baseline`` carry counted figures (``GateFigures.counted``: the twin's, or a stored report's);
    delegate coverage is gated as in wall-clock mode, memory is not measured under Valgrind."""
    what = "the baseline twin" if paired else "the baseline"
    backend = record.backend
    result = GateResult()
    result.summary = summary = BaselineCheck(mode="ab" if paired else "stored", baseline=source, remeasured=False,
                                             counted=True, compared=compared_figures(record, baseline, ()))
    for regression in resource_regressions(record, baseline, max_regression, what):
        result.fail(regression, rule_of(regression.figure, paired))
    result.notes += uncompared_note(record, baseline, what)
    # Both sides through one typed view: this record's, and the twin's or a stored report's as written.
    mine, theirs = record.counted, baseline.counted
    if theirs is None or not theirs.instructions:
        result.notes.append(f"{backend}: instructions not gated: {what} ({source}) has no counted figure "
                            "(measure it with --edge-count=instructions too)")
    elif mine is not None and mine.instructions:
        ratio = _ratio(mine, theirs)
        summary.instructions_ratio = ratio
        processes = len(mine.processes)
        message = (f"{backend}: {mine.instructions:,.0f} instructions per inference is {ratio - 1:+.2%} against "
                   f"{what} {theirs.instructions:,.0f} (allowed +{threshold:.2%}; counted by "
                   f"{mine.tool or 'callgrind'} in {processes} fresh process{'es' if processes != 1 else ''}")
        counted = Regression(INSTRUCTIONS, message, old=float(theirs.instructions),
                             new=float(mine.instructions), threshold=threshold)
        rule = rule_of(INSTRUCTIONS, paired, counted=True)
        floor_mine, floor_theirs = least_run(mine), least_run(theirs)
        floor = floor_mine / floor_theirs if floor_mine and floor_theirs else None
        if floor is not None:
            summary.least_run_ratio = floor
        if ratio - 1 > threshold and floor is not None and floor - 1 <= threshold:
            # The runs of one process differ by their position (an allocator's or arena's cycle: ONNX
            # Runtime's runs of a small MLP read 56.9k, 52.5k, 47.8k instructions), so with few runs
            # the median run is now one phase, now another. Added work moves every run, the least too.
            result.notes.append(f"{backend}: instructions per inference (the median run) looked {ratio - 1:+.2%} "
                                f"against {what}, but the least run moved {floor - 1:+.2%}: the runs differ by "
                                f"position, not the model's work (more runs, edge_count_runs, steady the median)")
        elif ratio - 1 > threshold and min(processes, len(theirs.processes)) == 1 and not strict \
                and (spread := run_spread_of(mine, theirs)) is not None and ratio - 1 <= spread:
            # One process a side shows no agreement, and its runs differ by more than the growth:
            # this setting cannot resolve the threshold; said, not failed (strict: failed).
            result.leave_inconclusive(counted, rule, message + f"); one process a side cannot show that counts agree, "
                                      f"and its runs spread {spread:.1%}, more than the growth: edge_count_processes "
                                      f"= 1 cannot resolve +{threshold:.2%} here (two processes agree to about 0.01 %; "
                                      "--edge-strict-timing makes this a failure)")
        elif ratio - 1 > threshold:
            if _agrees(mine) and _agrees(theirs):
                agreeing = f" agreeing within {AGREE:.1%}" if processes > 1 else ""
                result.fail(counted, rule, message + agreeing + ")")
            else:  # not deterministic here: counted again, fails only when above the threshold twice
                summary.remeasured = True
                again, twin_again = recount()
                second = _ratio(again, twin_again if paired and twin_again else theirs)
                if second - 1 > threshold:
                    result.fail(counted, rule, message + f"; counted again in fresh processes: {second - 1:+.2%})")
                else:
                    result.notes.append(f"{backend}: instructions looked {ratio - 1:+.2%} against {what}, but "
                                        f"counted again in fresh processes {second - 1:+.2%}")
    summary.verdict = result.verdict()
    return result
