"""An installed distribution's version and file list, read from its ``.dist-info`` folder.

importlib.metadata answers both, but importing it (email's header parser, for METADATA) costs a
worker ~17 ms of CPU, a tenth of its start, on its first check's path; ONNX Runtime and LiteRT never
import it themselves. The two facts a worker reports are plain files an installer writes (the
Recording Installed Projects specification: ``NAME-VERSION.dist-info/METADATA``'s ``Version:`` header,
``RECORD``, CSV). Where no such folder is on ``sys.path`` (an ``.egg-info``, a zipped or a custom
finder's distribution) or it cannot be read, importlib.metadata is asked, as it always was."""

from __future__ import annotations

import csv
import functools
import os
import re
import sys

_SEPARATORS = re.compile(r"[-_.]+")


def _normalized(name: str) -> str:
    """A project name as the packaging specifications compare them (PEP 503)."""
    return _SEPARATORS.sub("-", name).lower()


def _metadata_path(distribution: str) -> str | None:
    """The ``.dist-info`` (or a legacy ``.egg-info``) of ``distribution``: the first on ``sys.path``,
    as importlib.metadata finds it; None where there is none."""
    wanted = _normalized(distribution)
    for entry in sys.path:
        folder = entry or "."
        try:
            modified = os.stat(folder).st_mtime_ns
        except OSError:
            continue
        found = _index(folder, modified).get(wanted)
        if found is not None:
            return os.path.join(folder, found)
    return None


@functools.lru_cache(maxsize=64)
def _index(folder: str, modified: int) -> dict[str, str]:
    """The metadata folders in ``folder`` by normalized project name, the first of each name in the
    listing's order; listed once while the folder is unchanged (``modified``: its mtime)."""
    del modified  # the cache's key only: an install or removal changes the folder's mtime
    found: dict[str, str] = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:  # a zip file, a folder that cannot be read
        return found
    for name in names:
        stem, dot, suffix = name.rpartition(".")
        if dot and suffix in ("dist-info", "egg-info"):
            found.setdefault(_normalized(stem.partition("-")[0]), name)
    return found


def dist_info(distribution: str) -> str | None:
    """The ``.dist-info`` folder of ``distribution``, first on ``sys.path``; None where there is none
    (not installed, or installed another way)."""
    found = _metadata_path(distribution)
    return found if found is not None and found.endswith(".dist-info") else None


def is_installed(distribution: str) -> bool:
    """Whether ``distribution`` is installed on ``sys.path``'s folders (a ``.dist-info`` or an
    ``.egg-info``). Without asking importlib.metadata: the question is asked of distributions that
    are mostly absent (ONNX Runtime's other wheels), where every answer would import it."""
    return _metadata_path(distribution) is not None


def _metadata_module():  # noqa: ANN202 - the module; imported only where a folder did not answer
    import importlib.metadata

    return importlib.metadata


def version(distribution: str) -> str | None:
    """The installed version of ``distribution``; None where it is not installed."""
    folder = dist_info(distribution)
    if folder is not None:
        try:
            with open(os.path.join(folder, "METADATA"), encoding="utf-8") as lines:
                for line in lines:
                    if not line.strip():  # the headers end here
                        break
                    key, _, value = line.partition(":")
                    if key.strip().lower() == "version" and value.strip():
                        return value.strip()
        except (OSError, UnicodeDecodeError):
            pass
    metadata = _metadata_module()
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


class NotInstalled(LookupError):
    """The distribution is not installed as a Python distribution here."""


def recorded_files(distribution: str) -> tuple[str, list[str]] | None:
    """The folder ``distribution``'s RECORD paths are relative to, and those paths; None where it was
    installed without a RECORD. :class:`NotInstalled` where it is not installed."""
    folder = dist_info(distribution)
    if folder is not None:
        try:
            with open(os.path.join(folder, "RECORD"), encoding="utf-8", newline="") as record:
                return os.path.dirname(folder), [row[0] for row in csv.reader(record) if row]
        except (OSError, UnicodeDecodeError, csv.Error):
            pass
    metadata = _metadata_module()
    try:
        files = metadata.distribution(distribution).files
    except metadata.PackageNotFoundError:
        raise NotInstalled(distribution) from None
    if not files:
        return None
    return os.fspath(files[0].dist.locate_file("")), [str(entry) for entry in files]
