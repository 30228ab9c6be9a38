"""One timing or memory measurement at a time per machine (or per device), across xdist workers
and sessions: an exclusive ``flock`` on a file in the temporary folder."""

from __future__ import annotations

import fcntl
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MEASURE_LOCK = Path(tempfile.gettempdir()) / "pytest-edge-measure.lock"

_lock_depth: dict[str, int] = {}


@contextmanager
def machine_measurement_lock(device: str = "") -> Iterator[None]:
    """One timing/memory measurement at a time on this machine (or on one device), across xdist
    workers and sessions. Re-entrant within a process (flock on a second descriptor would wait for
    the first forever)."""
    if _lock_depth.get(device):
        _lock_depth[device] += 1
        try:
            yield
        finally:
            _lock_depth[device] -= 1
        return
    path = MEASURE_LOCK if not device else MEASURE_LOCK.with_name(f"pytest-edge-measure-{device}.lock")
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _lock_depth[device] = 1
        try:
            yield
        finally:
            _lock_depth[device] = 0
            fcntl.flock(handle, fcntl.LOCK_UN)
