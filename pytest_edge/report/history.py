"""A run history (SPEC section 13): a folder with one file per run, each a JSON report with the commit
and machine it was kept under; the figures of each (model, backend, device) over the last runs; and a
creep alert judged with the merge gate's statistics. Plain logic, no pytest: the plugin
(``--edge-history``, ``--edge-max-creep``) and ``pytest-edge history`` call it.

A run's file is written once (by the controller under xdist), atomically (a temporary file beside it,
then a rename), under a name no other job takes (its time, commit, machine and a random part): two
jobs appending to one folder at once each add their own file and neither reads-modifies-writes
another's. Its content is a report as ``--edge-report`` writes it (``pytest-edge report html`` reads
it) with a ``run`` block: ``{"commit", "machine", "created"}``."""

from __future__ import annotations

import json
import math
import os
import platform
import re
import secrets
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..checks import BUDGETS
from ..core.record import dig, is_finite_number
from ..files import atomic_write
from ..judging.counted import AGREE
from ..judging.figures import GENERATION_FIGURES, LATENCY_FIGURES, GateFigures, TimedFigure
from ..judging.regressions import LATENCY_FLOOR_MS, MEMORY_FLOOR_MB
from ..measurement.stats import Change, compare_groups
from .generation import gate_view
from .json_report import SCHEMA, load_report
from .openmetrics import device_of

if TYPE_CHECKING:
    from ..core.settings import Settings

EXPORT_SCHEMA = "pytest-edge/history-export/1"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# A run's file is a report of a session's records: a few hundred records take well under 1 MB. A
# larger file is refused before it is read (a 400 MB one took 3.6 GB to parse), as is anything but a
# regular file (a FIFO blocks the read, /dev/zero never ends).
MAX_RUN_BYTES = 64 << 20


@dataclass(frozen=True)
class Run:
    """One run of a history: where it is kept (None: not written yet), when it ran, the commit and
    machine it was kept under, and its report's records."""

    created: str
    commit: str
    machine: str
    records: tuple[Mapping[str, Any], ...]
    path: Path | None = None
    machine_info: Mapping[str, Any] = field(default_factory=dict)  # the report's machine block

    @property
    def label(self) -> str:
        """How messages name the run: its time and short commit."""
        return f"{self.created} {self.commit[:12] or '(no commit)'}"

    def report(self) -> dict[str, Any]:
        """The run's file: a report with its ``run`` block."""
        return {"schema": SCHEMA, "created": self.created, "machine": {**self.machine_info, "name": self.machine},
                "run": {"commit": self.commit, "machine": self.machine, "created": self.created},
                "records": [dict(r) for r in self.records]}

    @classmethod
    def of_report(cls, report: Mapping[str, Any], commit: str, machine: str, path: Path | None = None) -> "Run":
        created = report.get("created")
        info = report.get("machine")
        return cls(created=created if isinstance(created, str) and created else _now(), commit=commit,
                   machine=machine, records=tuple(report.get("records", [])), path=path,
                   machine_info=dict(info) if isinstance(info, Mapping) else {})


def _now() -> str:
    """Now, to the microsecond: two runs of one job a second apart keep their order."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_commit(folder: Path) -> str | None:
    """``git rev-parse HEAD`` in ``folder``; None where it is no git checkout (or git is absent)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,64}", commit) else None


def machine_name() -> str:
    """This machine's name (its host name), as histories and metrics key it."""
    return platform.node() or "local"


def file_name(run: Run) -> str:
    """``20261203T221800Z-<commit 12>-<machine>-<random>.json``: sorted by time, and unique."""
    stamp = re.sub(r"[^0-9TZ]", "", run.created) or "0"
    commit = _UNSAFE.sub("", run.commit)[:12] or "nocommit"
    machine = _UNSAFE.sub("-", run.machine)[:40] or "machine"
    return f"{stamp}-{commit}-{machine}-{secrets.token_hex(4)}.json"


