"""A run history's figures over its runs (SPEC section 13): the records of each (model, backend,
device) in run order, the figures ``history show`` prints (those no budget judges, and each budget
row's kept figure: :class:`pytest_edge.checks.Kept`'s ``shown``) and its text. Plain logic, no
pytest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..backends import split_device
from ..checks import BUDGETS
from ..core.record import Record, Verdict, is_finite_number
from .history_runs import Run
from .openmetrics import device_of
from .record_figures import cosine, instructions, max_abs_err, token_agreement

SeriesKey = tuple[str, str, str]  # (model, backend, device)
Held = list[tuple[Run, Record]]  # a series: each run that holds it, with its record


def series_key(record: Record, run: Run) -> SeriesKey:
    return record.model.name, split_device(record.backend)[0], device_of(record, run.machine or "local")


def series(runs: Sequence[Run]) -> dict[SeriesKey, Held]:
    """Per (model, backend, device), the runs that hold it with its record, oldest first. A run with
    several records of one key (two tests of a model on one backend) gives the first by test id
    that is not skipped."""
    found: dict[SeriesKey, Held] = {}
    for run in runs:
        taken: set[SeriesKey] = set()
        for record in sorted(run.records, key=lambda r: r.test):
            if record.verdict is Verdict.SKIPPED:
                continue
            key = series_key(record, run)
            if key not in taken:
                taken.add(key)
                found.setdefault(key, []).append((run, record))
    return found


@dataclass(frozen=True)
class Shown:
    """A figure ``history show`` prints: its row's name, how it is read from a record, its format,
    and its place among the rows."""

    name: str
    read: Callable[[Record], float | None]
    fmt: str
    place: float = 0.0


# The figures no budget judges; a budgeted one is its row's (checks.BUDGETS, its kept figure's
# ``shown``), so a new row's figure is shown here without another edit.
OWN_SHOWN = (Shown("P50 spread", lambda record: record.process_spread, ".2f", 10.5),
             Shown("instr/inf", instructions, ".0f", 55),
             Shown("max |diff|", max_abs_err, ".1e", 90), Shown("cosine", cosine, ".5f", 91),
             Shown("tokens agree", token_agreement, ".3f", 92))
SHOWN = tuple(sorted((*OWN_SHOWN, *(Shown(row.kept.shown, row.kept.readers[0], row.kept.fmt, row.kept.place)
                                    for row in BUDGETS if row.kept and row.kept.shown)),
                     key=lambda shown: shown.place))


def show_lines(runs: Sequence[Run], last: int = 10, model: str | None = None) -> list[str]:
    """``pytest-edge history show``: per (model, backend, device), each figure over its last ``last``
    runs (a column per run: its commit; ``-`` where the run did not measure it)."""
    lines: list[str] = []
    for key, held in sorted(series(runs).items()):
        if model is not None and key[0] != model:
            continue
        held = held[-last:]
        lines.append(f"{key[0]} / {key[1]} / {key[2]}: {len(held)} run(s), {held[0][0].created} .. {held[-1][0].created}")
        width = 12
        lines.append("  " + "figure".ljust(14) + "".join((run.commit[:10] or "-").rjust(width) for run, _ in held))
        for shown in SHOWN:
            values = [shown.read(record) for _, record in held]
            if not any(is_finite_number(v) for v in values):
                continue
            cells = [format(v, shown.fmt) if is_finite_number(v) else "-" for v in values]
            lines.append("  " + shown.name.ljust(14) + "".join(c.rjust(width) for c in cells))
    return lines or ["no measured record in the history" + (f" for model {model}" if model else "")]
