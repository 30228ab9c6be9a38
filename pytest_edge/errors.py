"""Errors pytest-edge raises. Each names the file and the backend it concerns."""

from __future__ import annotations


class EdgeError(Exception):
    """A conformance problem reported to the user as a plain message, without a deep traceback."""


class EdgeUsageError(EdgeError):
    """The user asked for something that cannot be: bad marker keyword, unknown backend, bad unit."""


class BackendError(EdgeError):
    """A runtime refused or failed on an artifact (bad file, unsupported op, signature mismatch)."""


class BackendCrash(BackendError):
    """The runtime's process died (native crash, killed); the worker is restarted for the next test."""


class GoldenError(EdgeError):
    """The golden outputs are missing, stale or unreadable."""


class EdgeInconclusive(UserWarning):
    """A latency regression against stored numbers, seen while the machine was busy: not a failure
    unless the policy is strict (``--edge-strict-timing``)."""
