"""Reading golden files as untrusted input (they arrive in pull requests): ``meta.json`` checked
field by field, case names checked before any path is built, links and special files refused,
each case's hash checked against its bytes, arrays parsed without pickle with their declared
sizes checked, values finite. Every problem is a :class:`GoldenError` naming the file."""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .. import codec
from ..errors import GoldenError
from .layout import (CASE_NAME, DEFAULT_SET, SCHEMA, UPDATE_HINT, Golden, GoldenCase, GoldenMeta, content_hash,
                     non_finite_problem)

_MEMBER = re.compile(r"(inputs|outputs)/(.+)\.npy")
# Array kinds a golden may hold: bool, signed and unsigned integers, floats.
_KINDS = "biuf"
# Deflate cannot expand data by more than ~1032x: a member claiming more is corrupt (or a bomb).
_MAX_DEFLATE_RATIO = 1032
# The most one golden array may hold once inflated (a 1 MB case file can inflate to 1 GB): enough
# for a 4K image or a large model's logits, refused above, before anything is allocated.
MAX_MEMBER_BYTES = 256 * 2**20
# Hidden temporaries atomic_write leaves when a refresh is killed between write and rename.


class Corrupt(Exception):
    """A problem in one golden file; turned into a GoldenError naming the file."""


def corrupt(path: Path, detail: str) -> GoldenError:
    return GoldenError(f"corrupt golden file {path}: {detail}; regenerate it with {UPDATE_HINT}")


# ---------------------------------------------------------------- reading untrusted files


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, refusing symbolic links and anything but a regular file, so a golden
    from a pull request cannot make the reader open a file elsewhere, a FIFO or a device."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise Corrupt("the file is missing") from exc
    except OSError as exc:
        if os.path.islink(path):
            raise Corrupt("it is a symbolic link (golden files must be regular files in the model's "
                           "folder)") from exc
        raise Corrupt(f"cannot open it: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Corrupt("it is not a regular file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise Corrupt(f"cannot read it: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _check_specs(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise Corrupt(f"{where} must be a list of {{name, shape, dtype}}, got {type(value).__name__}")
    names = []
    for i, spec in enumerate(value):
        label = f"{where}[{i}]"
        if not isinstance(spec, dict):
            raise Corrupt(f"{label} must be an object, got {type(spec).__name__}")
        name, shape, dtype = spec.get("name"), spec.get("shape"), spec.get("dtype")
        if not isinstance(name, str) or not name:
            raise Corrupt(f"{label}.name must be a non-empty string, got {name!r}")
        if name in names:
            raise Corrupt(f"{where} names {name!r} twice")
        if not isinstance(shape, list) or not all(
                d is None or isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool))
                for d in shape):
            raise Corrupt(f"{label}.shape must be a list of sizes, names or null, got {shape!r}")
        if not isinstance(dtype, str) or _dtype_kind(dtype) not in _KINDS:
            raise Corrupt(f"{label}.dtype must name a bool, integer or float dtype, got {dtype!r}")
        names.append(name)
    return names


def _dtype_kind(name: str) -> str:
    try:
        return np.dtype(name).kind
    except (TypeError, ValueError, SyntaxError):
        return "?"


