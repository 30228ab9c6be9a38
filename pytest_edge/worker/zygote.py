"""Fresh measuring processes without the import: a zygote per backend on this machine imports the
backend's runtime once and forks a fresh worker per measuring process (docs/design.md, "Forked
measuring processes").

The zygote holds nothing a measurement would inherit: no model is loaded and nothing is run before
a fork (the runtime's own import is all; ``import_runtime`` starts no inference thread pool). The
host makes the child's socket (the one a spawned worker gets) and its log file, and hands both to
the zygote over a Unix socket (SCM_RIGHTS); the child serves the same protocol as a spawned worker.
The host cannot wait for a grandchild, so the zygote reaps its children and reports their exit
status (a signal as a negative code, as ``subprocess`` does): crash messages name the signal.
Each child dies with the zygote and the zygote with the host (PR_SET_PDEATHSIG).

The host's requests are typed (protocol.ZYGOTE_REQUESTS: Fork, ProcessStatus, KillProcess, Exit) and
the zygote's replies are the worker's envelopes (``ok(value)``, ``failure(kind, message)``; the hello
too), as JSON of at most MESSAGE_BYTES: no pickle. A message the zygote cannot read gets a failure
reply; the zygote goes on serving.

``python -m pytest_edge.worker --zygote BACKEND FD`` runs a zygote on the socket FD (zygote_process.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..errors import BackendError
from .spare import local_worker_env
from .protocol import (ZYGOTE_REQUESTS, Exit, Fork, KillProcess, ProcessStatus, ProtocolError, Request, ZygoteHello,
                       reply_as, request_json)

MESSAGE_BYTES = 4096


def fork_supported() -> bool:
    """Forking needs os.fork, fd passing and PR_SET_PDEATHSIG: Linux."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "send_fds")


def thread_count() -> int:
    """Threads of this process (Linux); 1 where /proc cannot tell."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def source_args(backend_name: str) -> list[str]:
    """The worker's SOURCE argument (``python -m pytest_edge.worker``): where a registered backend
    comes from, so the worker imports that module alone and reads no entry points; none for a variant."""
    from ..backends import backend_source

    source = backend_source(backend_name)
    return [source] if source else []


def _environment() -> dict[str, str]:
    """A spawned worker's environment now (with sys.path): a zygote started with another one is
    replaced, as its children inherit its own. pytest's per-test PYTEST_CURRENT_TEST aside."""
    env = local_worker_env()
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


