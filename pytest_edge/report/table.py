"""The terminal table printed after a run (one row per model and backend, the worst verdict over
its tests), its footer lines, the device x backend matrix of a merged report, and the gate's line;
read from typed :class:`~pytest_edge.core.record.Record` s."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TypeVar

from .. import codec
from ..backends import split_device
from ..core.record import GateVerdict, Record, TimingNotJudged, Verdict

if TYPE_CHECKING:  # the gate's block: read from records that have one
    from ..core.baseline_check import BaselineCheck

K = TypeVar("K")

DASH = "—"


def figure(value: Any, fmt: str) -> str:
    """A figure in ``fmt``, or a dash for one not measured."""
    return DASH if value is None else format(value, fmt)


# A backend skipped because the model has no artifact for it says so in this form (plan.py); such
# rows carry no information beyond the suffix, so the table folds them into one line per model.
_NO_ARTIFACT = re.compile(r"^no (\.[\w.-]+) artifact for ")
VERDICT_RANK = {Verdict.FAILED: 0, Verdict.ERROR: 0, Verdict.PASSED: 1, Verdict.DOES_NOT_CONVERT: 2, Verdict.SKIPPED: 2}
# Verdicts of records that ran nothing: a skip, and a borrowed artifact the backend's frontend
# cannot convert (errors.DoesNotConvert), each with its reason.
NOT_RUN = frozenset({Verdict.SKIPPED, Verdict.DOES_NOT_CONVERT})
TABLE_WIDTH = 100


def timing_policy(record: Record) -> TimingNotJudged | None:
    """Why the record's timing is not judged (its ``timing_not_judged``), as a policy; None: judged."""
    return record.timing_not_judged


def gate_checks(records: Iterable[Record]) -> list[BaselineCheck]:
    """The merge gate's summary on each record it ran on (their ``baseline_check``)."""
    return [record.baseline_check for record in records if record.baseline_check is not None]


def machine_label(record: Record) -> str | None:
    """The machine a merged report's record ran on (its label among the report's ``machines``, kept
    under ``machine``); None elsewhere."""
    label = record.extra.get("machine")
    return str(label) if label else None


def missing_artifact(record: Record) -> str | None:
    """The artifact suffix (".pte") a skipped record lacked, or None for any other record."""
    if record.verdict != Verdict.SKIPPED:
        return None
    match = _NO_ARTIFACT.match(str(record.skip_reason or ""))
    return match.group(1) if match else None


def worst_per(records: Iterable[Record], key: Callable[[Record], K]) -> dict[K, Record]:
    """The record with the worst verdict for each ``key(record)``: several tests of one model on
    one backend show as one row, and a failure is never hidden behind a pass."""
    grouped: dict[K, Record] = {}
    for record in records:
        k = key(record)
        if k not in grouped or VERDICT_RANK.get(record.verdict, 1) < VERDICT_RANK.get(grouped[k].verdict, 1):
            grouped[k] = record
    return grouped


def folded_skips(records: Iterable[Record]) -> dict[str, tuple[list[str], list[str]]]:
    """Per model: the artifact suffixes it lacks and the backends skipped for that."""
    folded: dict[str, tuple[list[str], list[str]]] = {}
    for record in records:
        suffix = missing_artifact(record)
        if suffix is None:
            continue
        suffixes, backends = folded.setdefault(record.model.name, ([], []))
        if suffix not in suffixes:
            suffixes.append(suffix)
        if record.backend not in backends:
            backends.append(record.backend)
    return {m: (sorted(s), sorted(b)) for m, (s, b) in sorted(folded.items())}


def fold_line(model: str, suffixes: Sequence[str], backends: Sequence[str]) -> str:
    return f"{model}: no {', '.join(suffixes)}: {', '.join(backends)} skipped"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _fit(rows: list[list[str]], header: Sequence[str], width: int) -> list[list[str]]:
    """Shorten the model and backend names until the table is at most ``width`` columns wide (down
    to 20 characters, then 10); the figures and the verdict are never cut (a cut verdict, "passed
    (gat…", hides what it says), and no column goes below its header."""
    def total() -> int:
        return sum(max(len(str(c)) for c in col) for col in zip(header, *rows)) + 2 * (len(header) - 1)

    for column, floor in ((0, 20), (1, 20), (0, 10), (1, 10)):
        excess = total() - width
        if excess <= 0:
            break
        current = max(len(str(c)) for c in [header[column], *(r[column] for r in rows)])
        limit = max(current - excess, floor, len(header[column]))
        shorten = _shorten_backend if column == 1 else _shorten
        short = {name: shorten(name, limit) for name in {r[column] for r in rows}}
        alike = Counter(short.values())
        for row in rows:
            # Two names cut to the same text ("lite…@here" for litert and litert-ref) stay whole:
            # a wider table beats two rows that read alike.
            row[column] = short[row[column]] if alike[short[row[column]]] == 1 else row[column]
    return rows


