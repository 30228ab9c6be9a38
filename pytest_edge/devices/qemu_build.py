"""Building an emulated device's folder (devices/qemu.py): what it is built from (:class:`Recipe`,
whose key names the folder), its parts (QEMU's static binary, the arm64 root filesystem with Python,
the runtimes' aarch64 wheels), each built on its own from Debian's and PyPI's packages, and the
rebuild of the broken ones beside the intact ones, swapped in whole with its manifest. Every tool
runs so that it dies with the session."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from .folder import damage, remove, write_manifest, read_manifest
from .kinds import DeviceKind

ARCHES = {"aarch64": "arm64"}  # QEMU's name -> Debian's
QEMU_SUITE = "trixie"  # qemu 10: Debian 12's qemu 7.2 crashes in the runtimes' CPU-feature detection
DEBIAN_SUITES = {"3.11": "bookworm", "3.13": "trixie"}  # the device's Python follows the host's where it can
DEFAULT_SUITE = "bookworm"
ROOTFS_PACKAGES = ["libstdc++6"]  # beside python3.X (the runtimes' wheels link libstdc++)
RECIPE_VERSION = 3  # bump when the folder layout or the way it is built changes
Progress = Callable[[str], None]


class ProvisionError(Exception):
    """The device could not be provisioned (no tool, no network, a package that does not exist)."""


@dataclass(frozen=True)
class Recipe:
    """What a device folder is built from; its key names the folder."""

    arch: str
    suite: str
    python: str
    qemu_suite: str
    wheels: tuple[tuple[str, str], ...]  # (distribution, version) pinned to the host's
    version: int = RECIPE_VERSION

    @property
    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.arch}-py{self.python}-{digest}"

    def has(self, distribution: str) -> bool:
        return any(name == distribution for name, _ in self.wheels)


# Runs a provisioning command so that the kernel kills it when this session dies (PR_SET_PDEATHSIG
# survives exec): a pip or mmdebstrap orphaned by a SIGKILLed session would go on writing into the
# temporary folder the next session removes, and make it again. A trampoline, not preexec_fn,
# which is not safe in a process with threads.
_DIES_WITH_SESSION = """\
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
if os.getppid() != int(sys.argv[1]):  # the session died before the request took effect
    os._exit(1)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.exit(f"{sys.argv[2]}: {exc.strerror}")
"""


def _run(argv: list[str], what: str) -> str:
    argv = [sys.executable, "-c", _DIES_WITH_SESSION, str(os.getpid()), *argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvisionError(f"{what}: {exc}") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise ProvisionError(f"{what} failed (exit status {done.returncode}): {shlex.join(argv[4:])}\n{tail}")
    return done.stdout


# Compiles the folders named to bytecode beside their sources (never under a pycache prefix: the
# device's Python looks beside them); a file that does not compile is left to its source.
_COMPILE = """\
import compileall, sys
sys.pycache_prefix = None
for folder in sys.argv[1:]:
    compileall.compile_dir(folder, quiet=2, workers=1)
"""


def _compile(recipe: Recipe, folder: Path, paths: list[Path], what: str) -> None:
    """Bytecode for the device's Python beside the sources under ``paths``. An extracted root
    filesystem has none (Debian's postinst compiles it; an extract runs nothing) and this
    package's copy has none: a worker would compile every module it imports at every start (a
    worker never writes bytecode where PYTHONDONTWRITEBYTECODE is set), under the emulator: 4 of
    the 7 CPU-seconds an onnxruntime worker takes to start. Bytecode depends on the Python version
    alone: the host's Python compiles it where it is the device's version, else the device's own
    Python under ``folder``'s emulator (slower, once)."""
    if sys.implementation.cache_tag == f"cpython-{recipe.python.replace('.', '')}":
        python = [sys.executable]
    else:
        rootfs = folder / "rootfs"
        python = [str(folder / "qemu" / f"qemu-{recipe.arch}"), "-L", str(rootfs),
                  str(rootfs / "usr" / "bin" / f"python{recipe.python}")]
    _run([*python, "-I", "-c", _COMPILE, *map(str, paths)], what)


def _mirror() -> list[str]:
    mirror = os.environ.get("PYTEST_EDGE_DEBIAN_MIRROR")
    return [mirror] if mirror else []


def _build_qemu(recipe: Recipe, target: Path, progress: Progress) -> dict:
    extract = target / "qemu-extract"
    progress(f"unpacking qemu-user-static from Debian {recipe.qemu_suite} (mmdebstrap) ...")
    _run(["mmdebstrap", "--mode=chrootless", "--variant=extract", "--include=qemu-user-static", "--quiet", recipe.qemu_suite,
          str(extract), *_mirror()], "unpacking qemu-user-static")
    binary = extract / "usr" / "bin" / f"qemu-{recipe.arch}"
    if not binary.is_file():
        raise ProvisionError(f"Debian's qemu-user-static ({recipe.qemu_suite}) has no {binary.name}")
    (target / "qemu").mkdir()
    shutil.copy2(binary.resolve(), target / "qemu" / binary.name)
    remove(extract)
    version = _run([str(target / "qemu" / binary.name), "--version"], "qemu --version").split()[2]
    return {"qemu_version": version}


