"""Errors pytest-edge raises. Each names the file and the backend it concerns."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Protocol, Sequence

# C0 and C1 controls and DEL (ESC starts a terminal's escape sequences, CR overwrites a line), and
# any non-ASCII character to look at: format characters (bidirectional overrides, zero widths),
# surrogates (undecodable bytes of a file name) and line or paragraph separators are escaped too.
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\x9f]|[^\x00-\x7f]")
_SUSPECT_IN_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|[^\x00-\x7f]")
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


# The longest error line quoted whole (a line longer than this is no message, it is data).
MAX_LINE = 2000
# Python's exception line ("KeyError: 'Fastest'", "ethosu.vela.errors.CliOptionError: ..."), a C++ abort's
# ("terminate called after throwing an instance of 'std::bad_alloc'"), a C assertion's (ggml's
# "ops.cpp:6260: GGML_ASSERT(src0->type == GGML_TYPE_F16) failed", glibc's "Assertion `x' failed."),
# or a tool's own "Error: ..." line.
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?"
                         r"|terminate called.*|(?:[Ee]rror|ERROR|[Ff]atal|FATAL)\b.*|Failed .*"
                         r"|.*\b(?:GGML_ASSERT|Assertion)\b.* failed.*)$")


def error_line(output: str) -> str:
    """A process's own error: the last line of ``output`` that reads as one (an exception's last
    line, "Error: ...", an assertion), else its last line; whole, up to :data:`MAX_LINE` characters."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    found = said_error(output) or (lines[-1].strip() if lines else "it printed nothing")
    return found if len(found) <= MAX_LINE else found[:MAX_LINE] + f"… ({len(found) - MAX_LINE} more characters)"


def said_error(output: str) -> str | None:
    """The last line of ``output`` that reads as an error (see :func:`error_line`), None if none does."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in reversed(lines) if _ERROR_LINE.match(line)), None)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code >= 0xA0 and unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char  # a printable character of any script: shown as it is
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: object, lines: bool = False, most: int | None = None) -> str:
    """``text`` as it may reach a terminal: every control, escape or invisible character written as
    its Python escape (``\\x1b``, ``\\u202e``), printable characters of any script kept. Text from a
    file (a configuration's field, a GGUF string, a golden's metadata, an accept reason) or from a
    runtime's message goes through here before it is shown, so a file cannot move the cursor, recolor
    or rewrite the lines of a test's report. ``lines`` keeps newlines and tabs (a message of several
    lines); ``most`` cuts the result to that many characters, saying so."""
    shown = (_SUSPECT_IN_LINES if lines else _SUSPECT).sub(_escaped, str(text))
    if most is not None and len(shown) > most:
        return shown[:most] + f"… ({len(shown) - most} more characters)"
    return shown


def visible_longrepr(longrepr: Any) -> Any:
    """A pytest report's ``longrepr`` with its text made :func:`visible`: a message string, a skip's
    (path, line, reason), or a traceback's crash message and source lines (changed in place). Text
    a test's failure quotes from a file (an assertion's message, a runtime's exception) reaches the
    terminal, the short summary and JUnit XML through it; an edge test's reports pass here."""
    if isinstance(longrepr, str):
        return visible(longrepr, lines=True)
    if isinstance(longrepr, tuple) and len(longrepr) == 3 and isinstance(longrepr[2], str):
        return (longrepr[0], longrepr[1], visible(longrepr[2], lines=True))
    chain = getattr(longrepr, "chain", None)
    parts = [(tb, crash) for tb, crash, _ in chain] if chain else \
        [(getattr(longrepr, "reprtraceback", None), getattr(longrepr, "reprcrash", None))]
    for traceback, crash in parts:
        if crash is not None and isinstance(getattr(crash, "message", None), str):
            crash.message = visible(crash.message, lines=True)
        for entry in getattr(traceback, "reprentries", None) or ():
            if isinstance(getattr(entry, "lines", None), list):
                entry.lines[:] = [visible(line, lines=True) if isinstance(line, str) else line for line in entry.lines]
    if isinstance(getattr(longrepr, "longrepr", None), str):  # a collection error's
        longrepr.longrepr = visible(longrepr.longrepr, lines=True)
    return longrepr