def _shorten_backend(name: str, width: int) -> str:
    """Shorten a backend name but keep its device (``onnxrunt…@board``): the device is the news."""
    base, at, device = name.partition("@")
    if not at or len(name) <= width or len(device) + 3 > width:
        return _shorten(name, width)
    return _shorten(base, width - len(device) - 1) + "@" + device


def _table_records(records: Iterable[Record]) -> list[tuple[str, str, Record]]:
    grouped = worst_per((r for r in records if missing_artifact(r) is None), lambda r: (r.model.name, r.backend))
    return [(model, backend, r) for (model, backend), r in sorted(grouped.items())]


def _skip_notes(rows: Sequence[tuple[str, str, Record]]) -> dict[str, int]:
    """Skip reasons (other than a missing artifact) numbered in table order: the row says
    "skipped [1]" and the footer gives the reason once, however many rows share it."""
    notes: dict[str, int] = {}
    for _, _, r in rows:
        if r.verdict in NOT_RUN:
            notes.setdefault(str(r.skip_reason or ""), len(notes) + 1)
    return notes


def table_rows(records: Iterable[Record], width: int | None = TABLE_WIDTH) -> list[list[str]]:
    """One row per (model, backend) that ran; the worst verdict over its tests. Backends skipped
    for a missing artifact, and the reasons of other skips, are left to :func:`table_footer`.
    Cells are shortened so the table fits ``width`` columns (None: never shortened)."""
    selected = _table_records(records)
    notes = _skip_notes(selected)
    rows = []
    for model, backend, r in selected:
        cov = r.coverage
        lat = r.latency_ms or {}
        coverage = DASH if cov is None or cov.fallback is None else \
            f"{1 - cov.fallback:.0%}" + ("*" if cov.method == "predicted" else "")
        verdict = str(r.verdict) if r.verdict not in NOT_RUN else f"{r.verdict} [{notes[str(r.skip_reason or '')]}]"
        if r.warnings:
            verdict += " (gate inconclusive)"
        rows.append([model, backend, figure(getattr(r.accuracy, "max_abs_err", None), ".2e"), coverage,
                     figure(cov.partitions if cov else None, "d"), figure(lat.get("p50"), ".3f"),
                     figure(lat.get("p99"), ".3f"), figure(r.load_ms, ".1f"), figure(r.peak_memory_mb, ".1f"), verdict])
    return _fit(rows, HEADER, width) if width else rows


def backend_has_delegate(backend: str) -> bool:
    """Whether the backend is meant to delegate; a reference lane (litert-ref) is not. Asks the
    registry, and falls back on the "-ref" naming when the backend is not installed here."""
    try:
        from ..backends import get_backend

        return bool(get_backend(backend).has_delegate)
    except Exception:  # noqa: BLE001 - a report read on another machine may name any backend
        return not split_device(backend)[0].endswith("-ref")


def table_footer(records: Sequence[Record], width: int = TABLE_WIDTH) -> list[str]:
    """Lines printed after the table: the reasons of the rows' skips, one line per model for the
    backends skipped because it has no artifact for them, and a legend when a reference lane
    shows 0 % coverage."""
    rows = _table_records(records)
    verdicts = {str(r.skip_reason or ""): r.verdict for _, _, r in rows if r.verdict in NOT_RUN}
    # A skip's reason follows "skipped:"; a does-not-convert reason says so itself.
    lines = [_shorten(f"[{n}] {'skipped: ' if verdicts.get(reason) == Verdict.SKIPPED else ''}{reason or 'no reason given'}",
                      width) for reason, n in _skip_notes(rows).items()]
    unconverted = [r for _, _, r in rows if r.verdict == Verdict.DOES_NOT_CONVERT]
    if unconverted:
        which = ", ".join(sorted({f"{r.model.name} on {r.backend}" for r in unconverted}))
        lines.append(_shorten(f"{len(unconverted)} do(es) not convert here ({which}): reported, not failed, "
                              "unless the backend is targeted (backends=, --edge-backends, --edge-require)", width))
    lines += [_shorten(fold_line(model, suffixes, backends), width)
              for model, (suffixes, backends) in folded_skips(records).items()]
    reference = sorted({r.backend for r in records if missing_artifact(r) is None and r.coverage is not None
                        and not (r.coverage.delegated_ops or 0) and not backend_has_delegate(r.backend)})
    if reference:
        lines.append(_shorten(f"coverage 0% on {', '.join(reference)}: a reference lane, no delegate by design", width))
    return lines


HEADER = ["model", "backend", "max |Δ|", "coverage", "parts", "P50 ms", "P99 ms", "load ms",
          "peak MB", "verdict"]


def format_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


# A merged report's matrix cell: a record's verdict and P50 latency, under this key (the report's format).
_CELL_P50 = "p50_ms"


