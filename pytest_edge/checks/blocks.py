"""The budgets judged on a block of a record's figures alike, each figure read by its row (``read``)
and worded by it (``figure``, ``unit``, ``sense``, ``detail``): a decoder's generation figures, a
speech export's error rates, the teacher-forced agreement and divergence. A row added to the table
for one of these checks is judged without another edit. Pure functions: figures and budgets in,
findings out; each is given the rows of the table it judges (:mod:`pytest_edge.checks` calls them
so).

The blocks are typed by the layers above (core.generation_record, core.speech_record): this layer
names them by what its rows and checks read of them (:class:`GenerationBlock`,
:class:`ForcedFigures`, :class:`ErrorRates`: protocols), and the rows read them (``read``)."""

from __future__ import annotations

from typing import Iterator, Protocol

from .rows import Budget, Budgets, Finding, Rows, found


class Sweep(Protocol):
    """The context sweep (core.generation_figures.ContextSweep)."""

    @property
    def longest_stable(self) -> int | None: ...


class GenerationBlock(Protocol):
    """A decoder's block (core.generation_record.GenerationRecord): its measured figures and its
    context sweep, each None where not measured. The measured figures are the rows' to read: the
    table names them (checks.MeasuredGeneration), as a keyword is spelled in two modules at most."""

    @property
    def measured(self) -> object | None: ...
    @property
    def context(self) -> Sweep | None: ...


class Divergence(Protocol):
    """A KL divergence over the positions, in nats (core.generation_figures.KlDivergence)."""

    @property
    def mean(self) -> float: ...
    @property
    def p99(self) -> float: ...
    @property
    def maximum(self) -> float: ...


class Where(Protocol):
    """Where a teacher-forced figure lies: a decoder's prompt (its index) or a speech export's audio
    file (its name), and the new token."""

    @property
    def prompt(self) -> int | str: ...
    @property
    def position(self) -> int: ...


class ForcedFigures(Protocol):
    """Teacher-forced figures over every position (a decoder's
    core.generation_figures.TeacherForcedOverall, a speech block's core.speech_record ones):
    ``not_measured`` says why a figure is missing."""

    @property
    def positions(self) -> int: ...
    @property
    def top1_agreement(self) -> float | None: ...
    @property
    def first_top1_difference(self) -> Where | None: ...
    @property
    def kld(self) -> Divergence | None: ...
    @property
    def max_kld_at(self) -> Where | None: ...
    @property
    def not_measured(self) -> str | None: ...


class ErrorRates(Protocol):
    """A speech export's worst error rates (core.speech_record.SpeechRecord) or one audio file's
    (SpeechFile)."""

    @property
    def wer(self) -> float | None: ...
    @property
    def cer(self) -> float | None: ...


def _outside(rows: Rows, figures: object, budgets: Budgets) -> Iterator[tuple[str, float | None, float, Budget]]:
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


def check_generation(figures: GenerationBlock, budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """The ``edge_llm`` marker's budgets against one backend's generation figures (its record's
    ``llm`` block: measured, and swept): TTFT and TPOT P50, decode and prefill tokens/s, peak memory, load time, the
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


def check_speech(figures: ErrorRates, budgets: Budgets, backend: str, *,
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


def check_teacher_forced(figures: ForcedFigures | None, budgets: Budgets, backend: str, *,
                         rows: Rows) -> list[Finding]:
    """``min_top1_agreement`` and ``max_kld`` against the teacher-forced figures over every prompt
    (the record's ``llm.teacher_forced``: llama-perplexity's "Same top p" and mean KL divergence).
    A budgeted figure the golden cannot give (a golden recorded without distributions) is a finding."""
    problems = []
    said, positions = (figures.not_measured, figures.positions) if figures is not None else (None, None)
    for keyword, value, budget, row in _outside(rows, figures, budgets):
        if value is None:
            why = said or "not measured"
            problems.append(found(rows, keyword, None, budget,
                                  f"{backend}: {row.figure} {why}; budget {keyword}={budget:g}"))
        else:
            where = row.detail(figures) if row.detail else ""
            problems.append(found(rows, keyword, value, budget,
                                  f"{backend}: {row.figure} {value:.4g} over {positions} positions"
                                  f"{where} {_beyond(row)} the budget {keyword}={budget:g}"))
    return problems
