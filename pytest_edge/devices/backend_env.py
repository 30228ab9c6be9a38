"""A backend's own environment, made by pytest-edge: a runtime whose pins cannot live beside the
others (a vendor toolkit that needs NumPy 1.x) declares its requirements in its folder
(``Backend.environment``: ``requirements.txt``, installed with their dependencies, and
``requirements-no-deps.txt``, installed without theirs); this module makes a virtual environment
of them once, keyed by a digest of those files, this Python's version and the platform, under the
user's cache (``~/.cache/pytest-edge/envs/<key>``, or ``$PYTEST_EDGE_ENVS``), and says how to start
that backend's worker in it. It is built in a temporary folder beside the final one and renamed into
place in one step, under a lock: a half-made environment is never used, and two sessions (or xdist
workers) make it once. This package's own source travels beside it (:mod:`.plugin_copy`), keyed by
its content, so editing pytest-edge re-installs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import DeviceUnreachable
from ..files import user_cache
from .folder import locked, remove
from .plugin_copy import ship_plugin

if TYPE_CHECKING:
    from ..backends import Backend

ENVS_VARIABLE = "PYTEST_EDGE_ENVS"  # where the environments are kept (default: the user's cache)
REQUIREMENTS = "requirements.txt"  # installed with their dependencies
NO_DEPS = "requirements-no-deps.txt"  # installed after, without theirs (a package whose pins are too tight)
READY = "ready.json"  # written last: a folder without it was never finished
RECIPE_VERSION = 1  # bump when the way an environment is made changes
INSTALL_TIMEOUT_S = 3600
Progress = Callable[[str], None]


class EnvironmentUnmade(DeviceUnreachable):
    """A backend's environment could not be made (no network to the package index, a requirement
    that does not exist): its tests are skipped with the installer's message, or fail with
    ``--edge-require``."""


def default_root() -> Path:
    override = os.environ.get(ENVS_VARIABLE)
    return Path(override) if override else user_cache("envs")


@dataclass(frozen=True)
class EnvSpec:
    """What an environment is made of: the backend's requirement files as they are, this Python."""

    requirements: str
    no_deps: str
    python: str
    platform: str

    @classmethod
    def of(cls, folder: Path) -> "EnvSpec":
        def read(name: str) -> str:
            path = folder / name
            try:
                return path.read_text(encoding="utf-8") if path.is_file() else ""
            except UnicodeDecodeError as exc:  # its message names no file
                raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None

        if not (folder / REQUIREMENTS).is_file():
            raise FileNotFoundError(f"{folder / REQUIREMENTS} does not exist: a backend's environment needs one")
        return cls(read(REQUIREMENTS), read(NO_DEPS), f"{sys.version_info.major}.{sys.version_info.minor}",
                   f"{sys.platform}-{platform.machine()}")

    @property
    def key(self) -> str:
        text = json.dumps([RECIPE_VERSION, self.requirements, self.no_deps, self.python, self.platform])
        return f"py{self.python}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class Environment:
    """A made environment: its folder, its Python and the copy of pytest-edge its workers import."""

    folder: Path
    plugin: Path

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    def worker_env(self) -> dict[str, str]:
        """The variables a worker started in it gets over this process's: only its own packages and
        this pytest-edge's source on its path (never the main environment's)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP", "PYTEST_CURRENT_TEST")}
        env.update(PYTHONPATH=str(self.plugin), PYTHONNOUSERSITE="1")
        return env

    def facts(self) -> dict:
        try:
            return json.loads((self.folder / READY).read_text())
        except (OSError, ValueError):
            return {}


def state(folder: Path, root: Path | None = None) -> tuple[str, Path]:
    """``ready`` or ``absent``, and the environment's folder, for a backend's requirements folder."""
    spec = EnvSpec.of(folder)
    target = (root or default_root()) / spec.key
    return ("ready" if (target / READY).is_file() and (target / "venv" / "bin" / "python").exists() else "absent"), target


def _pip(python: Path, args: list[str], what: str, progress: Progress) -> None:
    """``python -m pip install ...``, its lines of progress relayed; EnvironmentUnmade with the
    installer's last lines where it fails."""
    argv = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            *args]
    started = time.monotonic()
    lines: list[str] = []
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "PYTHONNOUSERSITE": "1"})
    except OSError as exc:
        raise EnvironmentUnmade(f"{what}: {exc}") from None
    assert process.stdout is not None
    for line in process.stdout:
        line = line.rstrip()
        if not line or line.startswith("WARNING: Location"):  # a configured find-links folder that is absent
            continue
        lines.append(line)
        if line.startswith(("Collecting", "Downloading", "Installing", "Successfully", "ERROR")):
            progress(f"  {line.strip()[:160]}")
        if time.monotonic() - started > INSTALL_TIMEOUT_S:
            process.kill()
    process.wait()
    if process.returncode != 0:
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-6:]
        raise EnvironmentUnmade(f"{what} failed (pip exit status {process.returncode}): {shlex.join(argv[1:])}\n"
                                + "\n".join(errors[-6:]))


