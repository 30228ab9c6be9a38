"""Golden store: ``<golden_dir>/<model>/meta.json`` plus one ``case_NNN-<hash>.npz`` per case.

A model keeps one golden *set* per input set. Generated inputs (seeded, from the signature) form
the default set, stored in the model's folder itself as before input sets existed; the inputs of a
marker's ``inputs=`` form a set keyed by :func:`input_key` (12 hex digits of sha256 over the
arrays' names, dtypes, shapes and bytes), stored in ``<model>/inputs-<key>/`` with the same files.

Nothing is written unless asked. Every write goes to a temporary file beside its target and is
moved into place with ``os.replace``, under a per-model lock, so an interrupted or concurrent
(pytest-xdist) refresh never leaves a half-written or lost golden file. ``meta.json`` is written
last: it is the commit point that names the case files.

Golden files arrive in pull requests, so reading treats them as untrusted: ``meta.json`` is
checked field by field, case names must be plain ``case_NNN-<12 hex>.npz`` names in the model's
folder (nothing outside it is opened, symbolic links and special files are refused), the hash in
each name must match the file's bytes, arrays are parsed without pickle and with their declared
sizes checked against the bytes present, and golden values must be finite. Every problem is a
:class:`GoldenError` naming the file.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import math
import os
import re
import stat
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..backends import TensorSpec
from ..errors import GoldenError
from ..external_data import external_files
from ..files import atomic_write, sha256_file

SCHEMA = "pytest-edge/golden/1"
UPDATE_HINT = "pytest --edge-update-golden (or: pytest-edge golden refresh)"
# What case_file() writes; ASCII digits and lower-case hex only, no path separators.
CASE_NAME = re.compile(r"case_[0-9]{3,}-[0-9a-f]{12}\.npz")
# The key of an input set and the subfolder that holds it; validated before any path is built.
SET_KEY = re.compile(r"[0-9a-f]{12}")
SET_DIR = re.compile(r"inputs-(?P<key>[0-9a-f]{12})")
DEFAULT_SET = "default"  # generated inputs: stored in the model's folder itself
_MEMBER = re.compile(r"(inputs|outputs)/(.+)\.npy")
# Array kinds a golden may hold: bool, signed and unsigned integers, floats.
_KINDS = "biuf"
# Deflate cannot expand data by more than ~1032x: a member claiming more is corrupt (or a bomb).
_MAX_DEFLATE_RATIO = 1032
# The most one golden array may hold once inflated (a 1 MB case file can inflate to 1 GB): enough
# for a 4K image or a large model's logits, refused above, before anything is allocated.
MAX_MEMBER_BYTES = 256 * 2**20
# Hidden temporaries atomic_write leaves when a refresh is killed between write and rename.
_LEFTOVER_PATTERNS = (".case_*.npz.*.tmp", ".meta.json.*.tmp")

def input_key(cases: Sequence[Mapping[str, Any]]) -> str:
    """The key of a user input set: 12 hex digits of sha256 over each case's arrays (sorted by
    name: a dict's order carries no meaning; cases keep theirs) with their dtype, shape and bytes.
    The same arrays from a dict, a list or an .npz under another file name give the same key."""
    digest = hashlib.sha256(b"pytest-edge/inputs/1")
    digest.update(len(cases).to_bytes(8, "little"))
    for case in cases:
        digest.update(len(case).to_bytes(8, "little"))
        for name in sorted(case):
            array = np.ascontiguousarray(np.asarray(case[name]))
            # Object arrays hold pointers, not values: hash their repr (check_case refuses them later).
            data = repr(array.tolist()).encode() if array.dtype.hasobject else array.tobytes()
            header = json.dumps([str(name), array.dtype.str, list(array.shape), len(data)]).encode()
            digest.update(len(header).to_bytes(8, "little") + header + data)
    return digest.hexdigest()[:12]


def set_label(model: str, key: str) -> str:
    """How reports name a golden set: ``model/key`` (``model/default`` for generated inputs)."""
    return f"{model}/{key}"


def check_set_key(key: str) -> str:
    """``key`` if it names a golden set (``default`` or 12 hex digits), else GoldenError: a key is
    turned into a folder name, so nothing else may pass (no separators, no ``..``)."""
    if key != DEFAULT_SET and not (isinstance(key, str) and SET_KEY.fullmatch(key)):
        raise GoldenError(f"{key!r} is not a golden input set key (expected {DEFAULT_SET!r} or 12 hex digits)")
    return key


def unused_sets(stored: Iterable[tuple[str, str]], used: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The stored (model, key) sets no test uses, sorted."""
    return sorted(set(stored) - set(used))


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
    key: str = DEFAULT_SET  # the input set: "default" (generated inputs) or input_key() of inputs=

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
            # An .onnx's external data holds its weights: part of the artifact (recorded by location).
            for location, data in external_files(path).items():
                if location not in recorded:
                    return (f"golden for {self.model!r} was recorded without the external data file {data} "
                            f"of {path.name}; record it with {UPDATE_HINT}")
                current = sha256_file(data)
                if current != recorded[location]:
                    return (f"golden for {self.model!r} is stale: the external data file {data} of "
                            f"{path.name} has sha256 {current}, the golden ({self.folder / 'meta.json'}) was "
                            f"recorded for sha256 {recorded[location]}; if the change is intended, refresh it "
                            f"with {UPDATE_HINT}")
        return None