class ForkedProcess:
    """A child of the zygote, seen from the host with the part of ``subprocess.Popen`` that
    BackendWorker uses: ``pid``, ``returncode``, ``poll``, ``wait``, ``kill``."""

    def __init__(self, zygote: "Zygote", pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None
        # How the zygote ended, when it took this process with it (said instead of "crashed").
        self.lost_with_zygote: str | None = None

    def _status(self, timeout_s: float) -> None:
        self.returncode = self.zygote.status(self.pid, timeout_s)
        if self.returncode is not None and not self.zygote.alive and self.zygote.end is not None:
            self.lost_with_zygote = self.zygote.end
            self.zygote.end_said = True

    def poll(self) -> int | None:
        if self.returncode is None:
            self._status(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._status(3600.0 if timeout is None else timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"forked {self.zygote.backend_name} worker {self.pid}", timeout or 0)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None and self.zygote.alive:  # a zygote that is gone took its children
            try:
                self.zygote.call(KillProcess(self.pid))
            except BackendError:
                pass


class Zygote:
    """The host's handle on one backend's zygote: started on first use, asked to fork, closed with
    the pool. A zygote that died is reported as having taken its children with it (SIGKILL)."""

    def __init__(self, backend_name: str, start_timeout_s: float) -> None:
        self.backend_name = backend_name
        self.start_timeout_s = start_timeout_s
        self.hello: ZygoteHello | None = None  # said once its runtime is imported
        self._process: subprocess.Popen | None = None
        self._socket: socket.socket | None = None
        # How a zygote that died ended ("its zygote (pid N) ended (signal SIGKILL)"), whether a
        # measurement's crash message said it already, and the notes of its restarts not yet taken.
        self.end: str | None = None
        self.end_said = False
        self.restart_notes: list[str] = []
        self._env: dict[str, str] = {}
        self.log_path = Path(tempfile.gettempdir()) / f"pytest-edge-{os.getpid()}-{backend_name}-zygote-{id(self)}.log"

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None and self._socket is not None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the zygote and wait until it has imported the runtime (BackendError if it cannot)."""
        if self.alive:
            return
        self._note_end()
        if self.end is not None and not self.end_said:
            self.restart_notes.append(
                f"{self.backend_name}: {self.end} between measurements (a kill from outside, the OOM killer) "
                "and was started again; each measuring process is forked fresh, so no figure lost anything")
        self.end, self.end_said = None, False
        self.close()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = self._env = _environment()
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "pytest_edge.worker", "--zygote", self.backend_name, str(child.fileno()),
                 *source_args(self.backend_name)],
                pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        child.close()
        self._socket = host
        try:
            self.hello = reply_as(ZygoteHello, "the zygote's start", self._receive(self.start_timeout_s, None))
        except BackendError:
            self.close()
            raise

    def fork(self, connection_fd: int, log_fd: int) -> ForkedProcess:
        """A fresh worker serving the protocol on ``connection_fd``, printing to ``log_fd``."""
        if self.alive and self._env != _environment():
            self.close()  # the environment changed since it started (a test's setenv): a child must see it
        self.start()
        return ForkedProcess(self, self.call(Fork(), [connection_fd, log_fd]))

    def _note_end(self) -> None:
        """Remember how the zygote ended, if its process is gone."""
        code = self._process.poll() if self._process is not None else None
        if code is not None and self.end is None:
            try:
                how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            except ValueError:
                how = f"signal {-code}"
            self.end = f"its zygote (pid {self._process.pid}) ended ({how})"

    def status(self, pid: int, timeout_s: float) -> int | None:
        """The child's exit code (negative: the signal that ended it), None while it runs; waits up
        to ``timeout_s`` for it to end."""
        try:
            if self.alive:
                return self.call(ProcessStatus(pid, timeout_s), timeout_s=timeout_s)
        except BackendError:
            pass
        self._note_end()
        return -signal.SIGKILL  # the zygote is gone: PR_SET_PDEATHSIG killed its children

    def call(self, request: Request, fds: list[int] | None = None, timeout_s: float = 0.0) -> Any:
        """Send one of the zygote's requests (with ``fds``); the value of its reply."""
        if ZYGOTE_REQUESTS.get(request.op) is not type(request):
            raise ProtocolError(f"{self.backend_name}: {request.op} is not a request to a zygote")
        if self._socket is None:
            raise BackendError(f"{self.backend_name}: its zygote is not running")
        try:
            socket.send_fds(self._socket, [_message(request_json(request))], fds or [])
        except OSError as exc:
            self._died(f"could not be reached ({exc})")
        return self._receive(timeout_s + 30.0, request)

    def _receive(self, timeout_s: float, request: Request | None) -> Any:
        """The value of the zygote's reply to ``request`` (None: its hello), or the BackendError
        its failure says: the one place the host reads what the zygote sends."""
        assert self._socket is not None
        self._socket.settimeout(timeout_s)
        try:
            data, _, flags, _ = self._socket.recvmsg(MESSAGE_BYTES)
        except socket.timeout:
            self._died(f"did not answer within {timeout_s:g} s")
        except OSError as exc:
            self._died(f"could not be reached ({exc})")
        if not data:
            self._died("ended")
        try:
            reply = None if flags & socket.MSG_TRUNC else json.loads(data)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not (reply.get("ok") is True and "value" in reply or reply.get("ok") is False
                                               and isinstance(reply.get("kind"), str)
                                               and isinstance(reply.get("message"), str)):
            self._died(f"sent {data[:200]!r}, not a reply")
        if reply["ok"]:
            return reply["value"]
        if request is None:
            raise BackendError(f"{self.backend_name}: its zygote (which forks the measuring processes) could not "
                               f"import the runtime: {reply['kind']}: {reply['message']}; "
                               "--edge-fork=off spawns them instead")
        raise BackendError(f"{self.backend_name}: its zygote could not {reply['message']}")

    def _died(self, how: str) -> None:
        tail = ""
        try:
            tail = self.log_path.read_text(errors="replace").strip()[-1500:]
        except OSError:
            pass
        self._note_end()
        self.close()
        raise BackendError(f"{self.backend_name}: its zygote {how}" + (f"; it printed:\n{tail}" if tail else ""))

    def close(self) -> None:
        """End the zygote (its children are killed with it) and remove its log."""
        if self._socket is not None:
            try:
                socket.send_fds(self._socket, [_message(request_json(Exit()))], [])
            except OSError:
                pass
            self._socket.close()
            self._socket = None
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        try:
            self.log_path.unlink()
        except OSError:
            pass


def _message(message: dict[str, Any]) -> bytes:
    """A message's JSON, refused (ProtocolError) over MESSAGE_BYTES: the peer reads no more."""
    data = json.dumps(message).encode()
    if len(data) > MESSAGE_BYTES:
        raise ProtocolError(f"a zygote message of {len(data)} bytes exceeds the limit of {MESSAGE_BYTES}")
    return data
