"""A run history's files (SPEC section 13): a folder with one file per run, each a JSON report with
the commit and machine it was kept under; writing a run, reading the folder, and moving runs between
histories (``pytest-edge history export`` / ``import``). Plain logic, no pytest.

A run's file is written once (by the controller under xdist), atomically (a temporary file beside it,
then a rename), under a name no other job takes (its time, commit, machine and a random part): two
jobs appending to one folder at once each add their own file and neither reads-modifies-writes
another's. Its content is a report as ``--edge-report`` writes it (``pytest-edge report html`` reads
it) with a ``run`` block: ``{"commit", "machine", "created"}``."""

from __future__ import annotations

import json
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
from typing import Any, Mapping, Sequence

from .. import codec
from ..core.record import Record
from ..files import atomic_write
from ..measurement.machine import Machine
from .json_report import SCHEMA, Report, read_report

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
    records: tuple[Record, ...]
    path: Path | None = None
    # The report's machine block (Report.machine), written back as it was, with the run's machine as its name.
    machine_info: Machine = field(default_factory=Machine)

    @property
    def label(self) -> str:
        """How messages name the run: its time and short commit."""
        return f"{self.created} {self.commit[:12] or '(no commit)'}"

    def report(self) -> dict[str, Any]:
        """The run's file (JSON): a report with its ``run`` block, before its records."""
        return {"schema": SCHEMA, "created": self.created,
                "machine": codec.to_json(self.machine_info.named(self.machine)),
                "run": {"commit": self.commit, "machine": self.machine, "created": self.created},
                "records": [record.to_json() for record in self.records]}

    @classmethod
    def of_report(cls, report: Report, commit: str, machine: str, path: Path | None = None) -> "Run":
        return cls(created=report.created or created_now(), commit=commit, machine=machine,
                   records=tuple(report.records), path=path, machine_info=report.machine or Machine())


def created_now() -> str:
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
    report = read_report(path)  # the file's JSON: its run block is read here, its records as Records below
    block = report.get("run")
    if block is None:
        block = {}
    if not isinstance(block, Mapping):
        raise ValueError(f"{path} is not a valid run of a history: 'run' must be an object, got {repr(block)[:60]}")
    for key in ("commit", "machine", "created"):
        if block.get(key) is not None and not isinstance(block[key], str):
            raise ValueError(f"{path} is not a valid run of a history: 'run.{key}' must be a string, "
                             f"got {repr(block[key])[:60]}")
    typed = Report.from_json(report, f"{path} is not a valid pytest-edge report")
    machine = block.get("machine") or (typed.machine.name if typed.machine is not None else None) or ""
    return Run.of_report(typed, str(block.get("commit") or ""), str(machine), Path(path))


def load_history(folder: Path) -> list[Run]:
    """Every run of the history ``folder``, oldest first (by time, then file name). A file being
    written by another job (``.NAME.tmp``) is not a run yet; a file that is no report is a
    ValueError naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a history folder (pytest --edge-history={folder} makes one)")
    runs = [load_run(p, folder) for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")]
    return sorted(runs, key=lambda r: (r.created, r.path.name if r.path else ""))


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
    return json.dumps([run.created, run.commit, run.machine, [r.to_json() for r in run.records]], sort_keys=True,
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
