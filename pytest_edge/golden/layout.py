"""The golden file layout: its schema, names and keys, the :class:`Golden` and :class:`GoldenCase`
types, the key of an input set, and the exact bytes a case file holds."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .. import codec
from ..backends import TensorSpec
from ..errors import GoldenError
from ..core.record_blocks import RuntimeIdentity
from ..core.external_data import external_files
from ..files import sha256_file

if TYPE_CHECKING:
    from ..accuracy.inputs import UserCase

SCHEMA = "pytest-edge/golden/1"
UPDATE_HINT = "pytest --edge-update-golden (or: pytest-edge golden refresh)"
# What case_file() writes; ASCII digits and lower-case hex only, no path separators.
CASE_NAME = re.compile(r"case_[0-9]{3,}-[0-9a-f]{12}\.npz")
# The key of an input set and the subfolder that holds it; validated before any path is built.
SET_KEY = re.compile(r"[0-9a-f]{12}")
SET_DIR = re.compile(r"inputs-(?P<key>[0-9a-f]{12})")
DEFAULT_SET = "default"  # generated inputs: stored in the model's folder itself
LLM_DIR = "llm"  # a decoder's goldens, in its model's folder (golden.tokens)
LLM_SET = "llm"  # how list/prune name a model's decoder goldens (all its prompts: one set)
LLM_PROMPT = re.compile(r"prompt-[0-9a-f]{16}\.npz")  # one prompt's token golden (golden.tokens.golden_path)


def input_key(cases: Sequence[UserCase]) -> str:
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


# A golden set's meta.json, typed. Its files arrive in pull requests: validate.read_set checks the
# fields the plugin relies on before these are read, leniently (a field another version wrote
# otherwise, or not at all, is its default; keys this version does not know are not kept).

@codec.layout(lenient=True)
@dataclass(frozen=True)
class GoldenReference:
    """What recorded the golden: the backend, the artifact it ran (a plain file name beside the tested
    one; its path in the project and sha256, so a write never takes another model's golden), the
    runtime as its worker reported it, and the recording machine's ISA (a mismatch on another ISA is
    explained as such)."""

    backend: str = ""
    artifact: str | None = None
    runtime: RuntimeIdentity | None = None
    path: str | None = None
    sha256: str | None = None
    isa: str | None = None


@codec.layout(lenient=True)
@dataclass(frozen=True)
class GoldenSignature:
    """The recorded model's inputs and outputs, in its order."""

    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()


def _default_set(key: str) -> bool:
    return key == DEFAULT_SET


@codec.layout(lenient=True)
@dataclass(frozen=True)
class GoldenMeta:
    """A golden set's ``meta.json``: the model's key, every file of its artifacts with its sha256
    (a changed one makes the golden stale), what recorded it, how its inputs were made (``seed``
    for generated ones, None for a user's), the signature, the plugin's version; the store adds the
    schema, the case files (the commit point names them) and the set's key (not written for the
    default set: its meta.json keeps the layout it always had)."""

    model: str | None = None
    artifacts: dict[str, str] = field(default_factory=dict)
    reference: GoldenReference = GoldenReference()
    seed: int | None = None
    inputs_from: str | None = None  # "signature" (generated) or "user" (inputs=)
    signature: GoldenSignature = GoldenSignature()
    plugin_version: str | None = None
    schema: str = SCHEMA
    cases: tuple[str, ...] = ()
    input_set: str = codec.json_field(default=DEFAULT_SET, omit=_default_set)


@dataclass
class Golden:
    model: str
    folder: Path
    meta: GoldenMeta
    cases: list[GoldenCase] = field(default_factory=list)
    key: str = DEFAULT_SET  # the input set: "default" (generated inputs) or input_key() of inputs=

    @property
    def inputs_spec(self) -> list[TensorSpec]:
        return list(self.meta.signature.inputs)

    @property
    def outputs_spec(self) -> list[TensorSpec]:
        return list(self.meta.signature.outputs)

    @property
    def reference_backend(self) -> str:
        return self.meta.reference.backend

    def stale_reason(self, artifact: Path) -> str | None:
        """Why this golden no longer speaks for ``artifact`` (or for its reference artifact)."""
        for model_file, change in self.changes(artifact):
            return change.reason(self.model, model_file, self.folder / "meta.json")
        return None

    def changes(self, artifact: Path) -> Iterator[tuple[Path, ChangedFile]]:
        """Each file of ``artifact`` (and of its reference artifact) that is not as recorded, with
        the model file it belongs to (:func:`changed_files`). Lazy, as that is."""
        recorded = self.meta.artifacts
        checks = [artifact]
        ref_name = self.meta.reference.artifact
        if ref_name and ref_name != artifact.name:
            reference = artifact.with_name(ref_name)
            if reference.exists():
                checks.append(reference)
        for path in checks:
            # An .onnx's external data holds its weights: part of the artifact (recorded by location).
            for change in changed_files(recorded, {path.name: path, **external_files(path)}):
                yield path, change


@dataclass(frozen=True)
class ChangedFile:
    """A file of an artifact whose sha256 is not the one its golden recorded."""

    name: str  # as the golden records it: the file's name, or its external-data location
    path: Path
    recorded: str | None  # None: the golden was recorded without this file
    current: str

    @property
    def summary(self) -> str:
        """What ``pytest-edge golden list`` says of it."""
        return f"recorded without {self.name}" if self.recorded is None else f"{self.name} changed"

    def reason(self, model: str, artifact: Path, meta: Path) -> str:
        """Why the golden of ``model`` (its ``meta`` file) no longer speaks for ``artifact``."""
        what = (f"{self.path}" if self.path == artifact else f"the configuration {self.path} of {artifact.name}"
                if self.path.suffix == ".json" else f"the external data file {self.path} of {artifact.name}")
        if self.recorded is None:
            return f"golden for {model!r} was recorded without {what}; record it with {UPDATE_HINT}"
        return (f"golden for {model!r} is stale: {what} has sha256 {self.current}, the golden ({meta}) was "
                f"recorded for sha256 {self.recorded}; if the change is intended, refresh it with {UPDATE_HINT}")


def changed_files(recorded: Mapping[str, str], files: Mapping[str, Path]) -> Iterator[ChangedFile]:
    """The one rule that makes a golden stale, tensor and decoder goldens alike: every file the
    artifact is made of (``files``: the model file, its external data by location, a decoder
    export's configuration) must be recorded, under that name, with the sha256 it has now. Lazy: a
    caller that stops at the first change hashes nothing more."""
    for name, path in files.items():
        current = sha256_file(path)
        if recorded.get(name) != current:
            yield ChangedFile(name, path, recorded.get(name), current)


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


