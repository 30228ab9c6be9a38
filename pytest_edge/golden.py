"""Golden store: ``<golden_dir>/<model>/meta.json`` plus one ``case_NNN.npz`` per case.

Nothing is written unless asked. Every write goes to a temporary file beside its target and is
moved into place with ``os.replace``, under a per-model lock, so an interrupted or concurrent
(pytest-xdist) refresh never leaves a half-written or lost golden file. ``meta.json`` is written
last: it is the commit point that names the case files.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .backends import TensorSpec
from .errors import GoldenError

SCHEMA = "pytest-edge/golden/1"
UPDATE_HINT = "pytest --edge-update-golden (or: pytest-edge golden refresh)"

_hash_cache: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _hash_cache:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _hash_cache[key] = digest.hexdigest()
    return _hash_cache[key]


@dataclass
class GoldenCase:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


@dataclass
class Golden:
    model: str
    folder: Path
    meta: dict[str, Any]
    cases: list[GoldenCase] = field(default_factory=list)

    @property
    def inputs_spec(self) -> list[TensorSpec]:
        return [TensorSpec.from_json(s) for s in self.meta["signature"]["inputs"]]

    @property
    def outputs_spec(self) -> list[TensorSpec]:
        return [TensorSpec.from_json(s) for s in self.meta["signature"]["outputs"]]

    @property
    def reference_backend(self) -> str:
        return self.meta["reference"]["backend"]

    def stale_reason(self, artifact: Path) -> str | None:
        """Why this golden no longer speaks for ``artifact`` (or for its reference artifact)."""
        recorded: dict[str, str] = self.meta.get("artifacts", {})
        checks = [artifact]
        reference = self.folder.parent / "__none__"
        ref_name = self.meta["reference"].get("artifact")
        if ref_name and ref_name != artifact.name:
            reference = artifact.with_name(ref_name)
            if reference.exists():
                checks.append(reference)
        for path in checks:
            if path.name not in recorded:
                return (f"golden for {self.model!r} was recorded without {path.name}; "
                        f"record it with {UPDATE_HINT}")
            current = sha256_file(path)
            if current != recorded[path.name]:
                return (f"golden for {self.model!r} is stale: {path} has sha256 {current}, the golden "
                        f"({self.folder / 'meta.json'}) was recorded for sha256 {recorded[path.name]}; "
                        f"if the change is intended, refresh it with {UPDATE_HINT}")
        return None


def case_file(index: int, data: bytes) -> str:
    # The content hash in the name makes meta.json the single commit point of a refresh: new case
    # files never overwrite the ones an older meta.json names.
    return f"case_{index:03d}-{hashlib.sha256(data).hexdigest()[:12]}.npz"


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz with fixed timestamps, so refreshing an unchanged golden changes no byte."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, value in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
    return buffer.getvalue()


class GoldenStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def folder(self, model: str) -> Path:
        return self.root / model

    def load(self, model: str) -> Golden:
        folder = self.folder(model)
        meta_path = folder / "meta.json"
        if not meta_path.exists():
            raise GoldenError(f"no golden outputs for model {model!r} (looked for {meta_path}); "
                              f"create them with {UPDATE_HINT}")
        with _locked(folder, shared=True):  # a consistent meta.json + cases, even mid-refresh
            return self._read(model, folder, meta_path)

    def _read(self, model: str, folder: Path, meta_path: Path) -> Golden:
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("schema") != SCHEMA:
                raise ValueError(f"schema {meta.get('schema')!r}, expected {SCHEMA!r}")
            names = meta["cases"]
            meta["signature"]["inputs"], meta["reference"]["backend"]  # noqa: B018 - must exist
        except (ValueError, KeyError, TypeError) as exc:
            raise GoldenError(f"corrupt golden file {meta_path}: {exc}; regenerate it with {UPDATE_HINT}") from exc
        golden = Golden(model, folder, meta)
        for name in names:
            path = folder / name
            try:
                with np.load(path, allow_pickle=False) as data:
                    inputs = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("inputs/")}
                    outputs = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("outputs/")}
            except Exception as exc:  # noqa: BLE001 - np.load raises zipfile, pickle, OS and value errors
                raise GoldenError(f"corrupt golden file {path}: {exc}; regenerate it with {UPDATE_HINT}") from exc
            golden.cases.append(GoldenCase(inputs, outputs))
        return golden

    def write(self, model: str, meta: dict[str, Any], cases: list[GoldenCase]) -> Golden:
        folder = self.folder(model)
        folder.mkdir(parents=True, exist_ok=True)
        blobs = [npz_bytes({**{f"inputs/{k}": v for k, v in case.inputs.items()},
                            **{f"outputs/{k}": v for k, v in case.outputs.items()}}) for case in cases]
        meta = {**meta, "schema": SCHEMA, "cases": [case_file(i, blob) for i, blob in enumerate(blobs)]}
        with _locked(folder):
            for name, blob in zip(meta["cases"], blobs):
                atomic_write(folder / name, blob)
            atomic_write(folder / "meta.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
            keep = set(meta["cases"])
            for stale in folder.glob("case_*.npz"):
                if stale.name not in keep:
                    stale.unlink()
        return Golden(model, folder, meta, list(cases))


@contextmanager
def _locked(folder: Path, shared: bool = False) -> Iterator[None]:
    # Lock the folder itself, so no lock file is left in the user's golden tree.
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a part."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
