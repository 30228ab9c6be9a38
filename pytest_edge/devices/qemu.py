"""The ``qemu:aarch64`` device kind: an emulated ARM64 machine that runs the runtimes' own aarch64
wheels under QEMU's user-mode emulator, provisioned from Debian's and PyPI's packages.

A device folder (one per recipe, under ``edge_device_cache``) holds a static ``qemu-aarch64``
(Debian trixie's ``qemu-user-static``), an arm64 root filesystem with Python (Debian's packages,
extracted by ``mmdebstrap``, nothing run), and a ``site`` folder with the aarch64 wheels of the
runtimes at this host's versions, the Python sources of both with their bytecode for the device's
Python. It is built in a temporary folder, described by a manifest (every file's size and sha256;
bytecode is not in it) and renamed into place in one step, under a lock: a half-built or
damaged folder is never used, and two sessions (or xdist workers) provision once. This package's
own source travels beside it, keyed by its content, so editing pytest-edge rebuilds nothing big.
How each part is built is qemu_build.py's; this module says what the device is, whether it can run
here, and provisions it under the lock.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..files import user_cache
from .folder import damage, locked, read_manifest
from .kinds import DeviceKind
from .plugin_copy import ship_plugin
from .qemu_build import (ARCHES, COMPONENTS, DEBIAN_SUITES, DEFAULT_SUITE, QEMU_SUITE, Progress, ProvisionError, Recipe,
                         compile_plugin, rebuild)

if TYPE_CHECKING:  # the settings of every pytest session read default_cache: no backends imported for it
    from ..backends import Backend

KIND = DeviceKind.QEMU.value
# Beside the runtimes (each backend's device_distributions), what every device's worker imports.
WORKER_DISTRIBUTIONS = ["numpy"]
EMULATED_ENV = "PYTEST_EDGE_EMULATED"  # set by the launcher; the device worker reports it


def parse_kind(command: str) -> str:
    """``qemu:aarch64`` -> ``aarch64``; ValueError naming the known kinds otherwise."""
    arch = command.strip()[len(KIND):]
    if arch not in ARCHES:
        raise ValueError(f"edge_devices: {command.strip()!r} is not a device kind; known: "
                         + ", ".join(KIND + a for a in ARCHES))
    return arch


def default_cache() -> Path:
    return user_cache("devices")


def _host_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def device_runtimes() -> list[str]:
    """The runtimes a device gets: the first of each registered backend's ``device_distributions``
    (its own), in registry order."""
    from ..backends import all_backends

    return list(dict.fromkeys(b.device_distributions[0] for b in all_backends().values() if b.device_distributions))


def device_distributions() -> list[str]:
    """What a device installs, at the host's versions (a runtime the host lacks, the device lacks):
    the runtimes, then what they need beside them, then what the worker imports."""
    from ..backends import all_backends

    needed = [d for b in all_backends().values() for d in b.device_distributions[1:]]
    return list(dict.fromkeys([*device_runtimes(), *needed, *WORKER_DISTRIBUTIONS]))


def recipe_for(arch: str) -> Recipe:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    suite = DEBIAN_SUITES.get(python, DEFAULT_SUITE)
    python = next((p for p, s in DEBIAN_SUITES.items() if s == suite), python)
    wheels = tuple((d, v) for d in device_distributions() if (v := _host_version(d)) is not None)
    return Recipe(arch, suite, python, QEMU_SUITE, wheels)


def host_problem() -> str | None:
    """Why this host cannot run a qemu device at all, or None."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        return (f"qemu devices need an x86-64 or aarch64 Linux host (QEMU user mode); this is "
                f"{sys.platform} on {platform.machine()}")
    return None


def tool_problem() -> str | None:
    """Why this host cannot provision a device folder, or None."""
    if shutil.which("mmdebstrap") is None:
        return ("provisioning needs mmdebstrap on PATH (Debian/Ubuntu: apt-get install mmdebstrap) to unpack "
                "Debian's qemu-user-static and arm64 Python packages")
    return None


# ------------------------------------------------------------------ the device


@dataclass
class Device:
    """A provisioned device folder and how to start a worker in it."""

    folder: Path
    plugin: Path
    arch: str
    python: str
    qemu_version: str
    artifacts: Path

    def command(self) -> str:
        """The device command (as ``edge_devices`` takes it) that starts a worker under QEMU."""
        rootfs = self.folder / "rootfs"
        env = {"PYTHONPATH": f"{self.folder / 'site'}{os.pathsep}{self.plugin}", "PYTHONNOUSERSITE": "1",
               "PYTEST_EDGE_CACHE": str(self.artifacts), EMULATED_ENV: f"qemu-user {self.qemu_version}",
               "QEMU_LD_PREFIX": str(rootfs)}
        return shlex.join(["env", "-u", "PYTHONHOME", "-u", "PYTHONSTARTUP",
                           *(f"{k}={v}" for k, v in env.items()), str(self.folder / "qemu" / f"qemu-{self.arch}"),
                           str(rootfs / "usr" / "bin" / f"python{self.python}"), "-m", "pytest_edge.worker", "--stdio"])


def state(root: Path, recipe: Recipe) -> str:
    """``ready``, ``absent`` or ``damaged: <what>`` (sizes only: cheap enough for every session)."""
    folder = root / recipe.key
    if not folder.exists():
        return "absent"
    problem = damage(folder, COMPONENTS)[0]
    return "ready" if problem is None else f"damaged: {problem}"


def provision(root: Path, arch: str, progress: Progress = lambda line: None, verify: bool = False) -> Device:
    """The device folder for ``arch`` under ``root``, built (or repaired) first if need be.
    Raises ProvisionError saying what is missing."""
    problem = host_problem()
    if problem:
        raise ProvisionError(problem)
    recipe = recipe_for(arch)
    folder = root / recipe.key
    tool = tool_problem()
    if tool and state(root, recipe) != "ready":
        raise ProvisionError(tool)  # before the lock: a host that cannot provision leaves no trace
    with locked(root / f"{recipe.key}.lock", progress, f"{folder}"):
        problem, broken = damage(folder, COMPONENTS, full=verify) if folder.exists() else ("absent", set(COMPONENTS))
        if problem is not None:
            tool = tool_problem()
            if tool:
                raise ProvisionError(tool)
            rebuild(recipe, root, folder, problem, broken, progress)
        plugin = ship_plugin(root)
        compile_plugin(recipe, folder, plugin)
    manifest = read_manifest(folder) or {}
    return Device(folder, plugin, arch, recipe.python, str(manifest.get("qemu_version", "?")), root / "artifacts")


def unavailable_reason(command: str, backend: Backend, root: Path) -> str | None:
    """Why ``backend`` cannot run on a qemu device here (None: it can, provisioned first if need
    be). Cheap: no download, no hashing."""
    problem = host_problem()
    if problem:
        return problem
    if backend.device_why_not:
        return backend.device_why_not
    distribution = backend.distribution
    recipe = recipe_for(parse_kind(command))
    if distribution not in device_runtimes():
        return (f"the {command.strip()} device installs only {' and '.join(device_runtimes())}, not "
                f"{distribution}")
    if not recipe.has(distribution):
        return (f"the {command.strip()} device gets its runtimes at this host's versions, and this host has no "
                f"{distribution}")
    tool = tool_problem()
    if tool and state(root, recipe) != "ready":
        return f"no {command.strip()} device in {root} and {tool}"
    return None
