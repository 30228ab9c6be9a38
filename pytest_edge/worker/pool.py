"""The backend workers of a session, one per backend, and what they said about the models they
loaded (:class:`ModelInfo`). Plain Python; the session asks, the pool forwards to the worker."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..backends import Coverage, InputShapes, TensorSpec, split_device
from ..backends.arena import TensorArena
from ..core.record_blocks import RuntimeIdentity
from ..errors import BackendCrash, DeviceUnreachable, EdgeUsageError
from ..measurement.machine import Machine
from .protocol import Loaded, Request
from ..devices.kinds import DeviceKind, device_kind
from ..devices.labgrid import FarmError, FarmRequest, FarmSettings, Lease, lease, release
from .client import BackendWorker, remove_stale_logs
from .zygote import Zygote, fork_supported

if TYPE_CHECKING:  # an emulated device's and a backend's own environment: imported where one is used
    from ..devices import backend_env
    from .spare import SpareWorker

FORK_MODES = ("auto", "on", "off")


@dataclass
class ModelInfo:
    """A model as its backend's worker loaded it: signature, runtime, coverage, load time."""

    key: str
    backend: str
    artifact: Path
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    runtime: RuntimeIdentity  # the Load reply's runtime block, read once
    coverage: Coverage | None
    load_ms: float
    precision: str
    threads: int | None
    shapes: InputShapes  # what the load asked for (a measuring worker's load asks the same)
    device: Machine | None = None  # the machine block of the device it runs on
    shape_sources: dict[str, str] = field(default_factory=dict)  # LoadedModel.shape_sources
    arena: TensorArena | None = None  # the tensor arena a microcontroller runtime reports

    @classmethod
    def from_load(cls, key: str, backend: str, artifact: Path, reply: Loaded, threads: int | None,
                  shapes: InputShapes, device: Machine | None) -> "ModelInfo":
        """The model as the worker's reply to its Load request describes it."""
        return cls(key=key, backend=backend, artifact=artifact,
                   inputs=reply.inputs,
                   outputs=reply.outputs,
                   runtime=RuntimeIdentity.from_json(reply.runtime), coverage=reply.coverage,
                   load_ms=reply.load_ms, precision=reply.precision,
                   threads=threads if reply.threads_applied else None, shapes=shapes, device=device,
                   shape_sources=reply.shape_sources, arena=reply.arena)

    def feeds(self, values: Sequence[Any]) -> list[np.ndarray]:
        """Positional inputs as contiguous arrays of the declared dtypes (Python scalars welcome),
        checked against the static shapes once here, for every backend (runtimes differ: LiteRT
        would resize silently)."""
        if len(values) != len(self.inputs):
            raise EdgeUsageError(f"{self.backend}: {self.artifact} takes {len(self.inputs)} inputs "
                                 f"({[s.name for s in self.inputs]}), got {len(values)}")
        arrays = []
        for value, spec in zip(values, self.inputs):
            try:
                array = np.asarray(value)
                if array.dtype.kind not in "biuf":
                    raise TypeError(f"dtype {array.dtype} is not a number type")
                array = array.astype(spec.dtype, copy=False)
                if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-d)
                    array = np.ascontiguousarray(array)
            except (TypeError, ValueError) as exc:
                raise EdgeUsageError(f"{self.backend}: input {spec.name!r} of {self.artifact} ({spec.dtype}) "
                                     f"cannot take {type(value).__name__}: {exc}") from None
            if not _fits(array.shape, spec.shape):
                raise EdgeUsageError(f"{self.backend}: input {spec.name!r} of {self.artifact} has shape "
                                     f"{list(spec.shape)}, got an array of shape {list(array.shape)}")
            arrays.append(array)
        return arrays


def _fits(shape: Sequence[int], declared: Sequence[Any]) -> bool:
    """Same rank, and every static dimension equal (dynamic ones are names, None or negative)."""
    return len(shape) == len(declared) and all(
        not isinstance(d, int) or d < 0 or d == n for n, d in zip(shape, declared))


