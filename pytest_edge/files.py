"""Generic file helpers: atomic writes that keep a file's mode, and cached sha256 of files.

The golden store, the report and the device worker's artifact cache all write through
:func:`atomic_write`: readers see the old file or the new one, never a part.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

_hash_cache: dict[tuple[str, int, int], str] = {}


def user_cache(name: str) -> Path:
    """pytest-edge's folder ``name`` in the user's cache ($XDG_CACHE_HOME, else ~/.cache): shared
    between projects, and never beside a user's own files. Not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-edge" / name


def file_digest(path: Path) -> str:
    """The sha256 of a file's content, read now, in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """:func:`file_digest`, kept for the session while the file's modification time and size stay."""
    stat_ = path.stat()
    key = (str(path.resolve()), stat_.st_mtime_ns, stat_.st_size)
    if key not in _hash_cache:
        _hash_cache[key] = file_digest(path)
    return _hash_cache[key]


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask(0) would briefly
    let another thread create world-writable files)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """Keep the mode of the file being replaced; a new file gets what open() would give it."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a part. The
    file gets the mode of the one it replaces, or ``0o666 & ~umask`` when new (mkstemp alone
    would leave it 0600, unreadable to the rest of a team sharing the checkout)."""
    path = Path(path)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` where it lies inside it, else as given (for reports)."""
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
