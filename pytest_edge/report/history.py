"""A run history (SPEC section 13): a folder with one file per run, each a JSON report with the commit
and machine it was kept under (:mod:`.history_runs`); the figures of each (model, backend, device)
over the last runs (:mod:`.history_series`); and a creep alert judged with the merge gate's
statistics (:mod:`.history_creep`). This module writes them at a session's end and is where the
plugin (``--edge-history``, ``--edge-max-creep``) and ``pytest-edge history`` import them from. Plain
logic, no pytest."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

# The history's names, from the modules that own them (the plugin, the CLI and the tests import them here).
from .history_creep import CREEP_FIGURES, Creep, CreepFigure, judge_creep
from .history_runs import (EXPORT_SCHEMA, MAX_RUN_BYTES, Run, append_run, check_readable, created_now, export_runs,
                           file_name, import_file, import_runs, load_history, load_run, machine_name, read_commit,
                           runs_of_file)
from .history_series import OWN_SHOWN, SHOWN, SeriesKey, Shown, series, series_key, show_lines

if TYPE_CHECKING:
    from ..core.settings import Settings
    from .json_report import Report

__all__ = ["CREEP_FIGURES", "EXPORT_SCHEMA", "MAX_RUN_BYTES", "OWN_SHOWN", "SHOWN", "Creep", "CreepFigure", "OverTime",
           "Run", "SeriesKey", "Shown", "append_run", "check_readable", "export_runs", "file_name", "import_file",
           "import_runs", "judge_creep", "load_history", "load_run", "machine_name", "read_commit", "runs_of_file",
           "series", "series_key", "show_lines", "write_over_time"]


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


def write_over_time(report: "Report", settings: "Settings") -> OverTime:
    """``--edge-openmetrics`` and ``--edge-history`` (with its creep alert) of a finished session's
    report; each on its own, as the other outputs are."""
    errors: list[str] = []
    commit = settings.history_commit or read_commit(settings.rootdir) or ""
    machine = machine_name()
    if settings.openmetrics:
        from .openmetrics import write_openmetrics

        target = settings.rootdir / settings.openmetrics
        try:
            write_openmetrics(target, report.records, commit, machine)
        except OSError as exc:
            errors.append(f"pytest-edge: cannot write the OpenMetrics file {target}: {exc.strerror or exc}")
    creeps: list[Creep] = []
    runs: list[Run] = []
    if settings.history:
        folder = settings.rootdir / settings.history
        try:
            append_run(folder, replace(Run.of_report(report, commit, machine), created=created_now()))
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