class WorkerPool:
    """One long-lived worker per backend; ``on_crash(backend)`` hears when one died with its state."""

    def __init__(self, isolated: bool, timeout_s: float, on_crash: Callable[[str], None],
                 devices: dict[str, str] | None = None, device_cache: Path | None = None,
                 fork: str = "auto", farm: FarmSettings | None = None) -> None:
        self.isolated = isolated
        # Measuring processes of this machine's backends: forked by a zygote per backend ("on",
        # "auto" where the OS can), or spawned ("off"; devices always spawn through their command).
        if fork not in FORK_MODES:
            raise EdgeUsageError(f"--edge-fork: {fork!r} is not one of {', '.join(FORK_MODES)}")
        if fork == "on" and not fork_supported():
            raise EdgeUsageError(f"--edge-fork=on: {sys.platform} cannot fork measuring processes (Linux only); "
                                 "use auto or off")
        self.fork = fork != "off" and fork_supported()
        self.zygotes: dict[str, Zygote] = {}
        self.timeout_s = timeout_s
        self.on_crash = on_crash
        self.devices = devices or {}
        self.workers: dict[str, BackendWorker] = {}
        # A measurement's own workers, until their restart notes are taken (then the closed ones go).
        self._fresh_workers: list[BackendWorker] = []
        remove_stale_logs()  # of sessions killed before they could clean up
        # Emulated devices (qemu:aarch64) are provisioned on first use; their commands, resolved.
        self.device_cache = device_cache
        self.progress: Callable[[str], None] = lambda line: print(f"pytest-edge: {line}", file=sys.stderr, flush=True)
        self._commands: dict[str, str | DeviceUnreachable] = {}
        # Backends' own environments (rknn's toolkit), made on first use; or why one cannot be.
        self._environments: dict[str, backend_env.Environment | backend_env.EnvironmentUnmade] = {}
        self.farm = farm or FarmSettings()
        self.leases: dict[str, Lease] = {}  # device -> the labgrid place this session holds for it
        # An interpreter the plugin started during collection (.spare), for the first worker prestart launches.
        self.spare: SpareWorker | None = None

    def _new(self, backend: str, isolated: bool) -> BackendWorker:
        base, device = split_device(backend)
        if device is not None and device not in self.devices:
            raise EdgeUsageError(f"{backend}: no device {device!r} in edge_devices (known: "
                                 f"{', '.join(self.devices) or 'none'})")
        return BackendWorker(base, isolated=isolated, timeout_s=self.timeout_s,
                             device=(device, self.command(device)) if device else None,
                             environment=self.environment(base) if device is None else None)

    def environment(self, backend: str) -> backend_env.Environment | None:
        """The environment pytest-edge makes for a backend whose runtime cannot live in this one
        (``Backend.environment``), made on first use (EnvironmentUnmade, once per session, when it
        cannot be: its tests skip with the installer's message); None for the others."""
        from ..backends import get_backend

        folder = get_backend(backend).environment
        if folder is None:
            return None
        from ..devices import backend_env

        key = str(folder)  # one environment for the backends of one runtime (rknn-rk3588, rknn-rk3576, ...)
        if key not in self._environments:
            try:
                self._environments[key] = backend_env.make(Path(folder), progress=self.progress, label=backend)
            except backend_env.EnvironmentUnmade as exc:
                self._environments[key] = exc
        made = self._environments[key]
        if isinstance(made, backend_env.EnvironmentUnmade):
            raise backend_env.EnvironmentUnmade(f"{backend}: its environment cannot be made: {made}")
        return made

    def command(self, device: str) -> str:
        """The command that starts a worker on ``device``: as configured, or an emulated device's
        (provisioned first if need be; DeviceUnreachable when it cannot be)."""
        if device not in self._commands:
            configured = self.devices[device]
            kind = device_kind(configured)
            if kind is DeviceKind.QEMU:
                from ..devices.qemu import ProvisionError, default_cache, parse_kind, provision

                try:
                    emulated = provision(self.device_cache or default_cache(), parse_kind(configured), self.progress)
                    self._commands[device] = emulated.command()
                except (ProvisionError, OSError) as exc:  # once per session: every test of it skips with this
                    self._commands[device] = DeviceUnreachable(
                        f"device {device} ({configured.strip()}) cannot be provisioned: {exc}")
            elif kind is DeviceKind.LABGRID:
                try:
                    held = lease(FarmRequest.parse(configured), self.farm, self.progress)
                    self.leases[device] = held
                    self._commands[device] = held.command(self.farm.command)
                except FarmError as exc:  # once per session, like an emulated device's provisioning
                    self._commands[device] = DeviceUnreachable(f"device {device} ({configured.strip()}): {exc}")
            else:
                self._commands[device] = configured
        command = self._commands[device]
        if isinstance(command, DeviceUnreachable):
            raise command
        return command

    def worker(self, backend: str) -> BackendWorker:
        if backend not in self.workers:
            self.workers[backend] = self._new(backend, self.isolated)
        return self.workers[backend]

    def fresh(self, backend: str, spawn: bool = False) -> BackendWorker:
        """A worker of its own (a measurement's fresh process), closed by the caller: forked by the
        backend's zygote where forking is on and the backend is local, else spawned; ``spawn``
        forces a spawned interpreter (a process that must start under a wrapper)."""
        worker = self._new(backend, True)
        self._fresh_workers.append(worker)
        if self.fork and not spawn and worker.device is None and worker.environment is None:
            if worker.backend_name not in self.zygotes:  # started by the first fork, inside the measurement lock
                self.zygotes[worker.backend_name] = Zygote(worker.backend_name, self.timeout_s)
            worker.zygote = self.zygotes[worker.backend_name]
        return worker

    def machine(self, backend: str) -> Machine | None:
        """The device's machine block, as its worker said at start (and, for a farm place, what the
        farm says of it: ``farm``); None for this machine."""
        worker = self.workers.get(backend)
        if worker is None or not worker.device:
            return None
        hello = worker.hello
        machine = hello.machine if hello is not None and hello.machine is not None else Machine()
        held = self.leases.get(worker.device[0])
        return machine.on_farm(held.describe()) if held is not None else machine

    def board(self, device: str | None) -> str:
        """What one measurement at a time is kept on (the measurement lock's key): this machine
        (""), a configured device by its name, a farm device by the place it got (two xdist workers
        of one ``labgrid:`` device hold two boards and measure at once)."""
        if device is None:
            return ""
        held = self.leases.get(device)
        if held is None:
            return device
        return "labgrid-" + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{held.coordinator}-{held.place}")

    def prestart(self, backends: Sequence[str]) -> None:
        """Launch these backends' workers without waiting for them (see BackendWorker.launch)."""
        if self.isolated:
            for backend in dict.fromkeys(backends):
                device = split_device(backend)[1]
                if device in self.devices and device_kind(self.devices[device]) is DeviceKind.LABGRID and device not in self.leases:
                    # A farm place is reserved by the first test that runs on it: an xdist worker that
                    # collects device tests it will never run must not hold (or wait for) a board.
                    continue
                try:
                    self.worker(backend).launch(self.spare)
                except (DeviceUnreachable, EdgeUsageError):
                    pass  # said by the backend's first request, in the test that needs it
        self.close_spare()  # adopted, or of no use now: its imports must not share a timed window

    def close_spare(self) -> None:
        if self.spare is not None:
            self.spare.close()
            self.spare = None

    def settle(self, device: str | None) -> None:
        """Wait for this machine's workers that are still starting (importing a runtime takes up to
        seconds of a core): a timing must not share the machine with our own imports."""
        for backend, worker in list(self.workers.items()):
            if split_device(backend)[1] == device and worker.starting:
                try:
                    worker.wait_ready()
                except Exception:  # its own request will report the failure, with its backend
                    pass

    def request(self, backend: str, request: Request, artifact: Path) -> Any:
        try:
            return self.worker(backend).request(request, artifact=str(artifact))
        except BackendCrash:
            self.on_crash(backend)  # everything that worker held is gone with it
            raise

    def take_restart_notes(self) -> list[str]:
        """What each worker that was restarted since the last call said about it (then forgotten)."""
        notes = []
        # A measurement's forked or spawned worker killed while it waited for its turn is replaced
        # as a shared one is, and said as one is.
        for worker in [*self.workers.values(), *self._fresh_workers]:
            notes += worker.restart_notes
            worker.restart_notes = []
        self._fresh_workers = [worker for worker in self._fresh_workers if worker.alive]
        for zygote in self.zygotes.values():
            notes += zygote.restart_notes
            zygote.restart_notes = []
        return notes

    def close(self) -> None:
        self.close_spare()
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
        for zygote in self.zygotes.values():
            zygote.close()
        self.zygotes.clear()
        for device, held in self.leases.items():  # after the workers on those boards are gone
            for problem in release(held):
                self.progress(f"device {device}: {problem}")
        self.leases.clear()
