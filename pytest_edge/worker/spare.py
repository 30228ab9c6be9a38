"""A worker interpreter started before its backend is known: ``python -m pytest_edge.worker --spare FD``.

The plugin starts one before it imports its session (NumPy, the goldens, the gate): when the session
starts in a project that names its model folders, else with the first edge test collected
(stash.start_spare). The spare imports NumPy and the worker's modules on another core meanwhile,
and waits. When collection ends, the first local worker the session starts adopts it and sends it
``Start`` (its backend), so a run's first check waits for the runtime's import only, not for a
whole interpreter's start after pytest's (docs/architecture.md, "Start-up"). A spare no worker
adopts (every test on a device, a compile-time target, a backend in its own environment) is
killed when the workers have started: it cost one interpreter's imports on another core.

A leaf of the pytest side: nothing here imports NumPy, the protocol or a backend.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from .logs import new_log_path


def local_worker_env() -> dict[str, str]:
    """The environment a worker of this machine's Python is started with (a spare, a spawned worker,
    a zygote): this process's, with its ``sys.path`` as PYTHONPATH, so it imports what pytest does."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _started_with() -> tuple[dict[str, str], str]:
    """What a worker started now would be given: its environment and this working directory."""
    return local_worker_env(), os.getcwd()


class SpareWorker:
    """A started ``--spare`` worker: its process, the socket it reads its Start on, and its log."""

    def __init__(self) -> None:
        self.log_path = new_log_path("spare")
        parent, child = socket.socketpair()
        self.started_with = _started_with()
        try:
            with open(self.log_path, "wb") as log:
                self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
                    [sys.executable, "-m", "pytest_edge.worker", "--spare", str(child.fileno())],
                    pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=self.started_with[0])
        except BaseException:
            parent.close()
            self.log_path.unlink(missing_ok=True)
            raise
        finally:
            child.close()
        self.socket: socket.socket | None = parent

    def adopt(self) -> tuple[subprocess.Popen[bytes], int, Path] | None:
        """The process, the socket's file descriptor (now the caller's) and the log, once; None
        where it is gone (already adopted, closed, or it ended), or where a worker started now would
        get another environment, sys.path or working directory (a test module collected after it set
        a variable or a path): the worker must run as one started now would."""
        if self.process is None or self.socket is None or self.process.poll() is not None:
            return None
        if _started_with() != self.started_with:
            return None
        process, fd = self.process, self.socket.detach()
        self.process = self.socket = None
        return process, fd, self.log_path

    def close(self) -> None:
        """Kill a spare nobody adopted (it only waits, so nothing of a test is lost) and remove its log."""
        if self.socket is not None:
            self.socket.close()
            self.socket = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None
            try:
                self.log_path.unlink()
            except OSError:
                pass