class EdgeError(Exception):
    """A conformance problem reported to the user as a plain message, without a deep traceback. Its
    text is :func:`visible`: a file's bytes quoted in it cannot reach the terminal as escapes."""

    def __str__(self) -> str:
        return visible(super().__str__(), lines=True)


class EdgeUsageError(EdgeError):
    """The user asked for something that cannot be: bad marker keyword, unknown backend, bad unit."""


class UnknownBackend(EdgeUsageError, KeyError):
    """A backend name no registered runtime knows (a KeyError too, for callers that look names up)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return visible(self.args[0], lines=True) if self.args else ""


class BackendError(EdgeError):
    """A runtime refused or failed on an artifact (bad file, unsupported op, signature mismatch)."""


class DoesNotConvert(BackendError):
    """A runtime that reads another runtime's artifact (OpenVINO reading a .onnx or .tflite) cannot
    convert it: its own outcome, with the frontend's reason. It fails a test only where the user
    targets that backend (marker ``backends=``, ``edge_backends``, ``--edge-backends``,
    ``--edge-require``); otherwise it is reported and counted like a skip (docs/backends-more-runtimes.md)."""


class BackendCrash(BackendError):
    """The runtime's process died (native crash, killed); the worker is restarted for the next test.
    ``ended``: how, where known ("signal SIGABRT", "exit status 1"); ``printed``: the last lines the
    runtime wrote before it died (its own reason, where it gave one)."""

    def __init__(self, message: str, ended: str | None = None, printed: str = "") -> None:
        super().__init__(message)
        self.ended, self.printed = ended, printed


class DeviceUnreachable(BackendCrash):
    """A device's command could not start a worker there (host down, no key, no Python): its
    backends are skipped with the transport's message, or fail with --edge-require."""


class CountingUnavailable(EdgeError):
    """Counted mode (--edge-count=instructions) cannot count here: Valgrind is missing, or cannot run
    the backend's runtime; the test is skipped with the reason (or fails with --edge-require)."""


class GoldenError(EdgeError):
    """The golden outputs are missing, stale or unreadable."""


class EdgeInconclusive(UserWarning):
    """A latency regression against stored numbers, seen while the machine was busy: not a failure
    unless the policy is strict (``--edge-strict-timing``)."""


class EdgeWorkerRestarted(UserWarning):
    """A backend worker died between requests (the OOM killer, a kill) and was restarted: the test
    went on in a new process; ``--edge-strict-restarts`` makes it a failure."""


class EdgeManyCases(UserWarning):
    """``inputs=`` gave more cases than a golden usually needs (each is a file and a run per backend)."""


class _NamesArtifact(Protocol):
    @property
    def artifact(self) -> str | None: ...


class FailedRecord(Protocol):
    """What a failure's message reads of its record (core.record.Record; a leaf does not import it)."""

    @property
    def backend(self) -> str: ...

    @property
    def model(self) -> _NamesArtifact: ...

    @property
    def warnings(self) -> Sequence[str]: ...


class EdgeCheckFailed(EdgeError):
    """One or more budgets were exceeded; the message lists every one. ``record``: the check's
    record, as the session kept it."""

    def __init__(self, violations: Sequence[str], record: FailedRecord) -> None:
        self.violations = list(violations)
        self.record = record
        notes = [f"  note (not counted): {w}" for w in record.warnings]
        super().__init__("pytest-edge: " + str(len(violations)) + " check(s) failed on "
                         + record.backend + f" ({record.model.artifact}):\n"
                         + "\n".join(["  - " + v for v in violations] + notes))
