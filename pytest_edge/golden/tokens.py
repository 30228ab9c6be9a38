"""Goldens of generation: per prompt, the greedy token ids, the first step's logits and, at each
generated position, the reference's top-k log-probabilities and the rest's mass (what the
teacher-forced top-1 agreement and KL divergence are judged against; a golden of an earlier
version, without them, still reads, and a ``max_kld`` budget then says to re-record it), under
``<golden dir>/<model key>/llm/prompt-<hash>.npz`` (core.models: a model's key), named by the prompt's ids (so adding a prompt
never renames another's golden). Written atomically by the reference backend only with
``--edge-update-golden``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Sequence, TypeVar

import numpy as np

from .. import codec
from ..core.generation_figures import TeacherForcedFigures
from ..errors import EdgeError, GoldenError
from ..files import atomic_write
from .validate import Corrupt, read_member


# The members of a token golden and the most each may hold: prompt and tokens of a context of 2**22
# int64 ids, the logits of a vocabulary of 2**22 float32 (config.LIMITS), the meta's JSON.
_MEMBERS = {"prompt": 2**25, "tokens": 2**25, "first_logits": 2**24 * 4, "meta": 2**20}
# The teacher-forced distributions (TopLogprobs), optional: [positions, k] ids and
# log-probabilities, [positions] the rest's log mass, for up to 2**16 positions of k = 256.
_DISTRIBUTION = {"top_ids": 2**24 * 8, "top_logprobs": 2**24 * 4, "rest_logprob": 2**16 * 4}


@dataclass(frozen=True)
class TopLogprobs:
    """A reference's next-token distributions at ``n`` positions, as a golden keeps them: the ``k``
    most likely ids with their log-probabilities, and the log of the rest's mass (-inf when the
    ``k`` ids are the whole vocabulary)."""

    ids: np.ndarray  # int64 [n, k], most likely first
    logprobs: np.ndarray  # float32 [n, k]
    rest: np.ndarray  # float32 [n]


# A token file's meta, typed: its JSON (in the file, sorted keys) is checked by check_meta, then read
# leniently (another version's value that does not fit: the field's default; unknown keys dropped).

@codec.layout(lenient=True)
@dataclass(frozen=True)
class TokenGoldenMeta:
    """A decoder golden's meta: the reference backend, the artifact it ran (its file name, path in the
    project and sha256; ``files``: every file of it by name, None in an older golden), the model's
    key, the new tokens, the plugin's version, the k of the distributions. Left out where None."""

    reference_backend: str | None = codec.optional()
    artifact: str | None = codec.optional()
    sha256: str | None = codec.optional()
    path: str | None = codec.optional()
    model: str | None = codec.optional()
    files: dict[str, str] | None = codec.optional()
    new_tokens: int | None = codec.optional()
    plugin_version: str | None = codec.optional()
    top_k: int | None = codec.optional()


@codec.layout(lenient=True)
@dataclass(frozen=True)
class ObtainedTokensMeta:
    """What a backend generated for a prompt, beside the golden it missed (golden.obtained): the
    tested model's key, the new tokens, the plugin's version, its teacher-forced figures, its top
    token at each teacher-forced position and why no logits were measured (each null where none);
    then who generated it, the golden's path and the golden's sha256 when it was written."""

    model: str | None = None
    new_tokens: int | None = None
    plugin_version: str | None = None
    teacher_forced: TeacherForcedFigures | None = None
    teacher_forced_top: list[int] | None = None
    logits_not_measured: str | None = None
    backend: str | None = codec.optional()
    golden: str | None = codec.optional()
    golden_sha256: str | None = codec.optional()


Meta = TypeVar("Meta", TokenGoldenMeta, ObtainedTokensMeta)


@dataclass
class TokenGolden(Generic[Meta]):
    """A prompt's tokens file: a golden (``TokenGoldenMeta``) or what a backend obtained beside it
    (``ObtainedTokensMeta``), in the same format."""

    prompt: list[int]
    tokens: list[int]
    first_logits: np.ndarray
    meta: Meta
    # The reference's next-token distributions at each generated position (None: an older golden).
    distributions: TopLogprobs | None = None


def golden_files(artifact: Path) -> dict[str, Path]:
    """The files of ``artifact`` a token golden records, by name (core.external_data.identity_files:
    the model file, its external data, a GenAI folder's configuration); the model file alone where
    they cannot be told (a missing data file: judged where the runtime reads it)."""
    from ..core.external_data import identity_files

    try:
        return identity_files(artifact)
    except EdgeError:
        return {artifact.name: artifact}


def recorded_files(meta: TokenGoldenMeta) -> dict[str, str]:
    """{file name: sha256} of the artifact a token golden was recorded from: every file of it
    (``files``), or an older golden's ``sha256`` of the model file alone."""
    return meta.files or ({str(meta.artifact): meta.sha256} if meta.sha256 else {})


def prompt_key(prompt: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(prompt, np.int64).tobytes()).hexdigest()[:16]


def golden_path(golden_dir: Path, model: str, prompt: Sequence[int]) -> Path:
    return Path(golden_dir) / model / "llm" / f"prompt-{prompt_key(prompt)}.npz"


def check_folders(path: Path) -> None:
    """A token golden's folders (``<model>/llm``) must be plain folders under the golden root, and
    the file a regular file, as a tensor golden's: a link from a pull request would make a refresh
    write, or a check read, somewhere else. GoldenError naming it otherwise."""
    path = Path(path)
    for folder, what in ((path.parent.parent, "a model's golden folder"), (path.parent, "its llm folder")):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            raise GoldenError(f"{folder}: {what} must be a plain folder, not a symbolic link or a file; nothing "
                              "is read or written through it")
    if os.path.islink(path) or (os.path.lexists(path) and not path.is_file()):
        raise GoldenError(f"{path}: an LLM golden must be a regular file, not a symbolic link or anything else")


