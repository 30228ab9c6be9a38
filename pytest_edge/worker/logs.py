"""A worker's log file, on the pytest side: where a worker's output goes (one file per worker of this
process, named by its pid so that a killed session's are found later), what of it a failure shows,
and how a worker's end is named. A leaf: nothing here imports NumPy, the protocol or a backend."""

from __future__ import annotations

import itertools
import os
import re
import signal
import tempfile
from pathlib import Path

from ..errors import said_error

_LOGS = itertools.count()  # numbers the log files of this process's workers

# Signals a process dies of by its own code (not a kill from outside, not a closed connection).
CRASH_SIGNALS = {int(s) for s in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT,
                                  signal.SIGSYS, signal.SIGTRAP)}


def new_log_path(label: str) -> Path:
    """A fresh log file's path for the worker ``label`` names (``pytest-edge-<pid>-<label>-<n>.log``)."""
    return Path(tempfile.gettempdir()) / f"pytest-edge-{os.getpid()}-{label}-{next(_LOGS)}.log"


def exit_description(exitcode: int | None) -> str:
    """How a process ended, as a failure names it: ``signal SIGSEGV``, ``exit status 1``."""
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def log_tail(log_path: Path, printer: str, lines: int = 8) -> str:
    """The last ``lines`` a worker printed (``printer``: "runtime" or "device"), and before them its
    own error line where one is further up (ggml prints a debugger's backtrace after its
    GGML_ASSERT line); "" where it printed nothing."""
    try:
        text = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    said = said_error("\n".join(text))
    last = text[-lines:]
    tail = "\n".join("    " + line for line in last)
    if said and not any(said in line for line in last):
        tail = f"    {said}\n    ...\n{tail}"
    return f"\n  last lines the {printer} printed:\n{tail}" if tail else ""


def remove_stale_logs(directory: Path | None = None) -> list[Path]:
    """Worker logs (``pytest-edge-<pid>-<backend>.log``) left by a session that was killed before it
    could remove them: those of a pid that no longer runs are removed. Returns what was removed."""
    removed = []
    for log in Path(directory or tempfile.gettempdir()).glob("pytest-edge-*-*.log"):
        match = re.fullmatch(r"pytest-edge-(\d+)-.+\.log", log.name)
        if match is None or Path(f"/proc/{match[1]}").exists() or not Path("/proc/self").exists():
            continue
        try:
            log.unlink()
            removed.append(log)
        except OSError:
            pass
    return removed
