"""Whether the machine, not the model, explains a slower measurement: how much slower the CPU probe
ran in the measured processes than in the baseline's (:func:`machine_slowdown`), and whether they
ran on a slower vCPU while their fastest runs did not move (:class:`SlowerMachine`, pair by pair in
A/B mode, as groups against a stored report). Pure arithmetic on GateFigures; the gate
(judging/gate.py) decides what a regression it explains becomes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .figures import GateFigures, ProcessFigures

# The fastest runs count as unmoved within this fraction of the threshold (as a median within it is
# not yet an A/B suspect: gate.AB_SUSPECT_FRACTION).
FASTEST_UNMOVED_FRACTION = 0.5

# A slower machine (SlowerMachine): the measured processes count as having run on a slower machine
# when the CPU probe ran this much slower in them than in the baseline's (the twin's); their fastest
# runs count as unmoved within FASTEST_UNMOVED_FRACTION of the threshold.
PROBE_SLOWER = 0.03
# Pairs on unequal machines (the probe slower beside the candidate) take a third measurement when the
# slowdown is at most the probe's difference plus this many thresholds.
UNEQUAL_PAIRS_REACH = 2.0


@dataclass(frozen=True)
class SlowerMachine:
    """How the measured processes ran against the baseline's (the twin's, pair by pair, in A/B
    mode; the stored report's, as groups): the geometric mean ratio of the CPU probe (the machine's
    speed) and of the fastest run (the model's own cost, which interference does not lower)."""

    probe: float
    fastest: float
    processes: int
    paired: bool

    def explains(self, max_regression: float) -> bool:
        """A vCPU that slowed down between processes (a busy hyperthread sibling or neighbour on the
        host) slows the probe and raises the median, but leaves the fastest runs where they were; a
        slower model moves its fastest runs too. An unchanged ExecuTorch model read 0.043 ms in one
        process and 0.071 ms in the next, its probe 1.3x slower, its fastest run 0.040 ms in both."""
        return self.probe - 1 >= PROBE_SLOWER and self.fastest - 1 <= max_regression * FASTEST_UNMOVED_FRACTION

    def describe(self) -> str:
        whose, over = (("the candidate's processes ran on a slower machine than the twin's", f"over {self.processes} pairs")
                       if self.paired else
                       ("this run's processes ran on a slower machine than the baseline's",
                        f"over {self.processes} processes"))
        return (f"{whose} (a fixed CPU probe timed between the runs: {self.probe - 1:+.1%} {over}) while their "
                f"fastest runs moved {self.fastest - 1:+.1%}: the machine's speed changed between the processes, "
                "not the model")


def _figures(process: ProcessFigures) -> tuple[float, float] | None:
    """A process's (probe, fastest run), where it carries both."""
    if process.probe_us is None or process.fastest_ms is None:
        return None
    return process.probe_us, process.fastest_ms


def paired_machine(record: GateFigures, twin: GateFigures) -> SlowerMachine | None:
    """The probe and fastest-run ratios of ``record``'s processes against ``twin``'s, pair by pair
    (None where the processes do not carry both figures, e.g. a report of an older pytest-edge; a
    decoder's fastest run is its fastest whole generation)."""
    ratios = []
    for mine, theirs in zip(record.processes, twin.processes):
        new, old = _figures(mine), _figures(theirs)
        if new and old:
            ratios.append([math.log(a / b) for a, b in zip(new, old)])
    if not ratios:
        return None
    return SlowerMachine(math.exp(sum(r[0] for r in ratios) / len(ratios)),
                         math.exp(sum(r[1] for r in ratios) / len(ratios)), len(ratios), paired=True)


def stored_machine(baseline: GateFigures, *measurements: GateFigures) -> SlowerMachine | None:
    """The same against a stored report's processes: ratios of the geometric means (None where
    either side lacks the figures, e.g. a report from an older pytest-edge)."""
    old = [f for f in map(_figures, baseline.processes) if f]
    new = [f for m in measurements for f in map(_figures, m.processes) if f]
    if not old or not new:
        return None

    def mean_log(rows: list[tuple[float, float]], i: int) -> float:
        return sum(math.log(r[i]) for r in rows) / len(rows)

    return SlowerMachine(math.exp(mean_log(new, 0) - mean_log(old, 0)), math.exp(mean_log(new, 1) - mean_log(old, 1)),
                         len(new), paired=False)


def machine_slowdown(baseline: GateFigures, *measurements: GateFigures) -> float | None:
    """How much slower the machine probe ran in ``measurements`` than in ``baseline``: the ratio of
    the geometric means of the per-process probe medians (None where either side has none, e.g. a
    report from an older pytest-edge)."""
    old = _probes(baseline)
    new = [p for m in measurements for p in _probes(m)]
    if not old or not new:
        return None
    return math.exp(sum(map(math.log, new)) / len(new) - sum(map(math.log, old)) / len(old))


def _probes(measurement: GateFigures) -> list[float]:
    return [p.probe_us for p in measurement.processes if p.probe_us is not None]


def busy_cores(*measurements: GateFigures) -> float | None:
    """Cores other processes used, where any timed window counted as under load."""
    loads = [m.other_cores_busy for m in measurements if m.under_load and m.other_cores_busy is not None]
    return max(loads) if loads else None
