"""A worker process's life around its :class:`~pytest_edge.worker.server.WorkerServer`: the loop that
reads typed requests from frames and writes the replies (its hello first), dying with the process
that started it, and a device's worker over stdin/stdout. ``python -m pytest_edge.worker`` runs
these (worker/__main__.py); a zygote's forked child runs :func:`serve` (worker/zygote_process.py).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np

from . import frames, protocol
from .server import WorkerServer


def serve(reader: frames.Channel, writer: frames.Channel, backend_name: str | None, cache_dir: Path | None = None,
          source: str | None = None) -> None:
    """The worker's loop: typed requests in, replies out, as frames of the pickle-free codec. A
    device worker and a spare (``backend_name`` None) learn their backend from the first request,
    Start (a spare's names where the backend comes from, as a local worker's SOURCE does)."""
    try:
        if backend_name is None:
            start = protocol.request_from(frames.decode(reader.recv_bytes(frames.MAX_FRAME_BYTES)))
            if not isinstance(start, protocol.Start):
                raise protocol.ProtocolError(f"the first request must be start, not {start.op}")
            backend_name, source = start.backend, source or start.source
        server = WorkerServer(backend_name, cache_dir, source)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        writer.send_bytes(frames.encode(protocol.failure(type(exc).__name__, str(exc))))
        return
    # A device says what it is: its machine, and the NumPy its worker runs with.
    # An emulated one (qemu:aarch64) says so too: its launcher names the emulator, and the worker
    # confirms the ISA it runs on (platform.machine(), as the runtimes see it).
    machine = None
    if cache_dir is not None:  # a device's worker: a local one does not import the device modules
        from ..devices.qemu import EMULATED_ENV
        from ..measurement.machine import machine_info

        machine = machine_info().on_device(np.__version__, os.environ.get(EMULATED_ENV) or None)
    runtime = protocol.RuntimeName(server.backend.distribution, server.backend.runtime_version())
    writer.send_bytes(frames.encode(protocol.hello(backend_name, machine, runtime)))
    while True:
        try:
            frame = reader.recv_bytes(frames.MAX_FRAME_BYTES)
        except (EOFError, OSError):
            return
        try:
            request = protocol.request_from(frames.decode(frame))
            if isinstance(request, protocol.Exit):
                return
            reply = protocol.ok(server.answer(request))
        except Exception as exc:  # noqa: BLE001 - every runtime error goes back as a message
            reply = protocol.failure(type(exc).__name__, str(exc))
        writer.send_bytes(frames.encode(reply))


def die_with_parent(parent: int | None = None) -> None:
    """Linux: the kernel kills this worker when the process that started it dies, so a measuring
    worker orphaned by a SIGKILLed pytest (or a dropped ssh) does not keep a core busy until its
    timed window ends. Elsewhere a no-op (the worker ends at the next read of a closed pipe).
    ``parent``: the pid it must outlive, where the caller knew it before this call (a forked
    child: its zygote, which may die between the fork and here; PR_SET_PDEATHSIG is not inherited
    over fork)."""
    parent = os.getppid() if parent is None else parent
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def serve_stdio() -> None:
    """``python -m pytest_edge.worker --stdio``: a device worker speaking over stdin/stdout, started
    by a device's command (ssh, adb shell, ...). The protocol gets a private copy of fd 1 and fd 1
    becomes stderr, so what runtimes print natively cannot corrupt the frames."""
    out = os.dup(1)
    os.dup2(2, 1)
    cache = Path(os.environ.get("PYTEST_EDGE_CACHE") or Path.home() / ".cache" / "pytest-edge" / "artifacts")
    serve(frames.Channel(os.dup(0)), frames.Channel(out), None, cache)