def _build_rootfs(recipe: Recipe, target: Path, progress: Progress) -> dict:
    progress(f"unpacking Python {recipe.python} for {ARCHES[recipe.arch]} from Debian {recipe.suite} (mmdebstrap) ...")
    packages = [f"python{recipe.python}", *ROOTFS_PACKAGES]
    _run(["mmdebstrap", "--mode=chrootless", f"--arch={ARCHES[recipe.arch]}", "--variant=extract", "--quiet",
          f"--include={','.join(packages)}", recipe.suite, str(target / "rootfs"), *_mirror()],
         "unpacking the arm64 root filesystem")
    for junk in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "dev", "var/cache"):
        remove(target / "rootfs" / junk)  # device nodes and documentation: nothing the worker opens
    progress(f"compiling Python {recipe.python}'s standard library to bytecode ...")
    _compile(recipe, target, [target / "rootfs" / "usr" / "lib" / f"python{recipe.python}"],
             "compiling the standard library")
    return {}


def _build_site(recipe: Recipe, target: Path, progress: Progress) -> dict:
    pins = [f"{name}=={version}" for name, version in recipe.wheels]
    progress(f"downloading {recipe.arch} wheels from PyPI: {', '.join(pins)} ...")
    platforms = [f"manylinux_2_{minor}_{recipe.arch}" for minor in range(36, 16, -1)] + [f"manylinux2014_{recipe.arch}"]
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location",
          "--target", str(target / "site"), "--python-version", recipe.python, "--implementation", "cp",
          "--only-binary=:all:", *(a for p in platforms for a in ("--platform", p)), *pins],
         f"pip install of the {recipe.arch} wheels")
    # pip compiled them for the host's Python (unless told not to): the device's is what runs them.
    _compile(recipe, target, [target / "site"], "compiling the wheels")
    return {}


# The parts of a device folder, each built on its own: a damaged one is rebuilt, the others kept.
COMPONENTS = {"qemu": _build_qemu, "rootfs": _build_rootfs, "site": _build_site}


def compile_plugin(recipe: Recipe, folder: Path, plugin: Path) -> None:
    """This package's copy (shared by every device folder under the cache) compiled once for
    ``recipe``'s Python: a stamp per Python version says it was."""
    stamp = plugin / f".compiled-cpython-{recipe.python.replace('.', '')}"
    if not stamp.exists():
        _compile(recipe, folder, [plugin / "pytest_edge"], "compiling pytest-edge for the device")
        stamp.touch()


def rebuild(recipe: Recipe, root: Path, folder: Path, problem: str, broken: set[str], progress: Progress) -> None:
    """Build the ``broken`` parts in a temporary folder beside the intact ones (hard links of the
    old folder's files), write the manifest, then swap it in: nothing half-built is ever used."""
    for leftover in [*root.glob(f".tmp-{recipe.key}-*"), *root.glob(f".old-{recipe.key}-*")]:
        remove(leftover)  # of a session killed while building (the lock says none is building now)
    started = time.monotonic()
    temporary = root / f".tmp-{recipe.key}-{os.getpid()}"
    facts = {"recipe": asdict(recipe), **{k: v for k, v in (read_manifest(folder) or {}).items() if k != "files"}}
    if problem == "absent":
        progress(f"provisioning a {DeviceKind.QEMU.value}{recipe.arch} device into {folder} (once; later sessions reuse it)")
        temporary.mkdir(parents=True)
    else:
        # What is kept is checked whole first (every file's sha256): a repair must never bless a file
        # that was changed on disk (same size, other bytes) into the new manifest; a part with such a
        # file is rebuilt from its source too (Debian's packages, the wheels).
        broken = broken | damage(folder, COMPONENTS, full=True)[1]
        progress(f"device folder {folder} is damaged ({problem}); rebuilding its {', '.join(sorted(broken))}")
        shutil.copytree(folder, temporary, symlinks=True, copy_function=os.link,
                        ignore=lambda where, names: [n for n in names if Path(where) == folder and n in broken])
    old = root / f".old-{recipe.key}-{os.getpid()}"
    try:
        for part in COMPONENTS:
            if part in broken:
                facts.update(COMPONENTS[part](recipe, temporary, progress))
        progress("writing the manifest (size and sha256 of every file) ...")
        facts["built_s"] = round(time.monotonic() - started, 1)
        write_manifest(temporary, facts)
        if folder.exists():
            os.replace(folder, old)
        os.replace(temporary, folder)
    finally:
        remove(temporary)
        remove(old)
    progress(f"device ready in {facts['built_s']:.0f} s: {folder}")