def case_file(index: int, data: bytes) -> str:
    # The content hash in the name makes meta.json the single commit point of a refresh: new case
    # files never overwrite the ones an older meta.json names.
    return f"case_{index:03d}-{content_hash(data)}.npz"


def content_hash(data: bytes) -> str:
    """The 12 hex digits of sha256 that name a case file."""
    return hashlib.sha256(data).hexdigest()[:12]


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz with fixed timestamps, so refreshing an unchanged golden changes no byte."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, value in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
    return buffer.getvalue()


class _Corrupt(Exception):
    """A problem in one golden file; turned into a GoldenError naming the file."""


def _corrupt(path: Path, detail: str) -> GoldenError:
    return GoldenError(f"corrupt golden file {path}: {detail}; regenerate it with {UPDATE_HINT}")


def non_finite(array: np.ndarray) -> tuple[int, int]:
    """(NaN count, Inf count) of a float array; (0, 0) for other kinds."""
    if array.dtype.kind not in "fc":
        return 0, 0
    return int(np.count_nonzero(np.isnan(array))), int(np.count_nonzero(np.isinf(array)))


def non_finite_problem(kind: str, name: str, array: np.ndarray, where: str = "") -> str | None:
    """Golden values must be usable references: no NaN anywhere, and no Inf in outputs. Inputs may
    hold +-Inf (additive attention masks use -inf), never NaN (a NaN input is never equal to
    itself, so the recorded inputs could not be matched against the test's)."""
    nan, inf = non_finite(array)
    if nan or (inf and kind == "output"):
        return f"golden {kind} {name!r}{where} contains {nan} NaN and {inf} Inf of {array.size} values"
    return None


