"""What a row of the budget table is (:class:`Budget`, with :class:`Kept`: where a report's record
keeps its figure) and what a check finds (:class:`Finding`). The table itself, and the checks as the
pipelines call them, are :mod:`pytest_edge.checks`'; each check is given its rows (:data:`Rows`)
when it is called, so its findings take their row's figure and unit, and no check's module imports
the table (the rows name the checks: the other way would be an import cycle)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .. import codec

Budgets = Mapping[str, "float | None"]


# The record's ``budget_findings`` are codec.to_json of these, in this order; a stored report's are read
# leniently (a key missing or of another type: the field's default).
@codec.layout(lenient=True)
@dataclass(frozen=True)
class Finding:
    """A budget a check found exceeded, or could not judge (``value`` None: the figure was not
    measured here): what the record keeps, beside the message the failure shows."""

    check: str = ""  # the budget's keyword, a row of BUDGETS: "p50_ms"
    figure: str = ""  # what it limits, in words: "P50 latency"
    value: float | None = None  # the measured figure in the budget's unit
    budget: float | None = None  # None only where a stored report's finding does not say it
    unit: str = ""
    message: str = ""


Check = Callable[..., list[Finding]]


@dataclass(frozen=True)
class Kept:
    """Where a report's record keeps the figure a budget judges (``paths``: the first holding a
    number wins; the run history reads the first) and how the reports that follow figures over time
    show it: its OpenMetrics family (``metric``, unit last, with its help, its unit and the factor
    from the record's unit to the family's), its row in ``history show`` and the HTML history table
    (``shown``, in ``fmt``) and its trend chart (``trend``, in ``trend_unit``); None: not shown
    there. ``place``: where it stands among each report's figures (theirs too: report.openmetrics,
    report.history_series, report.html_history), so the reports keep their order. ``readers``: the
    figure at each path, read from the typed record (the reports over time read records, not their
    JSON); tests/test_budget_rows.py holds each reader to its path."""

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
    # Each takes a core.record.Record: a layer above the table's, so named here in words only.
    readers: tuple[Callable[[Any], "float | None"], ...] = ()


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


Rows = Mapping[str, Budget]  # the rows a check judges, by keyword, in the table's order


def found(rows: Rows, keyword: str, value: float | None, budget: float, message: str) -> Finding:
    """The finding of the row ``keyword`` (one of ``rows``): its figure and unit, and the check's words."""
    row = rows[keyword]
    return Finding(keyword, row.figure, value, budget, row.unit, message)


def one_row(rows: Rows) -> str:
    """The keyword of the one row a check of a single budget judges (``check_memory``'s): such a
    check spells no keyword, its row names it."""
    if len(rows) != 1:
        raise ValueError(f"a check of one budget was given the rows {', '.join(rows) or '(none)'}")
    return next(iter(rows))
