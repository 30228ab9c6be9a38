"""The pytest side of a backend worker: starts the worker process (local or on a device), sends
typed requests over a pipe with NumPy arrays, and restarts it after a crash, so a native crash
fails one test only."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendCrash, BackendError, DeviceUnreachable, DoesNotConvert
from ..core.external_data import external_files
from ..files import sha256_file
from . import frames, protocol
from .logs import CRASH_SIGNALS, exit_description, log_tail, new_log_path, remove_stale_logs  # noqa: F401 - its name here too
from .spare import local_worker_env
from .zygote import ForkedProcess, Zygote, source_args

if TYPE_CHECKING:
    from ..devices.backend_env import Environment
    from .server import WorkerServer
    from .spare import SpareWorker

class BackendWorker:
    """The pytest side of one backend's worker, local or on a device; restarts it after a crash.

    Local: a fresh interpreter with a socket pair. Device: the device's command (``ssh host python3
    -m pytest_edge.worker --stdio``) with frames over its stdin/stdout; artifacts travel by content
    into the device's cache, and the transport's own authentication is the security boundary.
    """

    def __init__(self, backend_name: str, *, isolated: bool = True, timeout_s: float = 600.0,
                 device: tuple[str, str] | None = None, environment: Environment | None = None) -> None:
        self.backend_name = backend_name
        self.device = device  # (name, command) of a device; None: this machine
        self.label = f"{backend_name}@{device[0]}" if device else backend_name
        # The backend's own environment (devices/backend_env.py): its Python runs the worker, never in
        # this process and never forked from this environment's zygote.
        self.environment = environment
        self.isolated = isolated or device is not None or environment is not None
        self.timeout_s = timeout_s
        self._process: subprocess.Popen | ForkedProcess | None = None
        # Set by WorkerPool.fresh: a local worker is forked by this backend's zygote, not spawned.
        self.zygote: Zygote | None = None
        self._reader: frames.Channel | None = None
        self._writer: frames.Channel | None = None
        self._server: WorkerServer | None = None
        self._starting = False
        self.hello: protocol.WorkerHello | None = None  # said at its start
        # edge_timeout bounds the start-up (importing a runtime, a device's connection) as well.
        self.start_timeout_s = timeout_s
        # Set when a worker that died between requests was replaced; ``restart_notes`` say how and
        # what was lost, until the session takes them into the running test's record.
        self.restarted = False
        self.restart_notes: list[str] = []
        # Load (and OpenSpeech) requests by key, replayed into a replacement process; keys loaded in this one.
        self._loads: dict[str, protocol.Load | protocol.OpenSpeech] = {}
        self._live: set[str] = set()
        self._sent: set[str] = set()  # artifacts the device's cache holds (by content name)
        # One log per worker: a measurement's fresh worker must not truncate or remove the log of the
        # backend's shared worker (whose crash message quotes it).
        self.log_path = new_log_path(self.label)
        # Counted mode: the local worker runs under this command (valgrind ...), with these
        # variables added to its environment. It must be spawned so: a fork is not under Valgrind.
        self.command_prefix: list[str] = []
        self.extra_env: dict[str, str] = {}

    @property
    def alive(self) -> bool:
        return self._server is not None or (self._process is not None and self._process.poll() is None)

    def launch(self, spare: SpareWorker | None = None) -> None:
        """Start the worker process without waiting for it to import its runtime, so several
        workers (or collection) can go on meanwhile; the first request waits for it. ``spare``: an
        interpreter started during collection (.spare), adopted where this worker would be a plain
        one of this machine's Python (no device, environment, zygote or wrapper)."""
        if self.alive:
            return
        if not self.isolated:
            from .server import WorkerServer  # in this process (--edge-isolation=none)

            self._server = WorkerServer(self.backend_name)
            return
        plain = self.device is None and self.zygote is None and self.environment is None \
            and not self.command_prefix and not self.extra_env
        adopted = spare.adopt() if spare is not None and plain else None
        if adopted is not None:
            self._process, fd, self.log_path = adopted
            self._reader = self._writer = frames.Channel(fd)
            source = (source_args(self.backend_name) or [None])[0]
            try:  # read at once: the spare has imported what a worker needs, and waits for it
                self._writer.send_bytes(frames.encode(protocol.request_json(protocol.Start(self.backend_name, source))))
            except OSError:
                pass  # it ended: the handshake reads its end and quotes its log
            self._starting = True
            return
        # Runtimes print to fd 1/2 natively: keep that out of pytest's capture, in a log we can quote.
        # The log starts empty for each process, so a crash quotes this process's output only.
        with open(self.log_path, "wb") as log:
            if self.device is not None:
                try:
                    self._process = subprocess.Popen(shlex.split(self.device[1]), stdin=subprocess.PIPE,
                                                     stdout=subprocess.PIPE, stderr=log)
                except (OSError, ValueError) as exc:  # no such executable (adb not installed), bad quoting
                    raise DeviceUnreachable(f"device {self.device[0]} cannot be reached: its command "
                                            f"{self.device[1]!r} cannot be started: {exc}") from None
                assert self._process.stdin is not None and self._process.stdout is not None
                self._reader = frames.Channel(os.dup(self._process.stdout.fileno()))
                self._writer = frames.Channel(os.dup(self._process.stdin.fileno()))
                self._process.stdin.close()
                self._process.stdout.close()
                self._sent = set()
                try:
                    self._writer.send_bytes(frames.encode(protocol.request_json(protocol.Start(self.backend_name))))
                except OSError:  # BrokenPipeError: the command ended already (ssh to a host that refuses)
                    pass  # the handshake reads its end and says the device cannot be reached, with its output
            else:
                # A fresh interpreter running this module, not multiprocessing's spawn: spawn
                # re-imports the parent's __main__ (breaks under `python -`, notebooks, scripts).
                parent, child = socket.socketpair()
                if self.zygote is not None:
                    self._process = self.zygote.fork(child.fileno(), log.fileno())
                else:
                    env = {**local_worker_env(), **self.extra_env}
                    python = sys.executable
                    if self.environment is not None:  # its own packages and this pytest-edge's source only
                        env, python = {**self.environment.worker_env(), **self.extra_env}, str(self.environment.python)
                    self._process = subprocess.Popen(
                        [*self.command_prefix, python, "-m", "pytest_edge.worker", self.backend_name,
                         str(child.fileno()), *source_args(self.backend_name)],
                        pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
                child.close()
                self._reader = self._writer = frames.Channel(parent.detach())
        self._starting = True

    @property
    def starting(self) -> bool:
        """Launched, and its hello not read yet."""
        return self._starting

    def wait_ready(self) -> None:
        """Wait until a launched worker has imported its runtime and said hello."""
        self._handshake(None)

    def _handshake(self, artifact: str | None) -> None:
        if self._starting:
            self._starting = False
            self._receive("start", artifact, self.start_timeout_s)

    def call(self, op: str, *args: Any, artifact: str | None = None) -> Any:
        """``request`` for the operation ``op`` with its fields in order (a shorthand)."""
        return self.request(protocol.REQUESTS[op](*args), artifact=artifact)

    def request(self, request: protocol.Request, artifact: str | None = None) -> Any:
        # A process that ended before its hello failed to start (an unreachable device): the handshake
        # below reads why; only one that had said hello died between requests and is restarted.
        if self._process is not None and self._process.poll() is not None and not self._starting:
            # It died between requests (a late native crash, the OOM killer, a kill): nothing of
            # this request ran yet, so start a new one and load again what it held; never silently.
            how = exit_description(self._process.returncode)
            if isinstance(self._process, ForkedProcess) and self._process.lost_with_zygote:
                how += f": {self._process.lost_with_zygote} and took it with it"
            held = ", ".join(sorted({Path(self._loads[k].path).name for k in self._live if k in self._loads})) \
                or "no model"
            self._reset()
            self.restarted = True
            self.restart_notes.append(
                f"{self.label}: its worker process died ({how}) between requests (the OOM killer, a kill from "
                f"outside, or a late native crash) and was restarted; lost with it: {held}, loaded again in the "
                "new process (its load and first-inference figures are the new process's)")
        if not self.alive and not self._starting:
            self.launch()
        key = getattr(request, "key", None)
        if isinstance(request, (protocol.Load, protocol.OpenSpeech)):
            self._loads[request.key] = request
        elif key in self._loads and key not in self._live:
            self.request(self._loads[key], artifact=artifact)
        if self._server is not None:
            try:
                return self._server.answer(request)
            except DoesNotConvert:
                raise
            except Exception as exc:
                raise BackendError(f"{self.label} failed to {request.op} {artifact}: "
                                   f"{type(exc).__name__}: {exc}") from exc
        self._handshake(artifact)
        wire = request
        if isinstance(request, protocol.Load) and self.device is not None:
            wire = self._ship(request, artifact)
        reply = self._exchange(wire, artifact)
        if isinstance(request, (protocol.Load, protocol.OpenSpeech)):
            self._live.add(request.key)
        return reply

    def _ship(self, load: protocol.Load, artifact: str | None) -> protocol.Load:
        """The Load a device gets: the artifact and its external data files by content name; with
        external files, the artifact's own name among them (the bundle holds it by that name)."""
        path = Path(load.path)
        external = {location: self._upload(data, artifact, ".data")
                    for location, data in external_files(path, self.label).items()}
        model = self._upload(path, artifact)
        if external:  # the model under its own name too: its runtime may find the rest by it (a split GGUF)
            external.setdefault(path.name, model)
        return replace(load, path=model, external=external)

    def _upload(self, path: Path, artifact: str | None, suffix: str | None = None) -> str:
        """The file's content name in the device's cache, sending it there if it is not yet."""
        name = sha256_file(path) + (suffix or path.suffix)  # hashed once per file version, read only to send it
        if name not in self._sent and not self._exchange(protocol.Has(name), artifact):
            self._exchange(protocol.Put(name, np.frombuffer(path.read_bytes(), dtype=np.uint8)), artifact)
        self._sent.add(name)
        return name

    def _exchange(self, request: protocol.Request, artifact: str | None) -> Any:
        assert self._writer is not None
        try:
            self._writer.send_bytes(frames.encode(protocol.request_json(request)))
        except (BrokenPipeError, OSError):
            self._crashed(request.op, artifact)
        return self._receive(request.op, artifact)

    def _receive(self, op: str, artifact: str | None, timeout_s: float | None = None) -> Any:
        assert self._reader is not None
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        doing = f"to {op} {artifact}" if artifact else f"to {op}"
        try:
            frame = frames.read_frame(self._reader.fileno(), time.monotonic() + timeout_s)
        except frames.FrameTimeout:
            self._kill()
            error = DeviceUnreachable if self.device is not None and op == "start" else BackendCrash
            raise error(f"{self.label} did not answer within {timeout_s:g} s (edge_timeout) "
                        f"while trying {doing}; the worker was killed") from None
        except protocol.ProtocolError as exc:
            # A peer that sent something else than frames is not one we can go on talking to.
            self._kill()
            what = f"device {self.device[0]} ({self.device[1]})" if self.device else self.label
            error = DeviceUnreachable if self.device is not None and op == "start" else protocol.ProtocolError
            raise error(f"{what} while trying {doing}: {exc}") from None
        except (EOFError, OSError, ConnectionResetError):
            self._crashed(op, artifact)
        reply = frames.decode(frame)
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            raise protocol.ProtocolError(f"{self.label}: malformed reply to {op}")
        if reply["ok"]:
            value = reply.get("value")
            if op == "start":
                self._check_hello(value)
            return value
        where = f" {artifact}" if artifact else ""
        if reply.get("kind") == DoesNotConvert.__name__:  # its own outcome, not an error (errors.DoesNotConvert)
            # Said once: the backend's message already names it (``ncnn: ncnn has no layer ...``).
            message = str(reply.get("message")).removeprefix(f"{self.label.split('@')[0]}: ")
            raise DoesNotConvert(f"{self.label}: {message}")
        raise BackendError(f"{self.label} failed to {op}{where}: {reply.get('kind')}: {reply.get('message')}")

    def _check_hello(self, hello: Any) -> None:
        version = hello.get("protocol") if isinstance(hello, dict) else None
        if version != protocol.PROTOCOL_VERSION:
            self._kill()
            raise protocol.ProtocolError(f"{self.label}: the worker speaks protocol {version}, this side "
                                         f"{protocol.PROTOCOL_VERSION}; install the same pytest-edge on both sides")
        self.hello = protocol.reply_as(protocol.WorkerHello, "start", hello)

    def _log_tail(self, lines: int = 8) -> str:
        return log_tail(self.log_path, "device" if self.device else "runtime", lines)

    def _crashed(self, op: str, artifact: str | None) -> None:
        process = self._process
        if process is not None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        how = exit_description(process.returncode if process else None)
        tail = self._log_tail()
        printed = "\n".join(line.strip() for line in self._log_tail(3).partition(":\n")[2].splitlines())
        self._reset()
        if self.device is not None and op == "start":
            if process is not None and process.returncode is not None and -process.returncode in CRASH_SIGNALS:
                # The device answered and its code crashed: a damaged runtime, Python or library there
                # (a flipped byte in an emulated device's cache), not a device out of reach: never a skip.
                raise BackendCrash(f"device {self.device[0]}: the worker crashed ({how}) before it said hello "
                                   f"({self.device[1]}): the Python or a runtime library there is damaged or built "
                                   "for another CPU; on an emulated device, pytest-edge device prepare --verify "
                                   f"checks and rebuilds it{tail}")
            raise DeviceUnreachable(f"device {self.device[0]} cannot be reached: its command ended ({how}) before "
                                    f"the worker said hello ({self.device[1]}){tail}")
        if isinstance(process, ForkedProcess) and process.lost_with_zygote:
            raise BackendCrash(f"{self.backend_name}: {process.lost_with_zygote} while its forked worker was trying "
                               f"to {op} {artifact or ''}, and took that worker with it; a new zygote is started "
                               f"for the next measurement{tail}", None, printed)
        if self.device is not None:
            raise BackendCrash(f"device {self.device[0]} dropped the connection ({how}) while {self.label} was "
                               f"trying to {op} {artifact or ''}; it is reconnected for the next test{tail}", how, printed)
        raise BackendCrash(f"the {self.backend_name} runtime crashed ({how}) while trying to {op} "
                           f"{artifact or ''}; its worker will be restarted for the next test{tail}", how, printed)

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=5)
        self._reset()

    def _reset(self) -> None:
        for conn in {id(c): c for c in (self._reader, self._writer) if c is not None}.values():
            conn.close()
        self._reader = self._writer = None
        self._process = None
        self._server = None
        self._starting = False
        self._live = set()

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.send_bytes(frames.encode(protocol.request_json(protocol.Exit())))
            except OSError:
                pass
            if self._process is not None:
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self._kill()
        try:
            self.log_path.unlink()
        except OSError:
            pass