# What a token golden's meta says, by key (others are kept unread: a later version's).
_META_TYPES = {"reference_backend": str, "artifact": str, "new_tokens": int, "plugin_version": str}


def check_meta(meta: Any) -> str | None:
    """Why a token golden's meta is not what :func:`write_golden` writes, or None."""
    if not isinstance(meta, dict):
        return f"its meta is a JSON {type(meta).__name__}, not an object"
    for key, kind in _META_TYPES.items():
        if key in meta and (not isinstance(meta[key], kind) or isinstance(meta[key], bool)):
            return f"its meta's {key} is {repr(meta[key])[:60]}, not a {kind.__name__}"
    digest = meta.get("sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                   and all(c in "0123456789abcdef" for c in digest)):
        return f"its meta's sha256 is {repr(digest)[:80]}, not 64 lowercase hex digits"
    files = meta.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(v) == 64
                                              for k, v in files.items()):
        return "its meta's files is not an object of file names and their sha256"
    return None


def write_golden(path: Path, golden: TokenGolden) -> None:
    check_folders(path)
    buffer = io.BytesIO()
    found = golden.distributions
    distributions = {} if found is None else {
        "top_ids": np.asarray(found.ids, np.int64), "top_logprobs": np.asarray(found.logprobs, np.float32),
        "rest_logprob": np.asarray(found.rest, np.float32)}
    np.savez_compressed(buffer, prompt=np.asarray(golden.prompt, np.int64), tokens=np.asarray(golden.tokens, np.int64),
                        first_logits=np.asarray(golden.first_logits, np.float32),
                        meta=np.frombuffer(json.dumps(codec.to_json(golden.meta), sort_keys=True).encode(), np.uint8),
                        **distributions)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getvalue())


def read_golden(path: Path, prompt: Sequence[int] | None) -> TokenGolden[TokenGoldenMeta]:
    """The golden at ``path``; missing, unreadable or for another prompt is a GoldenError naming it
    (``prompt`` None: whatever prompt it holds, as ``pytest-edge golden list`` reads it)."""
    return _read(path, prompt, TokenGoldenMeta)


def read_obtained(path: Path) -> TokenGolden[ObtainedTokensMeta]:
    """What a backend obtained for a prompt (golden.obtained), read as a golden is."""
    return _read(path, None, ObtainedTokensMeta)


def _read(path: Path, prompt: Sequence[int] | None, kind: type[Meta]) -> TokenGolden[Meta]:
    check_folders(path)
    if not path.is_file():
        raise GoldenError(f"no LLM golden {path} for prompt {list(prompt)}: record it with --edge-update-golden")
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            expected = {**_MEMBERS, **(_DISTRIBUTION if "top_ids.npy" in members else {})}
            missing = sorted(f"{name}.npy" for name in expected if f"{name}.npy" not in members)
            if missing or len(members) != len(expected):
                raise Corrupt(f"members {sorted(members)}, expected {sorted(f'{n}.npy' for n in expected)}")
            # Each member's header checked, and bounded, before its data is inflated (a 3 MB zip of
            # deflated zeros would otherwise become gigabytes).
            data = {name: read_member(archive, members[f"{name}.npy"], size, max_bytes=limit)
                    for name, limit in expected.items()}
        meta = json.loads(data["meta"].tobytes().decode())
        distributions = _distributions(data)
        problem = check_meta(meta)
        if problem:
            raise Corrupt(problem)
        golden = TokenGolden(data["prompt"].tolist(), data["tokens"].tolist(), data["first_logits"].astype(np.float32),
                             codec.from_json(kind, meta, str(path)), distributions)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, Corrupt) as exc:
        raise GoldenError(f"{path}: unreadable LLM golden ({type(exc).__name__}: {exc}); "
                          "re-record it with --edge-update-golden") from None
    except RecursionError:  # its meta's JSON nested past the reader's recursion limit
        raise GoldenError(f"{path}: unreadable LLM golden (its meta is nested deeper than the JSON reader's "
                          "recursion limit); re-record it with --edge-update-golden") from None
    if prompt is not None and golden.prompt != list(prompt):
        raise GoldenError(f"{path}: recorded for prompt {golden.prompt}, not {list(prompt)}")
    return golden


def _distributions(data: dict[str, np.ndarray]) -> TopLogprobs | None:
    """The golden's teacher-forced distributions, their shapes checked against each other and its tokens."""
    if "top_ids" not in data:
        return None
    ids, logprobs, rest = data["top_ids"], data["top_logprobs"], data["rest_logprob"]
    if ids.ndim != 2 or logprobs.shape != ids.shape or rest.shape != ids.shape[:1] or \
            ids.shape[0] != data["tokens"].size or ids.dtype.kind not in "iu" or logprobs.dtype.kind != "f":
        raise Corrupt(f"its distributions' shapes {list(ids.shape)}, {list(logprobs.shape)}, {list(rest.shape)} "
                      f"do not fit its {data['tokens'].size} tokens")
    vocabulary = data["first_logits"].size
    if ids.size and not (0 <= ids.min() and ids.max() < vocabulary and ids.shape[1] <= vocabulary):
        raise Corrupt(f"its distributions name token ids outside the vocabulary of {vocabulary} its logits have")
    return TopLogprobs(ids.astype(np.int64), logprobs.astype(np.float32), rest.astype(np.float32))
