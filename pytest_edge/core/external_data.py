"""The files an artifact consists of: the model file, and the files beside it that hold its weights,
which the backend reading its format names (:meth:`Backend.weights_file`: one file by convention;
:meth:`Backend.external_locations`: files the model names inside itself, e.g. ONNX external data).
They are part of the artifact: hashed into a golden's provenance, checked for presence, counted in
its size, shipped to devices.

A location the model names must stay inside the model's folder: an absolute path or one with a
``..`` component is refused before anything is opened (the runtime would read it). Symbolic links
inside the folder are followed, as for the model file itself (DVC and git-annex check out links).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..backends import format_backend
from ..errors import BackendError


def location_problem(location: str) -> str | None:
    """Why ``location`` may not be opened (it leaves the model's folder), or None."""
    if not location or "\0" in location:
        return "is empty or holds a NUL byte"
    if PurePosixPath(location).is_absolute() or PureWindowsPath(location).is_absolute() or \
            PureWindowsPath(location).drive or re.match(r"[\\/]", location):
        return "is an absolute path"
    if ".." in re.split(r"[\\/]", location):
        return "has a '..' component"
    return None


def external_files(model: Path, backend: str | None = None) -> dict[str, Path]:
    """The external-data files of ``model`` by location, each checked: inside the model's folder
    (else refused unread) and present. {} for other formats and self-contained models.
    BackendError naming the model, the location and ``backend`` otherwise. A weights file by the
    format's convention (``Backend.weights_file``) counts as its external data (golden provenance,
    devices). The format's backend (:func:`backends.format_backend`) says which files they are."""
    model = Path(model)
    who = f"{backend}: " if backend else ""
    owner = format_backend(model)
    if owner is None:
        return {}
    weights = owner.weights_file(model)
    if weights is not None and model.is_file():
        if not weights.is_file():
            raise BackendError(f"{who}{model} keeps its weights in {weights}, which is missing; copy it beside "
                               f"the model (it is part of the artifact, like {model.name} itself)")
        return {weights.name: weights}
    if not model.is_file():
        return {}
    files = {}
    for location in owner.external_locations(model):
        problem = location_problem(location)
        if problem:
            raise BackendError(f"{who}{model} names external data at {location!r}, which {problem}: refused, "
                               f"not read (external data must lie in the model's folder, {model.parent})")
        path = model.parent / location
        if not path.is_file():
            raise BackendError(f"{who}{model} keeps its weights in the external data file {path}, which is "
                               f"missing; copy it beside the model (it is part of the artifact, like "
                               f"{model.name} itself)")
        files[location] = path
    return files


def identity_files(model: Path) -> dict[str, Path]:
    """Every file an artifact is made of, by name: the model file, its external data or weights file
    (:func:`external_files`), and the exporter's configuration its runtime reads with it
    (:func:`backends.decoder_config.configuration_files`). What an acceptance holds for and a
    record names: a change to any of them is another artifact. BackendError where one is missing
    or sparse (:func:`sparse_problem`), before anything is hashed."""
    from ..backends.decoder_config import configuration_files  # a decoder export's own files

    model = Path(model)
    files = {model.name: model, **external_files(model), **configuration_files(model)}
    for path in files.values():
        problem = sparse_problem(path)  # never hashed: 64 GiB of zeros would be read
        if problem:
            raise BackendError(problem)
    return files


def artifact_digests(model: Path, sha256_file) -> dict[str, str]:
    """{file name: sha256} of an artifact and of its external-data files (by location), what a
    golden's provenance records: a change to the weights alone makes the golden stale."""
    digests = {model.name: sha256_file(model)}
    for location, path in external_files(model).items():
        digests[location] = sha256_file(path)
    return digests


# A weights file is dense: one whose disk blocks hold less than an eighth of its apparent size, past
# 64 MiB, is sparse (a hostile or broken file: 64 GB apparent, nothing written), and hashing or
# mapping it would read gigabytes of zeros.
SPARSE_MIN_BYTES = 64 * 2**20


def sparse_problem(path: Path) -> str | None:
    """Why ``path`` is refused unread as a sparse file, or None."""
    status = Path(path).stat()
    allocated = getattr(status, "st_blocks", None)
    if allocated is None or status.st_size <= SPARSE_MIN_BYTES or allocated * 512 * 8 >= status.st_size:
        return None
    return (f"{path} is sparse: {status.st_size / 2**30:.1f} GiB apparent, {allocated * 512 / 2**20:.1f} MiB on "
            "disk; a model's weights are written whole, so it is refused unread (not hashed, not loaded)")


def artifact_files(model: Path, backend: str | None = None) -> list[Path]:
    """The artifact and its external-data files, each checked (:func:`external_files`) and none of
    them sparse; BackendError naming the file and ``backend`` otherwise."""
    files = [Path(model), *external_files(model, backend).values()]
    for path in files:
        problem = sparse_problem(path)
        if problem:
            raise BackendError(f"{backend + ': ' if backend else ''}{problem}")
    return files