# ---------------------------------------------------------------- reading untrusted files


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, refusing symbolic links and anything but a regular file, so a golden
    from a pull request cannot make the reader open a file elsewhere, a FIFO or a device."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise _Corrupt("the file is missing") from exc
    except OSError as exc:
        if os.path.islink(path):
            raise _Corrupt("it is a symbolic link (golden files must be regular files in the model's "
                           "folder)") from exc
        raise _Corrupt(f"cannot open it: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Corrupt("it is not a regular file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _Corrupt(f"cannot read it: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _check_specs(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise _Corrupt(f"{where} must be a list of {{name, shape, dtype}}, got {type(value).__name__}")
    names = []
    for i, spec in enumerate(value):
        label = f"{where}[{i}]"
        if not isinstance(spec, dict):
            raise _Corrupt(f"{label} must be an object, got {type(spec).__name__}")
        name, shape, dtype = spec.get("name"), spec.get("shape"), spec.get("dtype")
        if not isinstance(name, str) or not name:
            raise _Corrupt(f"{label}.name must be a non-empty string, got {name!r}")
        if name in names:
            raise _Corrupt(f"{where} names {name!r} twice")
        if not isinstance(shape, list) or not all(
                d is None or isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool))
                for d in shape):
            raise _Corrupt(f"{label}.shape must be a list of sizes, names or null, got {shape!r}")
        if not isinstance(dtype, str) or _dtype_kind(dtype) not in _KINDS:
            raise _Corrupt(f"{label}.dtype must name a bool, integer or float dtype, got {dtype!r}")
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
        raise _Corrupt(f"expected a JSON object, got {type(meta).__name__}")
    if meta.get("schema") != SCHEMA:
        raise _Corrupt(f"schema {meta.get('schema')!r}, expected {SCHEMA!r}")
    cases = meta.get("cases")
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases):
        raise _Corrupt(f"'cases' must be a list of case file names, got {_short(cases)}")
    if not cases:
        raise _Corrupt("'cases' is empty")
    signature = meta.get("signature")
    if not isinstance(signature, dict):
        raise _Corrupt(f"'signature' must be an object with 'inputs' and 'outputs', got {_short(signature)}")
    inputs = _check_specs(signature.get("inputs"), "signature.inputs")
    outputs = _check_specs(signature.get("outputs"), "signature.outputs")
    reference = meta.get("reference")
    if not isinstance(reference, dict) or not isinstance(reference.get("backend"), str):
        raise _Corrupt(f"'reference' must be an object with a 'backend' name, got {_short(reference)}")
    artifact = reference.get("artifact")
    # stale_reason() opens the reference artifact beside the tested one: a plain file name only.
    if artifact is not None and (not isinstance(artifact, str) or not _plain_name(artifact)):
        raise _Corrupt(f"'reference.artifact' must be a plain file name, got {artifact!r}")
    artifacts = meta.get("artifacts", {})
    if not isinstance(artifacts, dict) or not all(isinstance(v, str) for v in artifacts.values()):
        raise _Corrupt(f"'artifacts' must map artifact names to sha256 strings, got {_short(artifacts)}")
    # A set's meta.json names its key; a folder copied or renamed to another key is refused.
    recorded_key = meta.get("input_set", DEFAULT_SET)
    if recorded_key != expected_key:
        raise _Corrupt(f"'input_set' is {_short(recorded_key)}, but the folder holds input set {expected_key!r}")
    return cases, inputs, outputs


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, blob_size: int,
                 declared: list[Any] | None = None) -> np.ndarray:
    """One ``.npy`` member, its header read and checked (against the signature's shape
    ``declared`` where given, and against MAX_MEMBER_BYTES) before its data is inflated."""
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _Corrupt(f"member {info.filename!r} uses an unsupported compression")
    if info.file_size > min(max(info.compress_size, 1), blob_size) * _MAX_DEFLATE_RATIO:
        raise _Corrupt(f"member {info.filename!r} claims {info.file_size} bytes, more than its data can hold")
    with archive.open(info) as stream:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise _Corrupt(f"member {info.filename!r} has .npy format version {version}")
        if dtype.kind not in _KINDS or dtype.hasobject or dtype.fields:
            raise _Corrupt(f"member {info.filename!r} holds dtype {dtype}, not bool, integer or float")
        if any(d < 0 for d in shape):
            raise _Corrupt(f"member {info.filename!r} declares a negative dimension in shape {shape}")
        if declared is not None and not _fits_signature(shape, declared):
            raise _Corrupt(f"member {info.filename!r} declares shape {list(shape)}, which the signature's "
                           f"{declared} in meta.json cannot hold")
        size = math.prod(shape) * dtype.itemsize
        if size > MAX_MEMBER_BYTES:
            raise _Corrupt(f"member {info.filename!r} declares {size} bytes (shape {list(shape)} of {dtype}), "
                           f"more than the {MAX_MEMBER_BYTES} bytes a golden array may hold")
        held = info.file_size - stream.tell()
        if held != size:
            raise _Corrupt(f"member {info.filename!r} declares shape {shape} of {dtype} ({size} bytes) but holds "
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
                raise _Corrupt(f"unexpected member {info.filename!r} (expected inputs/<name>.npy "
                               "or outputs/<name>.npy)")
            kind, name = match.groups()
            if name in arrays[kind]:
                raise _Corrupt(f"member {info.filename!r} appears twice")
            declared = (signature or {}).get(kind, {}).get(name)
            arrays[kind][name] = _read_member(archive, info, len(blob), declared)
    return GoldenCase(arrays["inputs"], arrays["outputs"])


class GoldenStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def folder(self, model: str, key: str = DEFAULT_SET) -> Path:
        """The folder of one input set: the model's folder for the default set, else its
        ``inputs-<key>`` subfolder."""
        if check_set_key(key) == DEFAULT_SET:
            return self.root / model
        return self.root / model / f"inputs-{key}"

    def exists(self, model: str, key: str = DEFAULT_SET) -> bool:
        return os.path.lexists(self.folder(model, key) / "meta.json")

    def models(self) -> list[str]:
        """The model folders of the store (symbolic links are not followed: not ours)."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.is_symlink())

    def sets(self, model: str) -> list[str]:
        """The keys of the sets stored for ``model``: ``default`` when the model's folder has a
        ``meta.json``, then each ``inputs-<12 hex>`` subfolder that has one (other names, links
        and files are not golden sets and are left alone)."""
        folder = self.root / model
        keys = [DEFAULT_SET] if os.path.lexists(folder / "meta.json") else []
        if folder.is_dir() and not folder.is_symlink():
            for child in sorted(folder.iterdir()):
                match = SET_DIR.fullmatch(child.name)
                if match and child.is_dir() and not child.is_symlink() and os.path.lexists(child / "meta.json"):
                    keys.append(match["key"])
        return keys

    def all_sets(self) -> list[tuple[str, str]]:
        return [(model, key) for model in self.models() for key in self.sets(model)]

    def load(self, model: str, key: str = DEFAULT_SET) -> Golden:
        folder = self.folder(model, key)
        meta_path = folder / "meta.json"
        self._check_set_folder(folder, key)
        if not os.path.lexists(meta_path):
            which = "" if key == DEFAULT_SET else f", input set {key} (the inputs= of the test)"
            raise GoldenError(f"no golden outputs for model {model!r}{which} (looked for {meta_path}); "
                              f"create them with {UPDATE_HINT}")
        with _locked(self.root / model, shared=True):  # a consistent meta.json + cases, even mid-refresh
            return self._read(model, key, folder, meta_path)

    def _check_set_folder(self, folder: Path, key: str) -> None:
        # _read_regular refuses a linked file, not a linked folder above it: the model's folder and
        # a set's folder must be plain folders under the golden root, or reads and writes (and a
        # refresh's deletion of stray case files) would land elsewhere.
        model_folder = folder if key == DEFAULT_SET else folder.parent
        for path, what in ((model_folder, "a model's golden folder"), (folder, "an input set folder")):
            if os.path.lexists(path) and (path.is_symlink() or not path.is_dir()):
                raise _corrupt(path, f"{what} must be a plain folder, not a symbolic link or a file")
            if key == DEFAULT_SET:
                break

    def _read(self, model: str, key: str, folder: Path, meta_path: Path) -> Golden:
        try:
            meta = json.loads(_read_regular(meta_path))
            names, input_names, output_names = _check_meta(meta, key)
        except RecursionError as exc:  # json nests deeper than the interpreter's stack
            raise _corrupt(meta_path, "nested too deeply") from exc
        except (_Corrupt, ValueError) as exc:  # ValueError: not JSON / not UTF-8
            raise _corrupt(meta_path, str(exc)) from exc
        golden = Golden(model, folder, meta, key=key)
        shapes = {kind: {spec["name"]: spec["shape"] for spec in meta["signature"][kind]}
                  for kind in ("inputs", "outputs")}
        for index, name in enumerate(names):
            if not CASE_NAME.fullmatch(name):
                # Checked before any path is built: nothing outside the model's folder is opened.
                raise _corrupt(meta_path, f"case entry {_short(name)} is not a case file name of this "
                                          f"folder (expected a plain name like case_000-<12 hex>.npz; "
                                          f"names that escape {folder} or name subfolders are refused)")
            path = folder / name
            try:
                blob = _read_regular(path)
            except _Corrupt as exc:
                raise _corrupt(path, f"{exc} (named by {meta_path})") from exc
            expected = name.rsplit("-", 1)[1][:12]
            actual = content_hash(blob)
            if actual != expected:
                raise _corrupt(path, f"content does not match its hash (the name says {expected}, the "
                                     f"bytes hash to {actual}): the file was modified or truncated")
            try:
                case = _read_case(blob, shapes)
            except _Corrupt as exc:
                raise _corrupt(path, str(exc)) from exc
            except Exception as exc:  # noqa: BLE001 - zipfile/zlib/numpy raise many kinds on bad bytes
                raise _corrupt(path, f"{type(exc).__name__}: {exc}") from exc
            for kind, got, wanted in (("inputs", case.inputs, input_names),
                                      ("outputs", case.outputs, output_names)):
                if set(got) != set(wanted):
                    raise _corrupt(path, f"its {kind} {sorted(got)} do not match the signature's "
                                         f"{kind} {wanted} in {meta_path}")
            for kind, arrays in (("input", case.inputs), ("output", case.outputs)):
                for array_name, array in arrays.items():
                    problem = non_finite_problem(kind, array_name, array, f" in {path} (case {index})")
                    if problem:
                        raise GoldenError(f"{problem}; refresh it with {UPDATE_HINT} once the reference "
                                          "backend gives finite values")
            golden.cases.append(case)
        return golden

    def write(self, model: str, meta: dict[str, Any], cases: list[GoldenCase], key: str = DEFAULT_SET) -> Golden:
        """Record one input set; other sets of the model (other folders) are not touched."""
        folder = self.folder(model, key)
        for index, case in enumerate(cases):
            # The session checks outputs before recording; a golden must never hold NaN/Inf anyway.
            for kind, arrays in (("input", case.inputs), ("output", case.outputs)):
                for name, array in arrays.items():
                    problem = non_finite_problem(kind, name, np.asarray(array))
                    if problem:
                        raise GoldenError(f"refusing to write the golden for {model!r} in {folder}: "
                                          f"case {index}: {problem}")
        self._check_set_folder(folder, key)
        folder.mkdir(parents=True, exist_ok=True)
        blobs = [npz_bytes({**{f"inputs/{k}": v for k, v in case.inputs.items()},
                            **{f"outputs/{k}": v for k, v in case.outputs.items()}}) for case in cases]
        meta = {**meta, "schema": SCHEMA, "cases": [case_file(i, blob) for i, blob in enumerate(blobs)]}
        if key != DEFAULT_SET:
            meta["input_set"] = key  # the default set's meta.json keeps the layout it always had
        with _locked(self.root / model):
            # Under the exclusive lock no other refresh is writing here: any hidden temporary is
            # a leftover of one that was killed between write and rename.
            remove_leftovers(folder)
            for name, blob in zip(meta["cases"], blobs):
                atomic_write(folder / name, blob)
            atomic_write(folder / "meta.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
            keep = set(meta["cases"])
            for stale in folder.glob("case_*.npz"):
                if stale.name not in keep:
                    stale.unlink()
        return Golden(model, folder, meta, list(cases), key=key)

    def remove(self, model: str, key: str = DEFAULT_SET) -> list[Path]:
        """Delete one set under the model's exclusive lock: ``meta.json`` first (the commit point:
        the set is gone even if a case file cannot be removed), then its case files and leftover
        temporaries, then its folder (and the model's) if nothing else is left in it. Files this
        store did not write are left where they are. Returns what was removed."""
        folder = self.folder(model, key)
        model_folder = self.root / model
        if not os.path.lexists(folder):
            return []
        self._check_set_folder(folder, key)
        removed: list[Path] = []
        with _locked(model_folder):
            meta_path = folder / "meta.json"
            if os.path.lexists(meta_path):
                meta_path.unlink()
                removed.append(meta_path)
            for path in sorted(folder.iterdir()):
                if CASE_NAME.fullmatch(path.name) and not path.is_dir():
                    path.unlink()
                    removed.append(path)
            removed += remove_leftovers(folder)
            for empty in ((folder, model_folder) if key != DEFAULT_SET else (model_folder,)):
                try:
                    empty.rmdir()
                    removed.append(empty)
                except OSError:  # not empty: other sets or the user's own files
                    break
        return removed


def remove_leftovers(folder: Path) -> list[Path]:
    """Delete the hidden temporaries an interrupted refresh left in ``folder``; call it only
    under the folder's exclusive lock. Returns what was removed."""
    removed = []
    for pattern in _LEFTOVER_PATTERNS:
        for path in folder.glob(pattern):
            try:
                if not path.is_dir() or path.is_symlink():
                    path.unlink()
                    removed.append(path)
            except FileNotFoundError:
                pass
    return removed


@contextmanager
def _locked(folder: Path, shared: bool = False) -> Iterator[None]:
    # Lock the folder itself, so no lock file is left in the user's golden tree.
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
