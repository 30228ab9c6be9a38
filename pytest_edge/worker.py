"""Backend worker: each backend runs in its own process, so a native crash fails one test only.

The pytest process talks to the worker over a pipe with NumPy arrays. Loading, running and every
timing and memory measurement happen inside the worker, never across the pipe. With isolation
off (``--edge-isolation=none``) the same server runs in-process, for pdb.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from contextlib import contextmanager
from dataclasses import fields, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from . import measure, protocol
from .backends import LoadedModel, get_backend
from .errors import BackendCrash, BackendError, DeviceUnreachable
from .external_data import external_files, location_problem
from .golden import atomic_write, sha256_file
from .marker import MAX_RUNS  # timed runs a process keeps, whatever min_time asks (its sample buffer)
from .qemu_device import EMULATED_ENV

MEASURE_LOCK = Path(tempfile.gettempdir()) / "pytest-edge-measure.lock"
# What a device's artifact cache holds: files named by their content.
CONTENT_NAME = re.compile(r"[0-9a-f]{64}\.[A-Za-z0-9]{1,16}")


class WorkerServer:
    """Holds loaded models of one backend and answers requests. Runs in the worker process."""

    def __init__(self, backend_name: str, cache_dir: Path | None = None) -> None:
        self.backend = get_backend(backend_name)
        # On a device, artifacts arrive by content into this folder and Load names them there;
        # the worker opens no other path (cache_dir None: a local worker, given local paths).
        self.cache_dir = cache_dir
        self.backend.import_runtime()
        # Timings go to a buffer allocated (and its pages touched) before any model is loaded, so
        # it sits in the memory baseline: a growing list of samples would count as the model's
        # memory (50 000 runs of a list of ints are ~2 MB).
        self._samples = array("q", bytes(8 * MAX_RUNS))
        self.models: dict[str, LoadedModel] = {}
        self.first_inference_ms: dict[str, float | None] = {}
        self.load_peak_mb: dict[str, float | None] = {}
        self.load_base_mb: dict[str, float | None] = {}
        self.loads = 0

    def handle(self, request: protocol.Request) -> Any:
        return getattr(self, f"op_{request.op}")(**{f.name: getattr(request, f.name) for f in fields(request)})

    def op_load(self, key: str, path: str, threads: int | None, shapes: dict,
                with_coverage: bool = True, external: dict | None = None) -> dict[str, Any]:
        """Load and describe a model. A measuring worker skips coverage: reading a .pte's program in
        Python would leave its allocations in the RSS that the memory figures start from."""
        if self.cache_dir is not None:
            path = str(self._cached(path))
            if not Path(path).is_file():
                raise FileNotFoundError(f"{path}: not in this device's artifact cache")
            if external:
                path = str(self._bundle(Path(path), external))
        reset = measure.reset_hwm()
        base = measure.rss_mb()
        start = time.perf_counter_ns()
        model = self.backend.load(Path(path), threads=threads, shapes={k: tuple(v) for k, v in shapes.items()})
        load_ms = (time.perf_counter_ns() - start) / 1e6
        # A peak over the baseline means something only if the high-water mark was reset, or this
        # is the first model of a fresh process.
        trusted = reset or self.loads == 0
        self.loads += 1
        self.models[key] = model
        self.first_inference_ms[key] = None
        self.load_base_mb[key] = base if trusted else None
        self.load_peak_mb[key] = measure.hwm_mb() if trusted else None
        coverage = model.coverage() if with_coverage else None
        return {
            "inputs": [s.to_json() for s in model.inputs],
            "outputs": [s.to_json() for s in model.outputs],
            "runtime": {"name": self.backend.distribution, "version": self.backend.runtime_version(),
                        "delegates": model.delegates()},
            "coverage": coverage.to_json() if coverage else None,
            "load_ms": load_ms,
            "precision": model.precision(),
            "threads_applied": bool(threads) and self.backend.threads_supported,
        }

    def _run_timed(self, key: str, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        model = self.models[key]
        start = time.perf_counter_ns()
        outputs = model.run(feeds)
        if self.first_inference_ms[key] is None:
            self.first_inference_ms[key] = (time.perf_counter_ns() - start) / 1e6
        return outputs

    def op_run(self, key: str, feeds: list[np.ndarray], reset: bool = True) -> list[np.ndarray]:
        if reset:
            self.models[key].reset()
        return self._run_timed(key, feeds)

    def op_measure(self, key: str, feeds: list[np.ndarray], warmup: int, runs: int,
                   min_time_s: float = 0.0) -> dict[str, Any]:
        """``warmup`` discarded runs, then timed runs until there are at least ``runs`` of them and
        they took at least ``min_time_s`` together (LiteRT benchmark_model's --min_secs), so a
        20 us model is timed thousands of times and a busy window is long enough to be judged."""
        model = self.models[key]
        reset = measure.reset_hwm()
        if self.first_inference_ms[key] is None:
            self._run_timed(key, feeds)
        infer = model.bind(feeds)
        load = measure.MachineLoad()
        for _ in range(warmup):
            infer()
        if runs > MAX_RUNS:
            raise ValueError(f"runs={runs} is more than the {MAX_RUNS} timed runs a process keeps; use edge_min_time "
                             "to time longer")
        buffer = self._samples
        clock = time.perf_counter_ns
        probe = measure.machine_probe_ns
        probes = [probe() for _ in range(measure.PROBE_AROUND)]
        probe_after = [0] * len(probes)  # timed runs before each probe: where it lies in the window
        deadline = clock() + int(min_time_s * 1e9)
        next_probe = clock() + measure.PROBE_EVERY_NS
        count = 0
        while count < runs or (clock() < deadline and count < len(buffer)):
            start = clock()
            infer()
            end = clock()
            buffer[count] = end - start
            count += 1
            if end > next_probe:
                probes.append(probe())
                probe_after.append(count)
                next_probe = clock() + measure.PROBE_EVERY_NS
        probes += [probe() for _ in range(measure.PROBE_AROUND)]
        probe_after += [count] * measure.PROBE_AROUND
        samples = buffer[:count]
        other_cores = load.other_cores()
        base = self.load_base_mb[key]
        peak = steady = None
        if base is not None and (reset or self.loads == 1):
            run_peak = measure.hwm_mb()
            peaks = [p for p in (self.load_peak_mb[key], run_peak) if p is not None]
            peak = max(peaks) - base if peaks else None
            rss = measure.rss_mb()
            steady = rss - base if rss is not None else None
        return {
            "hwm_reset": reset,
            "first_inference_ms": self.first_inference_ms[key],
            "latency_ms": measure.latency_stats(samples),
            "drift": measure.drift(samples),
            "probe_drift": measure.probe_drift(samples, probe_after, probes),
            "warmup_runs": warmup, "measured_runs": len(samples),
            "peak_memory_mb": peak, "steady_memory_mb": steady,
            "other_cores_busy": other_cores,
            "probe_us": float(np.median(probes)) / 1e3,
            "samples_ns": np.asarray(samples, dtype=np.int64),
        }

    def op_intermediates(self, key: str, feeds: list[np.ndarray]) -> dict[str, Any] | None:
        return self.models[key].intermediates(feeds)

    def op_ping(self) -> int:
        return os.getpid()

    def _cached(self, name: str) -> Path:
        if self.cache_dir is None or not CONTENT_NAME.fullmatch(name):
            raise PermissionError(f"{name!r} is not an artifact name of this device's cache (<sha256><suffix>)")
        return self.cache_dir / name

    def _bundle(self, model: Path, external: dict) -> Path:
        """A folder of the cache where the model and its external data files sit under the names
        the model expects (links to their content-named copies): the runtime finds them beside it."""
        assert self.cache_dir is not None
        digest = hashlib.sha256(json.dumps([model.name, sorted(external.items())]).encode()).hexdigest()
        folder = self.cache_dir / "bundles" / digest[:32]
        files = {model.name: model}  # its content name: no location of a real model is 64 hex digits
        for location, name in external.items():
            problem = location_problem(location)
            if problem:
                raise PermissionError(f"external data location {location!r} {problem}: refused")
            source = self._cached(name)
            if not source.is_file():
                raise FileNotFoundError(f"external data {location} ({name}): not in this device's artifact cache")
            files[location] = source
        for relative, source in files.items():
            target = folder / relative
            if target.is_file():
                continue  # same bundle name, same contents
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                os.link(source, temporary)
            except OSError:  # a cache on a file system without hard links
                shutil.copyfile(source, temporary)
            os.replace(temporary, target)
        return folder / model.name

    def op_has(self, name: str) -> bool:
        return self._cached(name).is_file()

    def op_put(self, name: str, data: np.ndarray) -> bool:
        target = self._cached(name)
        payload = np.ascontiguousarray(data, dtype=np.uint8).tobytes()
        digest = hashlib.sha256(payload).hexdigest()
        if digest != name[:64]:
            raise ValueError(f"artifact {name} arrived with sha256 {digest}")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, payload)
        return True


def _serve(reader: Connection, writer: Connection, backend_name: str | None, cache_dir: Path | None = None) -> None:
    """The worker's loop: typed requests in, replies out, as frames of the pickle-free codec. A
    device worker (``backend_name`` None) learns its backend from the first request, Start."""
    try:
        if backend_name is None:
            start = protocol.request_from(protocol.decode(reader.recv_bytes(protocol.MAX_FRAME_BYTES)))
            if not isinstance(start, protocol.Start):
                raise protocol.ProtocolError(f"the first request must be start, not {start.op}")
            backend_name = start.backend
        server = WorkerServer(backend_name, cache_dir)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        writer.send_bytes(protocol.encode(protocol.failure(type(exc).__name__, str(exc))))
        return
    # A device says what it is: its machine, and the NumPy its worker runs with.
    # An emulated one (qemu:aarch64) says so too: its launcher names the emulator, and the worker
    # confirms the ISA it runs on (platform.machine(), as the runtimes see it).
    machine = {**measure.machine_info(), "numpy": np.__version__,
               **({"emulated": os.environ[EMULATED_ENV]} if os.environ.get(EMULATED_ENV) else {})} \
        if cache_dir is not None else None
    runtime = {"name": server.backend.distribution, "version": server.backend.runtime_version()}
    writer.send_bytes(protocol.encode(protocol.hello(backend_name, machine, runtime)))
    while True:
        try:
            frame = reader.recv_bytes(protocol.MAX_FRAME_BYTES)
        except (EOFError, OSError):
            return
        try:
            request = protocol.request_from(protocol.decode(frame))
            if isinstance(request, protocol.Exit):
                return
            reply = protocol.ok(server.handle(request))
        except Exception as exc:  # noqa: BLE001 - every runtime error goes back as a message
            reply = protocol.failure(type(exc).__name__, str(exc))
        writer.send_bytes(protocol.encode(reply))


def serve_stdio() -> None:
    """``python -m pytest_edge.worker --stdio``: a device worker speaking over stdin/stdout, started
    by a device's command (ssh, adb shell, ...). The protocol gets a private copy of fd 1 and fd 1
    becomes stderr, so what runtimes print natively cannot corrupt the frames."""
    out = os.dup(1)
    os.dup2(2, 1)
    cache = Path(os.environ.get("PYTEST_EDGE_CACHE") or Path.home() / ".cache" / "pytest-edge" / "artifacts")
    _serve(Connection(os.dup(0), writable=False), Connection(out, readable=False), None, cache)


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


class BackendWorker:
    """The pytest side of one backend's worker, local or on a device; restarts it after a crash.

    Local: a fresh interpreter with a socket pair. Device: the device's command (``ssh host python3
    -m pytest_edge.worker --stdio``) with frames over its stdin/stdout; artifacts travel by content
    into the device's cache, and the transport's own authentication is the security boundary.
    """

    def __init__(self, backend_name: str, *, isolated: bool = True, timeout_s: float = 600.0,
                 device: tuple[str, str] | None = None) -> None:
        self.backend_name = backend_name
        self.device = device  # (name, command) of a device; None: this machine
        self.label = f"{backend_name}@{device[0]}" if device else backend_name
        self.isolated = isolated or device is not None
        self.timeout_s = timeout_s
        self._process: subprocess.Popen | None = None
        self._reader: Connection | None = None
        self._writer: Connection | None = None
        self._server: WorkerServer | None = None
        self._starting = False
        self.hello: dict[str, Any] = {}
        # edge_timeout bounds the start-up (importing a runtime, a device's connection) as well.
        self.start_timeout_s = timeout_s
        # Set when a worker that died between requests was replaced; ``restart_notes`` say how and
        # what was lost, until the session takes them into the running test's record.
        self.restarted = False
        self.restart_notes: list[str] = []
        # Load requests by model key, replayed into a replacement process; keys loaded in this one.
        self._loads: dict[str, protocol.Load] = {}
        self._live: set[str] = set()
        self._sent: set[str] = set()  # artifacts the device's cache holds (by content name)
        self.log_path = Path(tempfile.gettempdir()) / f"pytest-edge-{os.getpid()}-{self.label}.log"

    @property
    def alive(self) -> bool:
        return self._server is not None or (self._process is not None and self._process.poll() is None)

    def start(self) -> None:
        self.launch()
        self._handshake(None)

    def launch(self) -> None:
        """Start the worker process without waiting for it to import its runtime, so several
        workers (or collection) can go on meanwhile; the first request waits for it."""
        if self.alive:
            return
        if not self.isolated:
            self._server = WorkerServer(self.backend_name)
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
                self._reader = Connection(os.dup(self._process.stdout.fileno()), writable=False)
                self._writer = Connection(os.dup(self._process.stdin.fileno()), readable=False)
                self._process.stdin.close()
                self._process.stdout.close()
                self._sent = set()
                self._writer.send_bytes(protocol.encode(protocol.request_json(protocol.Start(self.backend_name))))
            else:
                # A fresh interpreter running this module, not multiprocessing's spawn: spawn
                # re-imports the parent's __main__ (breaks under `python -`, notebooks, scripts).
                parent, child = socket.socketpair()
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "pytest_edge.worker", self.backend_name, str(child.fileno())],
                    pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
                child.close()
                self._reader = self._writer = Connection(parent.detach())
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
        if self._process is not None and self._process.poll() is not None:
            # It died between requests (a late native crash, the OOM killer, a kill): nothing of
            # this request ran yet, so start a new one and load again what it held; never silently.
            how = _signal_name(self._process.returncode)
            held = ", ".join(sorted({Path(self._loads[k].path).name for k in self._live if k in self._loads})) \
                or "no model"
            self._reset()
            self.restarted = True
            self.restart_notes.append(
                f"{self.label}: its worker process died ({how}) between requests (the OOM killer, a kill from "
                f"outside, or a late native crash) and was restarted; lost with it: {held}, loaded again in the "
                "new process (its load and first-inference figures are the new process's)")
        if not self.alive:
            self.launch()
        key = getattr(request, "key", None)
        if isinstance(request, protocol.Load):
            self._loads[request.key] = request
        elif key in self._loads and key not in self._live:
            self.request(self._loads[key], artifact=artifact)
        if self._server is not None:
            try:
                return self._server.handle(request)
            except Exception as exc:
                raise BackendError(f"{self.label} failed to {request.op} {artifact}: "
                                   f"{type(exc).__name__}: {exc}") from exc
        self._handshake(artifact)
        wire = request
        if isinstance(request, protocol.Load) and self.device is not None:
            wire = self._ship(request, artifact)
        reply = self._exchange(wire, artifact)
        if isinstance(request, protocol.Load):
            self._live.add(request.key)
        return reply

    def _ship(self, load: protocol.Load, artifact: str | None) -> protocol.Load:
        """The Load a device gets: the artifact and its external data files by content name."""
        path = Path(load.path)
        external = {location: self._upload(data, artifact, ".data")
                    for location, data in external_files(path, self.label).items()}
        return replace(load, path=self._upload(path, artifact), external=external)

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
            self._writer.send_bytes(protocol.encode(protocol.request_json(request)))
        except (BrokenPipeError, OSError):
            self._crashed(request.op, artifact)
        return self._receive(request.op, artifact)

    def _receive(self, op: str, artifact: str | None, timeout_s: float | None = None) -> Any:
        assert self._reader is not None
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        doing = f"to {op} {artifact}" if artifact else f"to {op}"
        try:
            frame = protocol.read_frame(self._reader.fileno(), time.monotonic() + timeout_s)
        except protocol.FrameTimeout:
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
        reply = protocol.decode(frame)
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            raise protocol.ProtocolError(f"{self.label}: malformed reply to {op}")
        if reply["ok"]:
            value = reply.get("value")
            if op == "start":
                self._check_hello(value)
            return value
        where = f" {artifact}" if artifact else ""
        raise BackendError(f"{self.label} failed to {op}{where}: {reply.get('kind')}: {reply.get('message')}")

    def _check_hello(self, hello: Any) -> None:
        version = hello.get("protocol") if isinstance(hello, dict) else None
        if version != protocol.PROTOCOL_VERSION:
            self._kill()
            raise protocol.ProtocolError(f"{self.label}: the worker speaks protocol {version}, this side "
                                         f"{protocol.PROTOCOL_VERSION}; install the same pytest-edge on both sides")
        self.hello = hello

    def _log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        tail = "\n".join("    " + line for line in text[-lines:])
        return f"\n  last lines the {'device' if self.device else 'runtime'} printed:\n{tail}" if tail else ""

    def _crashed(self, op: str, artifact: str | None) -> None:
        process = self._process
        if process is not None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        how = _signal_name(process.returncode if process else None)
        tail = self._log_tail()
        self._reset()
        if self.device is not None and op == "start":
            raise DeviceUnreachable(f"device {self.device[0]} cannot be reached: its command ended ({how}) before "
                                    f"the worker said hello ({self.device[1]}){tail}")
        if self.device is not None:
            raise BackendCrash(f"device {self.device[0]} dropped the connection ({how}) while {self.label} was "
                               f"trying to {op} {artifact or ''}; it is reconnected for the next test{tail}")
        raise BackendCrash(f"the {self.backend_name} runtime crashed ({how}) while trying to {op} "
                           f"{artifact or ''}; its worker will be restarted for the next test{tail}")

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
                self._writer.send_bytes(protocol.encode(protocol.request_json(protocol.Exit())))
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


def die_with_parent() -> None:
    """Linux: the kernel kills this worker when the process that started it dies, so a measuring
    worker orphaned by a SIGKILLed pytest (or a dropped ssh) does not keep a core busy until its
    timed window ends. Elsewhere a no-op (the worker ends at the next read of a closed pipe)."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def remove_stale_logs(directory: Path | None = None) -> list[Path]:
    """Worker logs (``pytest-edge-<pid>-<backend>.log``) left by a session that was killed before it
    could remove them: those of a pid that no longer runs are removed. Returns what was removed."""
    removed = []
    for log in Path(directory or tempfile.gettempdir()).glob("pytest-edge-*-*.log"):
        match = re.fullmatch(r"pytest-edge-(\d+)-.+\.log", log.name)
        if match is None or Path(f"/proc/{match[1]}").exists() or not Path("/proc/self").exists():
            continue
        try:
            log.unlink()
            removed.append(log)
        except OSError:
            pass
    return removed


if __name__ == "__main__":  # python -m pytest_edge.worker BACKEND FD | --stdio
    die_with_parent()
    if sys.argv[1:] == ["--stdio"]:
        serve_stdio()
    else:
        conn = Connection(int(sys.argv[2]))
        _serve(conn, conn, sys.argv[1])