@codec.layout(lenient=True)  # a merged report read back: a cell that does not fit shows dashes
@dataclass(frozen=True)
class MatrixCell:
    """The cell of the device x backend matrix a merged report keeps for a record."""

    verdict: str = ""
    p50: float | None = codec.json_field(key=_CELL_P50, default=None)


# A merged report's matrix: model -> machine (or "machine / device") -> backend -> cell.
Matrix = dict[str, dict[str, dict[str, MatrixCell]]]


def matrix_cell(record: Record) -> MatrixCell:
    """The cell of the device x backend matrix a merged report keeps for ``record`` (read by
    :func:`matrix_lines`)."""
    return MatrixCell(str(record.verdict), (record.latency_ms or {}).get("p50"))


def matrix_lines(matrix: Matrix) -> list[str]:
    """A merged report's matrix, one table per model."""
    lines = []
    for model, per_machine in sorted(matrix.items()):
        backends = sorted({b for cells in per_machine.values() for b in cells})
        rows = []
        for label, cells in sorted(per_machine.items()):
            row = [label]
            for backend in backends:
                cell = cells.get(backend)
                row.append(DASH if cell is None else f"{cell.verdict} {figure(cell.p50, '.3f')}ms")
            rows.append(row)
        lines.append(f"model {model}")
        lines.extend(format_table(rows, ["machine", *backends]))
        lines.append("")
    return lines


def gate_summary(records: Iterable[Record]) -> str | None:
    """One line on what the merge gate compared, with the models new in the change (no twin or
    stored record: measured, not judged), or None when no record was gated."""
    checks = gate_checks(records)
    if not checks:
        return None
    # A record whose baseline held none of its figures compared nothing (a report of an older
    # pytest-edge names no "compared": it counts as compared, as it always did).
    empty = [c for c in checks if not c.new and c.compared == []]
    compared = [c for c in checks if not c.new and c.compared != []]
    new = [c for c in checks if c.new]
    modes = sorted({_gate_mode(c) for c in checks})
    count = {v: sum(1 for c in compared if c.verdict == v)
             for v in (GateVerdict.FAILED, GateVerdict.INCONCLUSIVE, GateVerdict.ACCEPTED)}
    what = "twin" if all(c.mode == "ab" for c in new) else "baseline"
    return (f"merge gate ({'; '.join(modes)}): {len(compared)} compared, {count[GateVerdict.FAILED]} regressed, "
            f"{count[GateVerdict.INCONCLUSIVE]} inconclusive"
            + (f", {count[GateVerdict.ACCEPTED]} accepted" if count[GateVerdict.ACCEPTED] else "")
            + (f", {len(new)} new (no {what}: {_few(_named(c.looked_for) for c in new)})" if new else "")
            + (f", {len(empty)} with no figure in common with the baseline ({_few(_named(c.baseline) for c in empty)})"
               if empty else ""))


def _named(name: str | None) -> str:
    """A name the gate's summary gives, or "?" where it gives none."""
    return "?" if name is None else name


def _gate_mode(check: BaselineCheck) -> str:
    if check.mode == "ab":
        return f"A/B against {check.folder or Path(str(check.baseline)).parent}"
    return "against stored numbers"


def _few(items: Iterable[str], shown: int = 4) -> str:
    items = list(dict.fromkeys(items))
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def gate_compared_nothing(records: Iterable[Record]) -> str | None:
    """Why the run fails where a merge gate ran and compared nothing: every gated record is new (no
    twin in the A/B folder, no record in the stored report), so nothing was judged; None otherwise."""
    checks = gate_checks(records)
    if not checks or any(not c.new and c.compared != [] for c in checks):
        return None
    if not all(c.new for c in checks):  # some had a baseline, none a figure in common with it
        return (f"pytest-edge: the merge gate compared nothing: no baseline record held a figure of its model "
                f"({_few(_named(c.baseline) for c in checks if not c.new)}); "
                "a report of this project's tests (--edge-report on main) is what it compares against (docs/gate.md)")
    folders = _few(str(c.folder) for c in checks)
    if all(c.mode == "ab" for c in checks):
        return (f"pytest-edge: the merge gate compared nothing: --edge-baseline-models {folders} holds no twin of any "
                f"tested model (looked for {_few(str(c.looked_for) for c in checks)}); a twin lies at the "
                "artifact's path under the edge_model_dirs folder that holds the model (else under the rootdir), "
                "e.g. main's models/ for edge_model_dirs = [\"models\"] (docs/gate.md)")
    return (f"pytest-edge: the merge gate compared nothing: --edge-baseline {folders} holds no record of any tested "
            f"model (looked for {_few(str(c.looked_for) for c in checks)}): a report of this project's tests "
            "(--edge-report on main) is what it compares against (docs/gate.md)")