def append_run(folder: Path, run: Run) -> Path:
    """Write ``run`` into the history ``folder`` (made if missing) as a new file; its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(run.report(), indent=1) + "\n").encode("utf-8")
    for _ in range(8):
        path = folder / file_name(run)
        if not path.exists():  # a random name taken already: draw another, never replace a run
            atomic_write(path, data)
            return path
    raise OSError(f"no free file name for a run in {folder}")


def check_readable(path: Path, what: str = "run file", inside: Path | None = None) -> None:
    """Refuse, naming ``path``, what would hang or exhaust the reader: a special file (a FIFO, a
    device), one above :data:`MAX_RUN_BYTES`, and (with ``inside``) a link that leads out of that
    folder. A ValueError; a missing file is left to the reader's own message."""
    path = Path(path)
    if inside is not None and path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(Path(inside).resolve()):
            raise ValueError(f"{path} is a link out of the history {inside} (to {target}): a history's runs are "
                             "its own files; copy the run in (pytest-edge history import)")
    try:
        info = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file (a FIFO, a device or a folder): not a {what}")
    if info.st_size > MAX_RUN_BYTES:
        raise ValueError(f"{path} is {info.st_size} bytes, more than the {MAX_RUN_BYTES} bytes a {what} may be "
                         f"(a run's report of hundreds of records is under 1 MB): not read")


def load_run(path: Path, inside: Path | None = None) -> Run:
    """A run's file (or any pytest-edge report, kept under the commit and machine it names, if any);
    ValueError naming the file for one that is no report, a special or oversized file, or (with
    ``inside``, its history) a link out of the history."""
    check_readable(path, inside=inside)
    report = load_report(path)
    block = report.get("run")
    if block is None:
        block = {}
    if not isinstance(block, Mapping):
        raise ValueError(f"{path} is not a valid run of a history: 'run' must be an object, got {repr(block)[:60]}")
    for key in ("commit", "machine", "created"):
        if block.get(key) is not None and not isinstance(block[key], str):
            raise ValueError(f"{path} is not a valid run of a history: 'run.{key}' must be a string, "
                             f"got {repr(block[key])[:60]}")
    machine = block.get("machine") or dig(report, "machine", "name") or ""
    return Run.of_report(report, str(block.get("commit") or ""), str(machine), Path(path))


