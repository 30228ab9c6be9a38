"""What a test of this suite measured, found while it runs (tests/conftest.py's summary of failed
tests reads it): not its name, a marker or a list kept by hand.

A test measured when, during its setup or its call, any of these happened:

- **in this process**, pytest-edge's worker client sent a measuring request (``measure``,
  ``measure_generation``, ``count``, ``probe_context``: a session run in-process, a pool or an
  EdgeSession driven by the test), the machine probe ran (``timing.machine_probe_ns``: a worker
  server timing in this process), or the test timed a model itself (``edge_helpers.chain_p50_ms``:
  the calibrated chain);
- **in a pytest it started** (pytester's subprocess runs, a shell running pytest: every such
  process is started by ``subprocess.Popen``), the session asked for measurement: on its command
  line or in ``PYTEST_ADDOPTS`` (``--edge-measure``, ``--edge-baseline``, ``--edge-baseline-models``,
  ``--edge-count``, ``-o`` of their ini keys, ``edge_emulated_timing`` record or judge), in the
  project's ini file, or by a marker budget pytest-edge measures for (the keywords its budget table
  marks ``measured``, ``max_context``/``contexts``, a ``.measure(`` call) in the project's test files;
  or the JSON report the run was asked to write (``--edge-report``) holds a measured figure (a
  latency, a TTFT, counted instructions; not a load time alone, which every session records).

Each finding is a short reason, kept on the item as a ``user_property`` named ``edge_measured``: it
reaches the failed test's report, under xdist too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

PROPERTY = "edge_measured"
MEASURING_OPS = {"measure": "timed runs", "measure_generation": "timed generations",
                 "count": "counted instructions", "probe_context": "a context sweep's memory"}
# The product's options that make a session measure (core/settings.py OPTIONS): their flags and ini keys.
MEASURING_OPTIONS = ("edge_measure", "edge_baseline", "edge_baseline_models", "edge_count")
_PYTEST = re.compile(r"(?<![\w.-])pytest(?![\w.-])|-mpytest\b")
_REPORT = re.compile(r"--edge-report(?:=|\s+)(\S+)")


def _budget_keywords() -> tuple[str, ...]:
    from pytest_edge.checks import BUDGETS

    return tuple(sorted({budget.keyword for budget in BUDGETS if budget.measured} | {"max_context", "contexts"}))


def _asks_in_text(text: str) -> str | None:
    """Which measuring option a command line, PYTEST_ADDOPTS or an ini file sets, or None."""
    for ini in MEASURING_OPTIONS:
        flag = "--" + ini.replace("_", "-")
        if re.search(rf"{flag}(?:-models)?(?=[=\s]|$)(?![=\s]+off\b)", text) or \
                re.search(rf"\b{ini}\s*=\s*(?!off\b|false\b|0\b)\S", text, re.IGNORECASE):
            return flag
    if re.search(r"\bedge_emulated_timing\s*=\s*(record|judge)\b", text):
        return "edge_emulated_timing"
    return None


def _project_asks(folder: Path) -> str | None:
    """A measuring option in the project's ini files, or a measured budget in its test files."""
    for name in ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"):
        path = folder / name
        if path.is_file() and path.stat().st_size < 200_000:
            found = _asks_in_text(path.read_text(errors="replace"))
            if found:
                return f"{found} in {name}"
    budget = re.compile(r"\b(" + "|".join(_budget_keywords()) + r")\s*=|\.measure\(")
    for path in [*folder.glob("*.py"), *folder.glob("*/*.py")]:
        if path.is_file() and path.stat().st_size < 200_000 and not path.name.startswith("."):
            hit = budget.search(path.read_text(errors="replace"))
            if hit:
                return f"a measured budget ({hit.group(0).rstrip('=(').strip()}) in {path.name}"
    return None


def _report_measured(path: Path) -> bool:
    try:
        records = json.loads(path.read_text()).get("records") or []
    except (OSError, ValueError, AttributeError):
        return False
    for record in records:
        if not isinstance(record, dict):
            continue
        llm = record.get("llm") if isinstance(record.get("llm"), dict) else {}
        # load_ms alone is not one: every session times its loads, measuring or not.
        if (record.get("latency_ms") or {}).get("p50") is not None or record.get("counted") or \
                (llm.get("ttft_ms") or {}).get("p50") is not None:
            return True
    return False


class Finder:
    """The reasons found while one test phase runs, and the reports its pytest runs were asked to write."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.reports: list[Path] = []

    def found(self, reason: str) -> None:
        if (PROPERTY, reason) not in self.item.user_properties:
            self.item.user_properties.append((PROPERTY, reason))

    def popen(self, args: Any, kwargs: dict[str, Any]) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        text = " ".join(os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv)
        if not _PYTEST.search(text):
            return
        cwd = Path(kwargs.get("cwd") or os.getcwd())
        env = kwargs.get("env") if kwargs.get("env") is not None else os.environ
        asked = _asks_in_text(text) or (_asks_in_text(env.get("PYTEST_ADDOPTS", "")) and "PYTEST_ADDOPTS")
        if asked:
            self.found(f"a pytest run with {asked}")
        else:
            project = _project_asks(cwd)
            if project:
                self.found(f"a pytest run with {project}")
        for match in _REPORT.finditer(text):
            self.reports.append(cwd / match.group(1).strip("'\""))

    def read_reports(self) -> None:
        for path in self.reports:
            if path.is_file() and _report_measured(path):
                self.found(f"its run's report {path.name} holds measured figures")


def _patched(owner: Any, name: str, before: Callable[..., None]) -> Callable[[], None]:
    """``owner.name`` calling ``before(*args, **kwargs)`` first; returns the undo."""
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before(*args, **kwargs)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, original)


@contextmanager
def finding(item: pytest.Item) -> Iterator[None]:
    """Record on ``item`` what it measures while the block runs (one test phase)."""
    import edge_helpers
    from pytest_edge.measurement import timing
    from pytest_edge.worker.client import BackendWorker

    finder = Finder(item)

    def request(client: Any, request: Any, *args: Any, **kwargs: Any) -> None:
        kind = MEASURING_OPS.get(getattr(request, "op", ""))
        if kind:
            finder.found(f"{kind} in this process's worker client")

    undo = [
        _patched(subprocess.Popen, "__init__",
                 lambda self, *args, **kwargs: finder.popen(args[0] if args else kwargs.get("args", ()), kwargs)),
        _patched(BackendWorker, "request", request),
        _patched(timing, "machine_probe_ns", lambda: finder.found("the machine probe timed in this process")),
        _patched(edge_helpers, "chain_p50_ms", lambda *a, **k: finder.found("a chain timed in this process")),
    ]
    try:
        yield
    finally:
        for restore in reversed(undo):
            restore()
        finder.read_reports()


def reasons(report: pytest.TestReport) -> list[str]:
    """What the test of ``report`` measured (empty: nothing)."""
    return [value for key, value in report.user_properties if key == PROPERTY]
