"""The messages between the pytest process and a backend worker, and their codec.

Typed requests (one dataclass per operation, fields by name, as pytest-xdist's controller sends
named commands), versioned, with a codec that executes nothing: a frame is a JSON header followed
by the raw bytes of every NumPy array in the message. No pickle, so the same protocol can later
cross a machine boundary (a device over SSH or adb) without a peer being able to run code on the
other side. Arrays are limited to bool/int/float dtypes; frames and headers have size limits.

Frame: ``b"PEDG"``, protocol version (u16), header length (u32), header (UTF-8 JSON), then the
array buffers in the order the header lists them.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from ..errors import BackendError

PROTOCOL_VERSION = 4  # 2: Load.external (an .onnx's external data files on a device); 3: Load.shapes an InputShapes;
# 4: Load.decoder, Generate, MeasureGeneration (decoder LLMs)
MAGIC = b"PEDG"
_PREFIX = struct.Struct("<4sHI")
MAX_HEADER_BYTES = 16 * 2**20
MAX_FRAME_BYTES = 4 * 2**30
_DTYPES = {np.dtype(t).str for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                      "uint64", "float16", "float32", "float64")}


class ProtocolError(BackendError):
    """A frame that is malformed, oversized, of another protocol version, or holds what the codec
    refuses (pickled objects, unknown dtypes)."""


# ------------------------------------------------------------------ requests


@dataclass
class Request:
    op: ClassVar[str]


@dataclass
class Load(Request):
    """Load an artifact under ``key``; describe it (coverage unless a measuring worker)."""

    op: ClassVar[str] = "load"
    key: str
    path: str
    threads: int | None
    shapes: dict[str, Any] = field(default_factory=dict)  # backends.InputShapes.to_json()
    with_coverage: bool = True
    # On a device: the external data files of an .onnx, by location, as content names in its cache.
    external: dict[str, str] = field(default_factory=dict)
    # A decoder LLM's configuration (backends.decoder_config.LlmConfig's fields): the artifact is opened as a
    # decoder (Backend.open_decoder), not as a tensor model; Generate and MeasureGeneration run it.
    decoder: dict[str, Any] | None = None


@dataclass
class Generate(Request):
    """Greedy decoding of ``new_tokens`` after ``prompt`` on the decoder loaded under ``key``: the
    tokens, the logits the first was chosen from, the prefill and per-token times."""

    op: ClassVar[str] = "generate"
    key: str
    prompt: list[int]
    new_tokens: int


@dataclass
class MeasureGeneration(Request):
    """``warmup`` discarded generations, then ``runs`` timed ones (TTFT and TPOT samples), and the
    memory the decoder took over this process's baseline (a fresh measuring worker)."""

    op: ClassVar[str] = "measure_generation"
    key: str
    prompt: list[int]
    new_tokens: int
    warmup: int
    runs: int


@dataclass
class Run(Request):
    op: ClassVar[str] = "run"
    key: str
    feeds: list[np.ndarray]
    reset: bool = True


@dataclass
class Measure(Request):
    """The timing and memory protocol in this worker: ``warmup`` runs, then at least ``runs`` timed
    runs taking at least ``min_time_s`` together."""

    op: ClassVar[str] = "measure"
    key: str
    feeds: list[np.ndarray]
    warmup: int
    runs: int
    min_time_s: float = 0.0


@dataclass
class Count(Request):
    """Counted mode, in a worker running under Valgrind's callgrind: ``warmup`` runs uncounted, then
    the instructions (and simulated cache misses) of ``runs`` runs, per inference."""

    op: ClassVar[str] = "count"
    key: str
    feeds: list[np.ndarray]
    warmup: int
    runs: int


@dataclass
class ReadIntermediates(Request):
    """One run of ``key`` that keeps the tensors computed on the way (a backend's ``Intermediates``)."""

    op: ClassVar[str] = "intermediates"
    key: str
    feeds: list[np.ndarray]


@dataclass
class Start(Request):
    """The first request to a device worker (``--stdio``): which backend to serve."""

    op: ClassVar[str] = "start"
    backend: str