def load_history(folder: Path) -> list[Run]:
    """Every run of the history ``folder``, oldest first (by time, then file name). A file being
    written by another job (``.NAME.tmp``) is not a run yet; a file that is no report is a
    ValueError naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a history folder (pytest --edge-history={folder} makes one)")
    runs = [load_run(p, folder) for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")]
    return sorted(runs, key=lambda r: (r.created, r.path.name if r.path else ""))


# --------------------------------------------------------------------------------------- series


SeriesKey = tuple[str, str, str]  # (model, backend, device)


def series_key(record: Mapping[str, Any], run: Run) -> SeriesKey:
    from ..backends import split_device

    return (str(dig(record, "model", "name")), split_device(str(record.get("backend", "")))[0],
            device_of(record, run.machine or "local"))


def series(runs: Sequence[Run]) -> dict[SeriesKey, list[tuple[Run, Mapping[str, Any]]]]:
    """Per (model, backend, device), the runs that hold it with its record, oldest first. A run with
    several records of one key (two tests of a model on one backend) gives the first by test id
    that is not skipped."""
    found: dict[SeriesKey, list[tuple[Run, Mapping[str, Any]]]] = {}
    for run in runs:
        taken: set[SeriesKey] = set()
        for record in sorted(run.records, key=lambda r: str(r.get("test", ""))):
            if record.get("verdict") == "skipped" or not isinstance(record.get("model"), Mapping):
                continue
            key = series_key(record, run)
            if key not in taken:
                taken.add(key)
                found.setdefault(key, []).append((run, record))
    return found


@dataclass(frozen=True)
class Shown:
    """A figure ``history show`` prints: its row's name, where a record holds it, its format, and its
    place among the rows."""

    name: str
    path: tuple[str, ...]
    fmt: str
    place: float = 0.0


# The figures no budget judges; a budgeted one is its row's (checks.BUDGETS, its kept figure's
# ``shown``), so a new row's figure is shown here without another edit.
OWN_SHOWN = (Shown("P50 spread", ("process_spread",), ".2f", 10.5),
             Shown("instr/inf", ("counted", "instructions"), ".0f", 55),
             Shown("max |diff|", ("accuracy", "max_abs_err"), ".1e", 90), Shown("cosine", ("accuracy", "cosine"), ".5f", 91),
             Shown("tokens agree", ("accuracy", "token_agreement"), ".3f", 92))
SHOWN = tuple(sorted((*OWN_SHOWN, *(Shown(row.kept.shown, row.kept.paths[0], row.kept.fmt, row.kept.place)
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
            values = [dig(record, *shown.path) for _, record in held]
            if not any(is_finite_number(v) for v in values):
                continue
            cells = [format(v, shown.fmt) if is_finite_number(v) else "-" for v in values]
            lines.append("  " + shown.name.ljust(14) + "".join(c.rjust(width) for c in cells))
    return lines or ["no measured record in the history" + (f" for model {model}" if model else "")]


# ---------------------------------------------------------------------------------------- creep


@dataclass(frozen=True)
class CreepFigure:
    """A figure the creep alert judges: its name (the gate's), how (``timed``: significance over the
    per-process figures, as the gate; ``memory``: the threshold and the gate's 1 MB floor; ``exact``:
    the threshold alone), and where a record holds it (a timed figure: its TimedFigure)."""

    name: str
    kind: str
    path: tuple[str, ...] = ()
    timed: TimedFigure | None = None


CREEP_FIGURES = (
    CreepFigure(LATENCY_FIGURES[0].name, "timed", timed=LATENCY_FIGURES[0]),
    *(CreepFigure(f.name, "timed", timed=f) for f in GENERATION_FIGURES),
    CreepFigure("peak memory", "memory", ("peak_memory_mb",)),
    CreepFigure("artifact size", "exact", ("artifact_bytes",)),
    CreepFigure("instructions", "exact", ("counted", "instructions")),
    CreepFigure("SRAM", "exact", ("npu", "memories", "sram")),
    CreepFigure("off-chip flash", "exact", ("npu", "memories", "off_chip_flash")),
    CreepFigure("DRAM", "exact", ("npu", "memories", "dram")),
)


def _values(figure: CreepFigure, record: Mapping[str, Any]) -> list[float]:
    """The figure's values in one run: a timed figure's one per fresh process (the run's pooled
    figure where it kept none per process), else the one figure; [] where not measured."""
    if figure.timed is None:
        value = dig(record, *figure.path)
        return [float(value)] if is_finite_number(value) and value > 0 else []
    figures = GateFigures.from_json(gate_view(record) or record)
    key = figure.timed.key
    per_process = [p.timed[key] for p in figures.processes if key in p.timed]
    fewest = min((p.runs for p in figures.processes if p.runs is not None), default=figures.measured_runs)
    if fewest is not None and fewest < figure.timed.min_runs:  # as the gate: too few runs to gate it
        return []
    if per_process:
        return per_process
    pooled = figures.pooled_ms.get(key)
    return [float(pooled)] if is_finite_number(pooled) and pooled > 0 else []


def _level(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class Creep:
    """A figure that crept over a window of runs: its series, the figure, the window's runs, the
    level of its first and last runs' groups, the gate's statistic (timed figures), and the first
    run where it moved."""

    key: SeriesKey
    figure: str
    runs: int
    early: float
    late: float
    change: Change | None
    first_moved: Run
    threshold: float

    @property
    def ratio(self) -> float:
        return self.late / self.early

    @property
    def message(self) -> str:
        model, backend, device = self.key
        evidence = f"; {self.change.describe().partition('(')[2].rstrip(')')}" if self.change else ""
        return (f"{model} on {backend} ({device}): {self.figure} crept {self.ratio - 1:+.1%} over the last {self.runs} "
                f"runs ({self.early:.6g} -> {self.late:.6g}, the first and last {max(1, self.runs // 3)} runs; "
                f"allowed +{self.threshold:.0%}{evidence}); first moved in the run of {self.first_moved.label}")


def judge_creep(runs: Sequence[Run], max_creep: float, window: int = 10) -> list[Creep]:
    """Every figure of every (model, backend, device) whose last ``window`` runs holding it crept: the
    last third of them against the first third (each at least one run), beyond ``max_creep`` and,
    for a timed figure, significant by the gate's test over their fresh processes
    (:func:`~pytest_edge.measurement.stats.compare_groups`) and above its floor; peak memory also
    above the gate's 1 MB floor. Fewer than three runs are not judged. The first run that moved is
    the earliest from which every run of the window lies above the window's first by more than 0.5 %
    (counted mode's agreement between processes, :data:`~pytest_edge.judging.counted.AGREE`)."""
    found = []
    for key, held in sorted(series(runs).items()):
        for figure in CREEP_FIGURES:
            measured = [(run, values) for run, record in held if (values := _values(figure, record))]
            measured = measured[-window:]
            if len(measured) < 3:
                continue
            side = max(1, len(measured) // 3)
            early = [v for _, values in measured[:side] for v in values]
            late = [v for _, values in measured[-side:] for v in values]
            early_level, late_level = _level(early), _level(late)
            # A creep moves the middle of the window too; noise that lifts the last third alone does not.
            middle = [v for _, values in measured[side:-side] for v in values]
            if middle and not early_level < _level(middle) < late_level:
                continue
            change = None
            if figure.kind == "timed":
                change = compare_groups(early, late)
                crept = change.exceeds(max_creep) and late_level - early_level > LATENCY_FLOOR_MS
            else:
                crept = late_level / early_level - 1 > max_creep
                if figure.kind == "memory":
                    crept = crept and late_level - early_level > MEMORY_FLOOR_MB
            if not crept:
                continue
            levels = [_level(values) for _, values in measured]
            above = levels[0] * (1 + AGREE)
            moved = next((k for k in range(1, len(levels)) if all(level > above for level in levels[k:])),
                         len(levels) - side)
            found.append(Creep(key, figure.name, len(measured), early_level, late_level, change,
                               measured[moved][0], max_creep))
    return found


# ------------------------------------------------------------------------------- import, export


def export_runs(runs: Sequence[Run]) -> dict[str, Any]:
    """The runs as one JSON document (``pytest-edge history export``)."""
    return {"schema": EXPORT_SCHEMA, "runs": [run.report() for run in runs]}


def runs_of_file(path: Path, commit: str | None = None, machine: str | None = None) -> list[Run]:
    """The runs ``path`` holds, each validated as a history's run is when read (so an import never
    writes a run that breaks the history's later reads): an export's (every run, as kept) or a
    report's (one run, under ``commit`` and ``machine``, else what its ``run`` block names). A
    ValueError naming the file (and the run of an export) for anything else."""
    path = Path(path)
    check_readable(path, "history export or report")
    try:
        data = json.loads(path.read_text())
    except RecursionError as exc:
        raise ValueError(f"cannot read {path}: JSON nested too deeply") from exc
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not (isinstance(data, dict) and data.get("schema") == EXPORT_SCHEMA):
        run = load_run(path)
        return [Run(run.created, commit if commit is not None else run.commit,
                    machine if machine is not None else run.machine or machine_name(), run.records,
                    machine_info=run.machine_info)]
    reports = data.get("runs")
    if not isinstance(reports, list):
        raise ValueError(f"{path}: a history export's 'runs' must be a list of runs, got {repr(reports)[:60]}")
    found = []
    with tempfile.TemporaryDirectory(prefix="pytest-edge-import-") as scratch:
        for index, report in enumerate(reports):
            block = report.get("run") if isinstance(report, dict) else None
            if not isinstance(block, dict) or not isinstance(report.get("records"), list):
                raise ValueError(f"{path}: run {index} is no run of a history (no 'run' block or 'records')")
            # Through the reader a history's run files go through: one validation, one set of messages.
            copy = Path(scratch) / f"run-{index}.json"
            copy.write_text(json.dumps(report))
            try:
                run = load_run(copy)
            except ValueError as exc:
                raise ValueError(str(exc).replace(str(copy), f"{path}: run {index}")) from None
            found.append(replace(run, path=None))
    return found


def _identity(run: Run) -> str:
    return json.dumps([run.created, run.commit, run.machine, [dict(r) for r in run.records]], sort_keys=True,
                      default=str)


def import_runs(folder: Path, runs: Sequence[Run]) -> tuple[list[Path], int]:
    """Add ``runs`` to the history ``folder`` (made if missing), leaving out each run the history
    holds already (the same time, commit, machine and records: an export imported twice). The new
    files, and how many runs were left out."""
    folder = Path(folder)
    held = {_identity(run) for run in load_history(folder)} if folder.is_dir() else set()
    written = []
    for run in runs:
        if _identity(run) in held:
            continue
        held.add(_identity(run))
        written.append(append_run(folder, run))
    return written, len(runs) - len(written)


def import_file(folder: Path, path: Path, commit: str | None = None, machine: str | None = None) -> list[Path]:
    """Add to the history ``folder`` the runs of ``path`` (:func:`runs_of_file`), each validated
    before any is written; the new files (a run the history holds already is left out)."""
    return import_runs(folder, runs_of_file(path, commit, machine))[0]


# ------------------------------------------------------------------------------ a session's end


@dataclass(frozen=True)
class OverTime:
    """What a session's end wrote over time: errors (a file that could not be written, a history that
    cannot be read: the run fails), the creeps found, and whether they fail the run."""

    errors: tuple[str, ...] = ()
    creeps: tuple[Creep, ...] = ()
    fail: bool = False
    runs: tuple[Run, ...] = ()  # the history with this run, where a creep or the page needed it

    def lines(self) -> list[str]:
        """The creeps as the terminal says them."""
        how = "fails the run (--edge-creep=fail)" if self.fail else "a warning (--edge-creep=fail fails the run)"
        return [f"pytest-edge: creep: {c.message}" for c in self.creeps] + (
            [f"pytest-edge: {len(self.creeps)} figure(s) crept over the history: {how}"] if self.creeps else [])


def write_over_time(report: Mapping[str, Any], settings: "Settings") -> OverTime:
    """``--edge-openmetrics`` and ``--edge-history`` (with its creep alert) of a finished session's
    report; each on its own, as the other outputs are."""
    errors: list[str] = []
    commit = settings.history_commit or read_commit(settings.rootdir) or ""
    machine = machine_name()
    if settings.openmetrics:
        from .openmetrics import write_openmetrics

        target = settings.rootdir / settings.openmetrics
        try:
            write_openmetrics(target, report.get("records", []), commit, machine)
        except OSError as exc:
            errors.append(f"pytest-edge: cannot write the OpenMetrics file {target}: {exc.strerror or exc}")
    creeps: list[Creep] = []
    runs: list[Run] = []
    if settings.history:
        folder = settings.rootdir / settings.history
        try:
            append_run(folder, replace(Run.of_report(report, commit, machine), created=_now()))
        except OSError as exc:
            errors.append(f"pytest-edge: cannot append the run to the history {folder}: {exc.strerror or exc}")
        else:
            if settings.max_creep is not None or settings.html:
                try:
                    runs = load_history(folder)
                except ValueError as exc:
                    errors.append(f"pytest-edge: cannot read the history {folder}: {exc}")
                if runs and settings.max_creep is not None:
                    creeps = judge_creep(runs, settings.max_creep, settings.creep_window)
    return OverTime(tuple(errors), tuple(creeps), settings.creep_fail, tuple(runs))