def _check_meta(meta: Any, expected_key: str = DEFAULT_SET) -> tuple[list[str], list[str], list[str]]:
    """Validate the fields the plugin relies on; return (case names, input names, output names)."""
    if not isinstance(meta, dict):
        raise Corrupt(f"expected a JSON object, got {type(meta).__name__}")
    if meta.get("schema") != SCHEMA:
        raise Corrupt(f"schema {meta.get('schema')!r}, expected {SCHEMA!r}")
    cases = meta.get("cases")
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases):
        raise Corrupt(f"'cases' must be a list of case file names, got {_short(cases)}")
    if not cases:
        raise Corrupt("'cases' is empty")
    signature = meta.get("signature")
    if not isinstance(signature, dict):
        raise Corrupt(f"'signature' must be an object with 'inputs' and 'outputs', got {_short(signature)}")
    inputs = _check_specs(signature.get("inputs"), "signature.inputs")
    outputs = _check_specs(signature.get("outputs"), "signature.outputs")
    reference = meta.get("reference")
    if not isinstance(reference, dict) or not isinstance(reference.get("backend"), str):
        raise Corrupt(f"'reference' must be an object with a 'backend' name, got {_short(reference)}")
    artifact = reference.get("artifact")
    # stale_reason() opens the reference artifact beside the tested one: a plain file name only.
    if artifact is not None and (not isinstance(artifact, str) or not _plain_name(artifact)):
        raise Corrupt(f"'reference.artifact' must be a plain file name, got {artifact!r}")
    artifacts = meta.get("artifacts", {})
    if not isinstance(artifacts, dict) or not all(isinstance(v, str) for v in artifacts.values()):
        raise Corrupt(f"'artifacts' must map artifact names to sha256 strings, got {_short(artifacts)}")
    # A set's meta.json names its key; a folder copied or renamed to another key is refused.
    recorded_key = meta.get("input_set", DEFAULT_SET)
    if recorded_key != expected_key:
        raise Corrupt(f"'input_set' is {_short(recorded_key)}, but the folder holds input set {expected_key!r}")
    return cases, inputs, outputs


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, blob_size: int,
                declared: list[Any] | None = None, max_bytes: int = MAX_MEMBER_BYTES) -> np.ndarray:
    """One ``.npy`` member, its header read and checked (against the signature's shape
    ``declared`` where given, and against ``max_bytes``) before its data is inflated: a zip bomb
    or a header that claims gigabytes is a :class:`Corrupt`, never an allocation."""
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise Corrupt(f"member {info.filename!r} uses an unsupported compression")
    if info.file_size > min(max(info.compress_size, 1), blob_size) * _MAX_DEFLATE_RATIO:
        raise Corrupt(f"member {info.filename!r} claims {info.file_size} bytes, more than its data can hold")
    with archive.open(info) as stream:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise Corrupt(f"member {info.filename!r} has .npy format version {version}")
        if dtype.kind not in _KINDS or dtype.hasobject or dtype.fields:
            raise Corrupt(f"member {info.filename!r} holds dtype {dtype}, not bool, integer or float")
        if any(d < 0 for d in shape):
            raise Corrupt(f"member {info.filename!r} declares a negative dimension in shape {shape}")
        if declared is not None and not _fits_signature(shape, declared):
            raise Corrupt(f"member {info.filename!r} declares shape {list(shape)}, which the signature's "
                           f"{declared} in meta.json cannot hold")
        size = math.prod(shape) * dtype.itemsize
        if size > max_bytes:
            raise Corrupt(f"member {info.filename!r} declares {size} bytes (shape {list(shape)} of {dtype}), "
                          f"more than the {max_bytes} bytes a golden array may hold")
        held = info.file_size - stream.tell()
        if held != size:
            raise Corrupt(f"member {info.filename!r} declares shape {shape} of {dtype} ({size} bytes) but holds "
                           f"{held}")
        data = stream.read(size)  # zipfile checks the CRC at the end of the member
    array = np.frombuffer(data, dtype=dtype, count=math.prod(shape))
    return array.reshape(shape, order="F" if fortran else "C").copy()


def _fits_signature(shape: tuple[int, ...], declared: list[Any]) -> bool:
    """Same rank, and every fixed dimension of the signature equal (names, null, -1: any size)."""
    return len(shape) == len(declared) and all(
        not isinstance(d, int) or d < 0 or d == n for n, d in zip(shape, declared))