@dataclass
class Has(Request):
    """Does the device's artifact cache hold ``name`` (``<sha256><suffix>``)?"""

    op: ClassVar[str] = "has"
    name: str


@dataclass
class Put(Request):
    """Store an artifact in the device's cache under its content name (checked on arrival)."""

    op: ClassVar[str] = "put"
    name: str
    data: np.ndarray  # uint8


@dataclass
class Ping(Request):
    op: ClassVar[str] = "ping"


@dataclass
class Exit(Request):
    op: ClassVar[str] = "exit"


REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (Load, Run, Measure, Count, ReadIntermediates, Start, Has, Put,
                                                                Ping, Exit, Generate, MeasureGeneration)}


def request_json(request: Request) -> dict[str, Any]:
    return {"op": request.op, "args": {f.name: getattr(request, f.name) for f in fields(request)}}


def request_from(message: Any) -> Request:
    """The typed request a decoded message names; ProtocolError for anything else."""
    if not isinstance(message, dict) or message.get("op") not in REQUESTS or not isinstance(message.get("args"), dict):
        raise ProtocolError(f"not a request: {str(message)[:200]}")
    cls = REQUESTS[message["op"]]
    names = {f.name for f in fields(cls)}
    unknown = set(message["args"]) - names
    if unknown:
        raise ProtocolError(f"{cls.op}: unknown field(s) {sorted(unknown)}")
    try:
        return cls(**message["args"])
    except TypeError as exc:
        raise ProtocolError(f"{cls.op}: {exc}") from None


def ok(value: Any) -> dict[str, Any]:
    return {"ok": True, "value": value}


def failure(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "message": message}


