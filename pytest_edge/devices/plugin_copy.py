"""This pytest-edge's own source, copied for a device to run (an emulated device's ``plugins``
folder), keyed by a digest of the source: editing pytest-edge ships a new copy, nothing else."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
from pathlib import Path

from .. import __version__
from .folder import remove


def plugin_source() -> tuple[Path, str]:
    """This package's folder and a digest of its source (the device runs the same code)."""
    package = Path(__file__).resolve().parent.parent  # pytest_edge/
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return package, digest.hexdigest()[:12]


def ship_plugin(root: Path) -> Path:
    """This pytest-edge's source (and its backends' entry points) under ``root/plugins/<digest>``."""
    package, digest = plugin_source()
    folder = root / "plugins" / digest
    if folder.is_dir():
        return folder
    temporary = root / "plugins" / f".tmp-{digest}-{os.getpid()}"
    remove(temporary)
    shutil.copytree(package, temporary / "pytest_edge", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    info = temporary / f"pytest_edge-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pytest-edge\nVersion: {__version__}\n")
    lines = ["[pytest_edge.backends]"]
    for entry in importlib.metadata.entry_points(group="pytest_edge.backends"):
        if entry.value.startswith("pytest_edge."):  # the built-ins; a third party's are not on the device
            lines.append(f"{entry.name} = {entry.value}")
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    try:
        os.replace(temporary, folder)
    except OSError:  # another device's session shipped the same source meanwhile
        remove(temporary)
        if not folder.is_dir():
            raise
    return folder
