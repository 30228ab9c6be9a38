"""The budgets judged on a block of a record's figures alike, each figure read by its row (``read``)
and worded by it (``figure``, ``unit``, ``sense``, ``detail``): a decoder's generation figures, a
speech export's error rates, the teacher-forced agreement and divergence. A row added to the table
for one of these checks is judged without another edit. Pure functions: figures and budgets in,
findings out; each is given the rows of the table it judges (:mod:`pytest_edge.checks` calls them
so)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from .rows import Budget, Budgets, Finding, Rows, found


def _outside(rows: Rows, figures: Any, budgets: Budgets) -> Iterator[tuple[str, float | None, float, Budget]]:
    """(keyword, value, budget, row) of each budgeted figure of ``figures`` (read by each of ``rows``
    that has a reader, in the table's order) that was not measured (value None) or lies on the wrong
    side of its budget (``row.sense``); the caller words it."""
    for keyword, row in rows.items():
        budget = budgets.get(keyword)
        if budget is None or row.read is None:
            continue
        value = row.read(figures)
        if value is None or ((value > budget) if row.sense == "max" else (value < budget)):
            yield keyword, value, budget, row


def _beyond(row: Budget) -> str:
    return "exceeds" if row.sense == "max" else "is under"


def _shown(value: float, unit: str, digits: str) -> str:
    """A figure or budget as a person writes it: a count of tokens whole (16777216, not 1.67772e+07)."""
    return str(int(value)) if unit == "tokens" and float(value).is_integer() else format(value, digits)


def check_generation(figures: Mapping[str, Any], budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """The ``edge_llm`` marker's budgets against one backend's generation figures (its record's
    ``llm`` block): TTFT and TPOT P50, decode and prefill tokens/s, peak memory, load time, the
    longest stable context. A budgeted figure that was not measured is a finding too (a budget is
    never passed by silence)."""
    problems = []
    for keyword, value, budget, row in _outside(rows, figures, budgets):
        if value is None:
            problems.append(found(rows, keyword, None, budget,
                                  f"{backend}: {row.figure} was not measured; budget "
                                  f"{keyword}={_shown(budget, row.unit, 'g')} {row.unit}"))
        else:
            problems.append(found(rows, keyword, value, budget,
                                  f"{backend}: {row.figure} {_shown(value, row.unit, '.4g')} {row.unit} "
                                  f"{_beyond(row)} the budget {keyword}={_shown(budget, row.unit, 'g')} {row.unit}"))
    return problems


def check_speech(figures: Mapping[str, float | None], budgets: Budgets, backend: str, *,
                 rows: Rows) -> list[Finding]:
    """``max_wer`` and ``max_cer`` against a speech export's worst word and character error rates
    over its audio files (the record's ``speech`` block), each the transcript's against the
    reference's. A budgeted rate that was not measured is a finding."""
    problems = []
    for keyword, value, budget, row in _outside(rows, figures, budgets):
        if value is None:
            problems.append(found(rows, keyword, None, budget,
                                  f"{backend}: {row.figure} was not measured; budget {keyword}={budget:g}"))
        else:
            problems.append(found(rows, keyword, value, budget,
                                  f"{backend}: {row.figure} {value:.4g} {_beyond(row)} the budget {keyword}={budget:g}"))
    return problems


def check_teacher_forced(figures: Mapping[str, Any] | None, budgets: Budgets, backend: str, *,
                         rows: Rows) -> list[Finding]:
    """``min_top1_agreement`` and ``max_kld`` against the teacher-forced figures over every prompt
    (the record's ``llm.teacher_forced``: llama-perplexity's "Same top p" and mean KL divergence).
    A budgeted figure the golden cannot give (a golden recorded without distributions) is a finding."""
    figures = figures or {}
    problems = []
    for keyword, value, budget, row in _outside(rows, figures, budgets):
        if value is None:
            why = figures.get("not_measured") or "not measured"
            problems.append(found(rows, keyword, None, budget,
                                  f"{backend}: {row.figure} {why}; budget {keyword}={budget:g}"))
        else:
            where = row.detail(figures) if row.detail else ""
            problems.append(found(rows, keyword, value, budget,
                                  f"{backend}: {row.figure} {value:.4g} over {figures.get('positions')} positions"
                                  f"{where} {_beyond(row)} the budget {keyword}={budget:g}"))
    return problems