def hello(backend: str, machine: dict[str, Any] | None = None, runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    """The worker's first frame: who it is, which protocol it speaks, and (a device) its machine."""
    from .. import __version__

    return {"ok": True, "value": {"protocol": PROTOCOL_VERSION, "plugin": __version__, "backend": backend,
                                  "machine": machine, "runtime": runtime}}


# ------------------------------------------------------------------ reading frames off a stream

# The most a reply to the host may hold (outputs, intermediates, timing samples): a peer claiming
# more is refused before anything is allocated.
MAX_REPLY_BYTES = 2**30
_LENGTH = struct.Struct("!i")  # multiprocessing.Connection's length prefix, before each frame


class FrameTimeout(ProtocolError):
    """No whole frame arrived before the deadline."""


def read_frame(fd: int, deadline: float, limit: int = MAX_REPLY_BYTES) -> bytes:
    """One frame as ``Connection.send_bytes`` wrote it (a 4-byte length, then the frame), read off
    ``fd`` with every read bounded by ``deadline`` (``time.monotonic()``), the length checked
    against ``limit`` and the frame's magic checked before its body is read: a login banner or motd
    printed on a device's stdout is named, not taken for a length to wait for."""
    prefix = _read_exact(fd, _LENGTH.size + len(MAGIC), deadline)
    (size,) = _LENGTH.unpack_from(prefix)
    if prefix[_LENGTH.size:] != MAGIC:
        raise ProtocolError(f"the peer sent {_shown(prefix + _read_available(fd))} where a pytest-edge frame "
                            "was expected: something printed on its stdout (a login banner or motd, a shell "
                            "profile's echo); make the command print nothing else (ssh -q, a non-login shell)")
    if size < len(MAGIC) or size > limit:
        raise ProtocolError(f"the peer announced a frame of {size} bytes (the limit is {limit}); refused before "
                            "reading it")
    return prefix[_LENGTH.size:] + _read_exact(fd, size - len(MAGIC), deadline)


def _read_exact(fd: int, count: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < count:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise FrameTimeout(f"{got} of {count} bytes of a frame arrived before the deadline")
        chunk = os.read(fd, min(count - got, 1 << 20))
        if not chunk:
            raise EOFError(f"the stream ended after {got} of {count} bytes of a frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_available(fd: int, most: int = 64) -> bytes:
    """What else the peer already sent (to quote it), without waiting."""
    if select.select([fd], [], [], 0)[0]:
        try:
            return os.read(fd, most)
        except OSError:
            return b""
    return b""


def _shown(data: bytes) -> str:
    return repr(data[:72].decode("utf-8", "replace"))


# ------------------------------------------------------------------ codec


def encode(message: Any) -> bytes:
    """One frame: the JSON header with every array replaced by a reference, then the arrays' bytes."""
    buffers: list[bytes] = []
    header = json.dumps(_lower(message, buffers), allow_nan=True, separators=(",", ":")).encode()
    frame = b"".join([_PREFIX.pack(MAGIC, PROTOCOL_VERSION, len(header)), header, *buffers])
    if len(frame) > MAX_FRAME_BYTES:
        raise ProtocolError(f"message of {len(frame)} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    return frame


def decode(frame: bytes) -> Any:
    if len(frame) < _PREFIX.size:
        raise ProtocolError(f"truncated frame ({len(frame)} bytes)")
    magic, version, header_len = _PREFIX.unpack_from(frame)
    if magic != MAGIC:
        raise ProtocolError(f"not a pytest-edge frame (starts with {frame[:4]!r})")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version} from the peer, this side speaks {PROTOCOL_VERSION}; "
                            "install the same pytest-edge on both sides")
    if header_len > MAX_HEADER_BYTES or _PREFIX.size + header_len > len(frame):
        raise ProtocolError(f"header of {header_len} bytes does not fit the frame ({len(frame)} bytes)")
    try:
        header = json.loads(frame[_PREFIX.size:_PREFIX.size + header_len])
    except ValueError as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    body = memoryview(frame)[_PREFIX.size + header_len:]
    offsets = [0]
    return _raise(header, body, offsets)


def _lower(value: Any, buffers: list[bytes]) -> Any:
    if isinstance(value, np.generic):  # a NumPy scalar in a reply is a plain number on the other side
        return _lower(value.item(), buffers)
    if isinstance(value, np.ndarray):
        array = value
        if array.dtype.str not in _DTYPES:
            raise ProtocolError(f"arrays of dtype {array.dtype} cannot be sent")
        data = np.ascontiguousarray(array).tobytes() if array.ndim else array.tobytes()
        buffers.append(data)
        return {"__array__": [array.dtype.str, list(array.shape), len(data)]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and "__array__" not in value and "__map__" not in value:
            return {k: _lower(v, buffers) for k, v in value.items()}
        return {"__map__": [[_lower(k, buffers), _lower(v, buffers)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_lower(v, buffers) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return value  # JSON with NaN/Infinity, which Python's json reads back
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ProtocolError(f"cannot send a {type(value).__name__}")


def _raise(value: Any, body: memoryview, offsets: list[int]) -> Any:
    if isinstance(value, list):
        return [_raise(v, body, offsets) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        try:
            dtype_str, shape, size = value["__array__"]
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ProtocolError(f"malformed array reference {value!r}") from None
        if dtype_str not in _DTYPES or any(d < 0 for d in shape):
            raise ProtocolError(f"array of dtype {dtype_str!r} and shape {shape} refused")
        dtype = np.dtype(dtype_str)
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        start = offsets[0]
        if size != expected or start + size > len(body):
            raise ProtocolError(f"array of shape {shape} ({dtype}) needs {expected} bytes, the frame has "
                                f"{len(body) - start} left")
        offsets[0] = start + size
        return np.frombuffer(body[start:start + size], dtype=dtype).reshape(shape).copy()
    if "__map__" in value:
        return {_hashable(_raise(k, body, offsets)): _raise(v, body, offsets) for k, v in value["__map__"]}
    return {k: _raise(v, body, offsets) for k, v in value.items()}


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


__all__ = ["PROTOCOL_VERSION", "ProtocolError", "Request", "Load", "Run", "Measure", "ReadIntermediates", "Start",
           "Has", "Put", "Ping", "Exit", "encode", "decode", "request_json", "request_from", "ok", "failure", "hello"]
