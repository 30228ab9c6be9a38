"""A GGUF file's metadata (llama.cpp's format: the configuration travels inside the file), read
without llama.cpp, and the decoder configuration it gives.

The header is ``GGUF``, a version (2 or 3), the tensor and key/value counts, then the key/value
pairs, each a length-prefixed key, a type and a value (scalars, strings, arrays). Only the header
is read; arrays longer than a few entries (the tokenizer's vocabulary) are kept as their length.
Every count and length is bounded, so a hostile file costs a bounded read and gives an error that
names it.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import BinaryIO

from ...errors import BackendError, EdgeError, EdgeUsageError
from ..decoder_config import LlmConfig, _checked

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_KEYS = 65536
MAX_STRING = 1 << 20  # a key or a string value
MAX_ARRAY = 1 << 24  # entries (a vocabulary of 16 M tokens)
KEEP_ARRAY = 64  # longer arrays are kept as their length

# llama.cpp's KV cache is float16 unless the app sets type_k/type_v (llama_context_params).
LLAMA_CPP_CACHE_DTYPE = "float16"


class Length(int):
    """An array read as its length only (``tokenizer.ggml.tokens``: the vocabulary)."""


# One metadata value as the header holds it: a scalar, a string, a short array, or a long one's
# Length (an int). Keys are open (each architecture names its own), so the metadata is a mapping.
Scalar = int | float | bool
MetadataValue = Scalar | str | list[Scalar] | list[str]

MAX_TENSORS = 1 << 20
MAX_DIMS = 8


def read_metadata(path: Path, tensor_names: list[str] | None = None) -> dict[str, MetadataValue]:
    """The key/value metadata of a GGUF file. EdgeUsageError naming the file where it is not one.
    With ``tensor_names``, the tensor infos after the metadata are read too and their names added."""
    try:
        with open(path, "rb") as handle:
            if handle.read(4) != MAGIC:
                raise EdgeUsageError(f"{path}: not a GGUF file (no GGUF magic)")
            version, _tensors, count = _unpack(handle, "<IQQ", path)
            if version not in (2, 3):
                raise EdgeUsageError(f"{path}: GGUF version {version}; pytest-edge reads versions 2 and 3")
            if count > MAX_KEYS:
                raise EdgeUsageError(f"{path}: {count} metadata keys (more than {MAX_KEYS}): not a GGUF header")
            found: dict[str, MetadataValue] = {}
            for _ in range(count):
                key = _string(handle, path)
                (kind,) = _unpack(handle, "<I", path)
                found[key] = _value(handle, kind, path, key)
            if tensor_names is not None:
                if _tensors > MAX_TENSORS:
                    raise EdgeUsageError(f"{path}: {_tensors} tensors (more than {MAX_TENSORS}): not a GGUF header")
                for _ in range(_tensors):
                    tensor_names.append(_string(handle, path))
                    (dims,) = _unpack(handle, "<I", path)
                    if dims > MAX_DIMS:
                        raise EdgeUsageError(f"{path}: tensor {tensor_names[-1]!r} has {dims} dimensions: a corrupt header")
                    handle.seek(8 * dims + 4 + 8, 1)  # its dimensions, type and offset
            return found
    except OSError as exc:
        raise EdgeUsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _unpack(handle: BinaryIO, fmt: str, path: Path) -> tuple:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise EdgeUsageError(f"{path}: truncated GGUF header")
    return struct.unpack(fmt, data)


def _string(handle: BinaryIO, path: Path) -> str:
    (length,) = _unpack(handle, "<Q", path)
    if length > MAX_STRING:
        raise EdgeUsageError(f"{path}: a GGUF string of {length} bytes (more than {MAX_STRING}): a corrupt header")
    data = handle.read(length)
    if len(data) != length:
        raise EdgeUsageError(f"{path}: truncated GGUF header")
    return data.decode("utf-8", "replace")


def _value(handle: BinaryIO, kind: int, path: Path, key: str) -> MetadataValue:
    if kind in _SCALARS:
        return _unpack(handle, _SCALARS[kind], path)[0]
    if kind == _STRING:
        return _string(handle, path)
    if kind == _ARRAY:
        inner, length = _unpack(handle, "<IQ", path)
        if length > MAX_ARRAY or inner == _ARRAY:
            raise EdgeUsageError(f"{path}: metadata {key!r}: an array of {length} (type {inner}) is not a GGUF header's")
        if inner in _SCALARS:
            size = struct.calcsize(_SCALARS[inner])
            if length > KEEP_ARRAY:
                handle.seek(size * length, 1)
                return Length(length)
            return [_unpack(handle, _SCALARS[inner], path)[0] for _ in range(length)]
        if inner == _STRING:
            if length <= KEEP_ARRAY:
                return [_string(handle, path) for _ in range(length)]
            # A vocabulary is kept as its length: its strings are skipped, never held (2**24 of them
            # would be gigabytes of str in the pytest process).
            end = os.fstat(handle.fileno()).st_size
            for _ in range(length):
                (size,) = _unpack(handle, "<Q", path)
                if size > MAX_STRING or handle.seek(size, 1) > end:
                    raise EdgeUsageError(f"{path}: metadata {key!r}: a string of {size} bytes past the header's "
                                         "end: a corrupt or truncated header")
            return Length(length)
    raise EdgeUsageError(f"{path}: metadata {key!r} has an unknown GGUF type {kind}")


def from_gguf(path: Path) -> LlmConfig | None:
    """The decoder configuration in a ``.gguf``'s metadata, by llama.cpp's key names
    (``general.architecture`` = ARCH, then ``ARCH.block_count``, ``ARCH.attention.head_count``,
    ``ARCH.attention.head_count_kv``, ``ARCH.attention.key_length`` or ``ARCH.embedding_length`` /
    heads, ``ARCH.context_length``, and the vocabulary's length); None for another file."""
    path = Path(path)
    if path.suffix != ".gguf":
        return None

    try:
        split_shards(path)  # a later shard of a split GGUF holds no configuration: name the first
    except EdgeError as exc:
        raise EdgeUsageError(str(exc)) from None
    names: list[str] = []
    data = read_metadata(path, names)
    arch = data.get("general.architecture")
    if not isinstance(arch, str):
        raise EdgeUsageError(f"{path}: GGUF metadata lacks general.architecture")

    def number(name: str, default: int | None = None) -> int | None:
        value = data.get(f"{arch}.{name}", default)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    heads = number("attention.head_count")
    embedding = number("embedding_length")
    vocab = number("vocab_size") or _length(data.get("tokenizer.ggml.tokens"))
    values = {"n_layers": number("block_count"), "n_heads": heads,
              "n_kv_heads": number("attention.head_count_kv", heads),
              "head_dim": number("attention.key_length") or (embedding // heads if embedding and heads else None),
              "max_context": number("context_length"), "vocab_size": vocab}
    missing = [k for k, v in values.items() if not v or v <= 0]
    if missing:
        raise EdgeUsageError(f"{path}: GGUF metadata (architecture {arch!r}) lacks {', '.join(missing)} "
                             f"({arch}.block_count, .attention.head_count[_kv], .embedding_length, .context_length, "
                             "tokenizer.ggml.tokens), which the KV-cache estimate and the prompt bounds need")
    blocks = _blocks(path, names)
    if blocks and blocks != values["n_layers"]:  # llama.cpp aborts the process on a missing block's tensors
        raise EdgeUsageError(f"{path}: GGUF metadata says {arch}.block_count {values['n_layers']} but its tensors "
                             f"hold {blocks} blocks (blk.0 … blk.{blocks - 1}): the metadata does not describe "
                             "these weights")
    return _checked(LlmConfig(**values, dtype=LLAMA_CPP_CACHE_DTYPE, source=f"{path} (GGUF metadata)"), path)


def _blocks(path: Path, names: list[str]) -> int | None:
    """How many transformer blocks (``blk.N.*``) the tensors of the artifact hold, the shards of a
    split GGUF read too; None where none is named so."""

    names = list(names)
    for shard in split_shards(path):
        if not (path.parent / shard).is_file():
            return None  # not counted: the artifact's files are checked, and a missing one named, at its load
        read_metadata(path.parent / shard, names)
    numbers = {int(n.split(".")[1]) for n in names if n.startswith("blk.") and n.split(".")[1:2] != [""]
               and n.split(".")[1].isdigit()}
    return max(numbers) + 1 if numbers else None


def _length(value: MetadataValue | None) -> int | None:
    if isinstance(value, list):
        return len(value)
    return int(value) if isinstance(value, Length) else None


SHARD = re.compile(r"(?P<prefix>.+)-(?P<number>\d{5})-of-(?P<count>\d{5})\.gguf")


def split_shards(artifact: Path, backend: str = "llama.cpp") -> tuple[str, ...]:
    """The other shards' names of a split GGUF named by its first shard; () for a whole file.
    BackendError naming the file for a later shard (llama.cpp loads only from the first)."""
    found = SHARD.fullmatch(artifact.name)
    if found is None or int(found["count"]) < 2:
        return ()
    number, count = int(found["number"]), int(found["count"])
    first = f"{found['prefix']}-00001-of-{found['count']}.gguf"
    if number != 1 or count > 9999:
        raise BackendError(f"{artifact} ({backend}): shard {number} of a GGUF split in {count}: name the first, "
                           f"{first} (llama.cpp loads the model from it and finds the others by name)")
    return tuple(f"{found['prefix']}-{n:05d}-of-{found['count']}.gguf" for n in range(2, count + 1))
