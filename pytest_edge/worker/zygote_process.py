"""The zygote process itself (worker/zygote.py is the host's side): it imports one backend's
runtime, says hello, then forks a fresh measuring worker per request, reaps its children and
reports their exit status, until the host says exit or goes away.

``python -m pytest_edge.worker --zygote BACKEND FD`` runs it on the socket FD.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any

from .. import codec
from .protocol import (ZYGOTE_REQUESTS, Exit, Fork, KillProcess, ProcessStatus, ProtocolError, Request, ZygoteHello,
                       failure, ok, request_from)
from .resident import populate, resident_file_pages
from .zygote import MESSAGE_BYTES, _message, thread_count

def _child(control: socket.socket, backend_name: str, connection_fd: int, log_fd: int, zygote_pid: int,
           resident: list[tuple[int, int]], source: str | None = None) -> None:
    """In the forked child: a worker of its own, then exit without running the zygote's code."""
    from . import process, server
    from .frames import Channel

    code = 0
    try:
        control.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        process.die_with_parent(zygote_pid)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        populate(resident)
        server.PROCESS_START = "forked"
        connection = Channel(connection_fd)
        process.serve(connection, connection, backend_name, source=source)
    except BaseException:  # noqa: BLE001 - printed to the worker's log, which a crash message quotes
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(ended: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ended[pid] = os.waitstatus_to_exitcode(status)


def serve_zygote(control: socket.socket, backend_name: str, source: str | None = None) -> None:
    """Import the runtime, say hello, then fork a worker per request until the host says exit or
    goes away; the children still running then are killed."""
    from ..backends import get_backend
    from .process import die_with_parent

    die_with_parent()
    start = time.perf_counter()
    try:
        get_backend(backend_name, source).import_runtime()
    except Exception as exc:  # noqa: BLE001 - reported to the host, which raises it
        _reply(control, failure(type(exc).__name__, str(exc)))
        return
    _reply(control, ok(codec.to_json(ZygoteHello(os.getpid(), time.perf_counter() - start, thread_count()))))
    running: set[int] = set()
    ended: dict[int, int] = {}
    try:
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(control, MESSAGE_BYTES, 2)
            except OSError:
                return
            if not data:
                return
            _reap(ended)
            request: Request | None = None
            try:
                request = _request(data, flags)
                if isinstance(request, Exit):
                    return
                if isinstance(request, Fork):
                    if len(fds) != 2:
                        raise ProtocolError(f"fork: {len(fds)} file descriptors, not 2")
                    sys.stdout.flush()
                    sys.stderr.flush()
                    me, resident = os.getpid(), resident_file_pages()
                    pid = os.fork()
                    if pid == 0:
                        _child(control, backend_name, fds[0], fds[1], me, resident, source)
                    running.add(pid)
                    ended.pop(pid, None)  # a pid the kernel gave again: the old child's status is not this one's
                    reply = ok(pid)
                elif isinstance(request, ProcessStatus):
                    pid = request.pid
                    deadline = time.monotonic() + request.timeout_s
                    while pid in running and pid not in ended and time.monotonic() < deadline:
                        time.sleep(0.002)
                        _reap(ended)
                    # Not a child of this zygote: nothing of it runs (said as the kill it would have had).
                    reply = ok(ended[pid] if pid in ended else None if pid in running else -signal.SIGKILL)
                else:
                    assert isinstance(request, KillProcess)
                    if request.pid in running and request.pid not in ended:
                        os.kill(request.pid, signal.SIGKILL)
                    reply = ok(None)
            except ProtocolError as exc:
                reply = failure(type(exc).__name__, str(exc))
            except Exception as exc:  # noqa: BLE001 - a request it could not carry out: said, and served on
                doing = request.op if request is not None else f"read {data[:100]!r}"
                reply = failure(type(exc).__name__, f"{doing}: {type(exc).__name__}: {exc}")
            finally:
                for fd in fds:  # the child's copies are its own; none is kept here, whatever the request
                    os.close(fd)
            _reply(control, reply)
    finally:
        for pid in running - set(ended):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


def _request(data: bytes, flags: int) -> Request:
    """One of the zygote's requests; a ProtocolError saying what the zygote could not do otherwise."""
    if flags & socket.MSG_TRUNC:
        raise ProtocolError(f"read a request of more than {MESSAGE_BYTES} bytes")
    try:
        message = json.loads(data)
    except ValueError:
        raise ProtocolError(f"read {data[:100]!r}, not JSON") from None
    if isinstance(message, dict) and isinstance(message.get("op"), str) and message["op"] not in ZYGOTE_REQUESTS:
        raise ProtocolError(f"do {message['op']!r}")
    try:
        return request_from(message, ZYGOTE_REQUESTS)
    except ProtocolError as exc:
        raise ProtocolError(f"read a request ({exc})") from None


def _reply(control: socket.socket, reply: dict[str, Any]) -> None:
    """Send a reply envelope; a failure's message is shortened to fit MESSAGE_BYTES."""
    try:
        data = _message(reply)
    except ProtocolError:
        data = _message(failure(reply["kind"], reply["message"][:MESSAGE_BYTES // 8] + " ..."))
    control.send(data)