def make(folder: Path, root: Path | None = None, progress: Progress = lambda line: None,
         label: str = "a backend") -> Environment:
    """The environment of the requirements in ``folder`` (a backend's), made first if need be.
    Raises EnvironmentUnmade with the installer's message where it cannot be made."""
    root = root or default_root()
    try:
        spec = EnvSpec.of(folder)
    except (OSError, ValueError) as exc:
        raise EnvironmentUnmade(f"{label}: its environment's requirements cannot be read: {exc}") from None
    target = root / spec.key
    if root.exists() and not root.is_dir():  # mkdir would say "File exists", naming neither
        raise EnvironmentUnmade(f"{label}: its environment cannot be made: the environments' folder {root} is a file, "
                                f"not a folder (${ENVS_VARIABLE}, or --dir)")
    try:
        with locked(root / f"{spec.key}.lock", progress, str(target)):
            if not (target / READY).is_file():
                _make(spec, folder, root, target, progress, label)
            plugin = ship_plugin(root)
    except OSError as exc:
        raise EnvironmentUnmade(f"{label}: its environment {target} cannot be made: {exc}") from None
    return Environment(target, plugin)


def _make(spec: EnvSpec, folder: Path, root: Path, target: Path, progress: Progress, label: str) -> None:
    for leftover in root.glob(f".tmp-{spec.key}-*"):
        remove(leftover)  # of a session killed while making it (the lock says none is making it now)
    remove(target)  # a folder without its READY: never finished
    started = time.monotonic()
    temporary = root / f".tmp-{spec.key}-{os.getpid()}"
    progress(f"making the environment of {label} in {target} (once; later sessions reuse it) ...")
    try:
        done = subprocess.run([sys.executable, "-m", "venv", str(temporary / "venv")], capture_output=True, text=True,
                              timeout=600)
        if done.returncode != 0:
            raise EnvironmentUnmade(f"{label}: python -m venv failed: {(done.stderr or done.stdout).strip()[-600:]}")
        python = temporary / "venv" / "bin" / "python"
        what = f"installing the environment of {label} ({folder / REQUIREMENTS})"
        progress(f"installing {folder / REQUIREMENTS} ...")
        _pip(python, ["-r", str(folder / REQUIREMENTS)], what, progress)
        if spec.no_deps.strip():
            progress(f"installing {folder / NO_DEPS} (without their dependencies) ...")
            _pip(python, ["--no-deps", "-r", str(folder / NO_DEPS)], what.replace(REQUIREMENTS, NO_DEPS), progress)
        frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--disable-pip-version-check"],
                                capture_output=True, text=True, timeout=300).stdout.split()
        built_s = round(time.monotonic() - started, 1)
        (temporary / READY).write_text(json.dumps({"key": spec.key, "python": spec.python, "platform": spec.platform,
                                                   "requirements": str(folder), "installed": frozen,
                                                   "made_s": built_s}, indent=1))
        os.replace(temporary, target)
    finally:
        remove(temporary)
    progress(f"environment of {label} ready in {built_s:.0f} s: {target}")
