"""Errors pytest-edge raises. Each names the file and the backend it concerns."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


class EdgeError(Exception):
    """A conformance problem reported to the user as a plain message, without a deep traceback."""


class EdgeUsageError(EdgeError):
    """The user asked for something that cannot be: bad marker keyword, unknown backend, bad unit."""


class UnknownBackend(EdgeUsageError, KeyError):
    """A backend name no registered runtime knows (a KeyError too, for callers that look names up)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BackendError(EdgeError):
    """A runtime refused or failed on an artifact (bad file, unsupported op, signature mismatch)."""


class DoesNotConvert(BackendError):
    """A runtime that reads another runtime's artifact (OpenVINO reading a .onnx or .tflite) cannot
    convert it: its own outcome, with the frontend's reason. It fails a test only where the user
    targets that backend (marker ``backends=``, ``edge_backends``, ``--edge-backends``,
    ``--edge-require``); otherwise it is reported and counted like a skip (docs/backends-more-runtimes.md)."""

    verdict = "does not convert"


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


class EdgeCheckFailed(EdgeError):
    """One or more budgets were exceeded; the message lists every one."""

    def __init__(self, violations: Sequence[str], record: Mapping[str, Any]) -> None:
        self.violations = list(violations)
        self.record = record
        notes = [f"  note (not counted): {w}" for w in record.get("warnings") or []]
        super().__init__("pytest-edge: " + str(len(violations)) + " check(s) failed on "
                         + record["backend"] + " (" + record["model"]["artifact"] + "):\n"
                         + "\n".join(["  - " + v for v in violations] + notes))