def _read_case(blob: bytes, signature: dict[str, dict[str, list[Any]]] | None = None) -> GoldenCase:
    """A case file's arrays; ``signature``: {"inputs"|"outputs": {name: declared shape}} from meta.json."""
    arrays: dict[str, dict[str, np.ndarray]] = {"inputs": {}, "outputs": {}}
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for info in archive.infolist():
            match = _MEMBER.fullmatch(info.filename)
            if match is None:
                raise Corrupt(f"unexpected member {info.filename!r} (expected inputs/<name>.npy "
                               "or outputs/<name>.npy)")
            kind, name = match.groups()
            if name in arrays[kind]:
                raise Corrupt(f"member {info.filename!r} appears twice")
            declared = (signature or {}).get(kind, {}).get(name)
            arrays[kind][name] = read_member(archive, info, len(blob), declared)
    return GoldenCase(arrays["inputs"], arrays["outputs"])


def check_set_folder(folder: Path, key: str) -> None:
    # _read_regular refuses a linked file, not a linked folder above it: the model's folder and
    # a set's folder must be plain folders under the golden root, or reads and writes (and a
    # refresh's deletion of stray case files) would land elsewhere.
    model_folder = folder if key == DEFAULT_SET else folder.parent
    for path, what in ((model_folder, "a model's golden folder"), (folder, "an input set folder")):
        if os.path.lexists(path) and (path.is_symlink() or not path.is_dir()):
            raise corrupt(path, f"{what} must be a plain folder, not a symbolic link or a file")
        if key == DEFAULT_SET:
            break


def read_set(model: str, key: str, folder: Path, meta_path: Path) -> Golden:
    try:
        meta = json.loads(_read_regular(meta_path))
        names, input_names, output_names = _check_meta(meta, key)
    except RecursionError as exc:  # json nests deeper than the interpreter's stack
        raise corrupt(meta_path, "nested too deeply") from exc
    except (Corrupt, ValueError) as exc:  # ValueError: not JSON / not UTF-8
        raise corrupt(meta_path, str(exc)) from exc
    golden = Golden(model, folder, codec.from_json(GoldenMeta, meta, str(meta_path)), key=key)
    shapes = {kind: {spec["name"]: spec["shape"] for spec in meta["signature"][kind]}
              for kind in ("inputs", "outputs")}
    for index, name in enumerate(names):
        if not CASE_NAME.fullmatch(name):
            # Checked before any path is built: nothing outside the model's folder is opened.
            raise corrupt(meta_path, f"case entry {_short(name)} is not a case file name of this "
                                     f"folder (expected a plain name like case_000-<12 hex>.npz; "
                                     f"names that escape {folder} or name subfolders are refused)")
        path = folder / name
        try:
            blob = _read_regular(path)
        except Corrupt as exc:
            raise corrupt(path, f"{exc} (named by {meta_path})") from exc
        expected = name.rsplit("-", 1)[1][:12]
        actual = content_hash(blob)
        if actual != expected:
            raise corrupt(path, f"content does not match its hash (the name says {expected}, the "
                                f"bytes hash to {actual}): the file was modified or truncated")
        try:
            case = _read_case(blob, shapes)
        except Corrupt as exc:
            raise corrupt(path, str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - zipfile/zlib/numpy raise many kinds on bad bytes
            raise corrupt(path, f"{type(exc).__name__}: {exc}") from exc
        for kind, got, wanted in (("inputs", case.inputs, input_names),
                                  ("outputs", case.outputs, output_names)):
            if set(got) != set(wanted):
                raise corrupt(path, f"its {kind} {sorted(got)} do not match the signature's "
                                    f"{kind} {wanted} in {meta_path}")
        for kind, arrays in (("input", case.inputs), ("output", case.outputs)):
            for array_name, array in arrays.items():
                problem = non_finite_problem(kind, array_name, array, f" in {path} (case {index})")
                if problem:
                    raise GoldenError(f"{problem}; refresh it with {UPDATE_HINT} once the reference "
                                      "backend gives finite values")
        golden.cases.append(case)
    return golden
