"""A run's figures as OpenMetrics text (SPEC section 13), for Prometheus and Grafana: one gauge family
per figure, its unit in its name as Prometheus' conventions say (seconds, bytes, ratio), one sample
per record that measured it, labelled with the model, backend, device, commit and test. Read from
the same records the JSON report holds; a figure a record did not measure has no sample (never a
made-up number). Plain logic, no pytest: the plugin (``--edge-openmetrics``) and ``pytest-edge report
openmetrics`` call it.

The text is OpenMetrics 1.0 (``# TYPE``, ``# UNIT``, ``# HELP``, ``# EOF``); Prometheus' text parser,
which node_exporter's textfile collector and ``promtool check metrics`` use, reads the same text (it
takes ``# UNIT`` and ``# EOF`` for comments)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..backends import split_device
from ..checks import BUDGETS, MIB, MS
from ..core.record import Record, is_finite_number
from ..files import atomic_write
from .record_figures import instructions

# What a scraper is told the text is (Prometheus picks its OpenMetrics parser by it).
CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PREFIX = "edge_"
LABELS = ("model", "backend", "device", "commit", "test")
MB = MIB  # the records' MB are MiB (VmHWM's kB / 1024)


@dataclass(frozen=True)
class Figure:
    """One figure over time: its family's name (unit last), what it is, its OpenMetrics unit (None:
    a count), how it is read from a record (where the record may hold it), the factor from the
    record's unit to the family's, and its place among the families (the text's order)."""

    name: str
    help: str
    unit: str | None
    readers: tuple[Callable[[Record], float | None], ...]  # the first giving a finite number wins
    scale: float = 1.0
    place: float = 0.0

    @property
    def family(self) -> str:
        return PREFIX + self.name

    def of(self, record: Record) -> float | None:
        """This figure of a report's record, in the family's unit; None where not measured."""
        for read in self.readers:
            value = read(record)
            # Every figure here is a time, a size, a count or a share: below 0 is no measurement (a
            # hand-edited report's; the product writes none), and a gauge of it would be graphed.
            if is_finite_number(value) and value >= 0:
                return float(value) * self.scale
        return None


# The figures no budget judges; a budgeted one is its row's (checks.BUDGETS, its kept figure's
# metric), so a new row's figure is a family here without another edit.
OWN_FIGURES: tuple[Figure, ...] = (
    Figure("first_inference_seconds", "first inference in a fresh process", "seconds",
           (lambda record: record.first_inference_ms,), MS, place=25),
    Figure("steady_memory_bytes", "resident memory after the timed runs", "bytes",
           (lambda record: record.steady_memory_mb,), MB, place=35),
    Figure("instructions_per_inference", "instructions executed per inference (counted mode)", None,
           (instructions,), place=55),
)
FIGURES: tuple[Figure, ...] = tuple(sorted(
    (*OWN_FIGURES, *(Figure(row.kept.metric, row.kept.help, row.kept.metric_unit, row.kept.readers, row.kept.scale,
                            row.kept.place) for row in BUDGETS if row.kept and row.kept.metric)),
    key=lambda figure: figure.place))


@dataclass(frozen=True)
class Sample:
    """One figure of one record: its family, its labels (in :data:`LABELS` order) and its value."""

    figure: Figure
    labels: tuple[tuple[str, str], ...]
    value: float


def device_of(record: Record, machine: str) -> str:
    """Where a record ran: its device's name (``litert@pi5``'s ``pi5``, a record's device block), the
    machine a merged report tagged it with, else ``machine`` (this machine)."""
    named = split_device(record.backend)[1] or (record.device.name if record.device is not None else None)
    if named:
        return named
    tagged = record.extra.get("machine")  # a merged report's tag: a key the record does not type
    return tagged if isinstance(tagged, str) and tagged else machine


def labels_of(record: Record, commit: str, machine: str) -> tuple[tuple[str, str], ...]:
    return (("model", record.model.name), ("backend", split_device(record.backend)[0]),
            ("device", device_of(record, machine)), ("commit", commit), ("test", record.test))


def samples(records: Sequence[Record], commit: str = "", machine: str = "local") -> list[Sample]:
    """Every measured figure of ``records``, by family then record. Two records with the same labels
    (the same test on the same backend and device, as a merged report of one machine twice holds)
    give the first one's sample: a family has one sample per label set."""
    found = []
    for figure in FIGURES:
        seen = set()
        for record in records:
            value = figure.of(record)
            labels = labels_of(record, commit, machine)
            if value is None or labels in seen:
                continue
            seen.add(labels)
            found.append(Sample(figure, labels, value))
    return found


def _escape(value: str) -> str:
    # A lone surrogate (a file name's undecodable byte, a report's "\udcff") has no UTF-8: written
    # as its escape's text, so the file is still UTF-8 and the label still says which it was.
    value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _number(value: float) -> str:
    """15 significant digits: a double's ms-to-seconds product (0.0031000000000000003) reads as written."""
    return f"{value:.15g}"


def render_openmetrics(records: Sequence[Record], commit: str = "", machine: str = "local") -> str:
    """The OpenMetrics text of ``records`` (a report's), ending with ``# EOF``. A family
    no record measured is left out; a run that measured nothing is ``# EOF`` alone."""
    lines: list[str] = []
    by_family: dict[str, list[Sample]] = {}
    for sample in samples(records, commit, machine):
        by_family.setdefault(sample.figure.family, []).append(sample)
    for figure in FIGURES:
        found = by_family.get(figure.family)
        if not found:
            continue
        lines.append(f"# TYPE {figure.family} gauge")
        if figure.unit:
            lines.append(f"# UNIT {figure.family} {figure.unit}")
        lines.append(f"# HELP {figure.family} pytest-edge: {figure.help}")
        for sample in found:
            text = ",".join(f'{key}="{_escape(value)}"' for key, value in sample.labels)
            lines.append(f"{figure.family}{{{text}}} {_number(sample.value)}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def write_openmetrics(path: Path, records: Sequence[Record], commit: str = "", machine: str = "local") -> None:
    """:func:`render_openmetrics` written atomically (a scraper or the textfile collector reads the old
    file or the new one, never a part)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, render_openmetrics(records, commit, machine).encode("utf-8"))

