"""Frames of the worker protocol: the codec that executes nothing (a JSON header followed by the
raw bytes of every NumPy array in the message; no pickle) and the bounded reading of frames off a
stream (a device's stdout).

Frame: ``b"PEDG"``, protocol version (u16), header length (u32), header (UTF-8 JSON), then the
array buffers in the order the header lists them. Arrays are limited to bool/int/float dtypes;
frames and headers have size limits.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from typing import Any

import numpy as np

from .protocol import PROTOCOL_VERSION, ProtocolError

MAGIC = b"PEDG"
_PREFIX = struct.Struct("<4sHI")
MAX_HEADER_BYTES = 16 * 2**20
MAX_FRAME_BYTES = 4 * 2**30
_DTYPES = {np.dtype(t).str for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                      "uint64", "float16", "float32", "float64")}


# ------------------------------------------------------------------ reading frames off a stream

# The most a reply to the host may hold (outputs, intermediates, timing samples): a peer claiming
# more is refused before anything is allocated.
MAX_REPLY_BYTES = 2**30
_LENGTH = struct.Struct("!i")  # multiprocessing.Connection's length prefix, before each frame
_LONG_LENGTH = struct.Struct("!Q")  # after a prefix of -1: the length of a frame past 2 GiB


class Channel:
    """Frames over one file descriptor (a socket, a pipe) in ``multiprocessing.Connection``'s
    framing, byte for byte: a signed 4-byte big-endian length (-1, then an unsigned 8-byte one, past
    2 GiB), then the frame; either side may be a Connection (a test's, an older peer's). Without
    importing multiprocessing, which a worker's start paid ~11 ms of CPU for (multiprocessing,
    tempfile, socket), and which neither NumPy nor a runtime imports. Closed at garbage collection,
    as a Connection is."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def fileno(self) -> int:
        if self._fd is None:
            raise OSError("handle is closed")
        return self._fd

    def send_bytes(self, data: bytes) -> None:
        size = len(data)
        header = _LENGTH.pack(size) if size <= 0x7FFFFFFF else _LENGTH.pack(-1) + _LONG_LENGTH.pack(size)
        if size > 16384:  # as Connection writes it: a large frame is not copied behind its header
            self._write(header)
            self._write(data)
        else:
            self._write(header + data)

    def recv_bytes(self, limit: int) -> bytes:
        """The next frame; EOFError where the stream ended before it, OSError where it ended inside
        it or announced more than ``limit`` bytes (the channel is closed then, as Connection does)."""
        (size,) = _LENGTH.unpack(self._read(_LENGTH.size))
        if size == -1:
            (size,) = _LONG_LENGTH.unpack(self._read(_LONG_LENGTH.size))
        if size < 0 or size > limit:  # a negative length (not -1) is no frame: Connection would read it as empty
            self.close()
            raise OSError("bad message length")
        return self._read(size)

    def _write(self, data: bytes) -> None:
        view, fd = memoryview(data), self.fileno()
        while view:
            view = view[os.write(fd, view):]

    def _read(self, count: int) -> bytes:
        chunks, got, fd = [], 0, self.fileno()
        while got < count:
            chunk = os.read(fd, count - got)
            if not chunk:
                if got == 0:
                    raise EOFError
                raise OSError("got end of file during message")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __del__(self) -> None:
        self.close()


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
