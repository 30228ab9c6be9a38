"""A provisioned folder's integrity: a manifest of every file's size and sha256, checked on use, so
a damaged folder is found (and rebuilt by its owner); a lock so that one process provisions while
the others wait. Used by the emulated devices (:mod:`pytest_edge.devices.qemu`)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..files import file_digest

MANIFEST = "manifest.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _files(folder: Path) -> Iterator[Path]:
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")  # bytecode comes and goes
        for name in sorted(names):
            path = Path(root) / name
            if path.is_file() and not path.is_symlink() and name != MANIFEST:
                yield path


def write_manifest(folder: Path, facts: dict) -> None:
    files = {str(p.relative_to(folder)): [p.stat().st_size, file_digest(p)] for p in _files(folder)}
    staged = folder / f".{MANIFEST}.tmp"  # a new file, not the old one's inode (a repair hard-links it)
    staged.write_text(json.dumps({**facts, "files": files}, indent=1, sort_keys=True))
    os.replace(staged, folder / MANIFEST)


def read_manifest(folder: Path) -> dict | None:
    """The manifest, or None where it is missing or not one this module wrote (then the folder is
    rebuilt): every entry a relative path inside the folder with ``[size, sha256]``. A hostile file
    (other types, nesting deep enough to exhaust the parser, ``../`` names) is unreadable, never
    an exception or a path outside the folder."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    for name, entry in manifest["files"].items():
        parts = Path(name).parts
        if (not parts or Path(name).is_absolute() or ".." in parts or not isinstance(entry, list) or len(entry) != 2
                or isinstance(entry[0], bool) or not isinstance(entry[0], int) or entry[0] < 0
                or not isinstance(entry[1], str) or not _SHA256.fullmatch(entry[1])):
            return None
    return manifest


def size_mb(folder: Path) -> float:
    """The device folder's size by its manifest."""
    return sum(size for size, _ in (read_manifest(folder) or {"files": {}})["files"].values()) / 2**20


def damage(folder: Path, components: Iterable[str], full: bool = False) -> tuple[str | None, set[str]]:
    """What is wrong with a device folder and which of its ``components`` (top-level folders) must
    be rebuilt; (None, set()) when intact. Sizes always; content too with ``full``."""
    components = set(components)
    manifest = read_manifest(folder)
    if manifest is None:
        return f"{folder / MANIFEST} is missing or unreadable (a provisioning that did not finish)", components
    problem, broken = None, set()
    for name, (size, digest) in manifest["files"].items():
        path = folder / name
        try:
            status = path.lstat()  # not followed: a link put where a file was is no longer that file
        except OSError:
            status = None
        found = (f"{path} is missing" if status is None else
                 f"{path} is not a regular file (a link, or another kind) where the manifest has one"
                 if not stat.S_ISREG(status.st_mode) else
                 f"{path} has {status.st_size} bytes, the manifest says {size}" if status.st_size != size else
                 f"{path} does not have the sha256 of the manifest" if full and file_digest(path) != digest else None)
        if found:
            problem = problem or found
            part = Path(name).parts[0]
            broken.add(part if part in components else next(iter(sorted(components))))
    return problem, broken


@contextmanager
def locked(path: Path, progress: Callable[[str], None], what: str) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another session that is provisioning {what} ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
