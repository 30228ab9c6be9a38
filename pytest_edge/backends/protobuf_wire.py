"""Protocol Buffers' wire format, read without the ``onnx`` package (its import costs a measuring
process 0.6 s): the fields of one message, for the readers of an ``.onnx`` file's external data
(onnxruntime/external_data.py), its graph's inputs and outputs (onnxruntime/graph_io.py) and
sherpa-onnx's encoder metadata (sherpa_onnx/speech.py). Bounded: a varint of more than 64 bits, a
length past the end or a group is :class:`Malformed`, never a read beyond the buffer."""

from __future__ import annotations

from typing import Iterator


class Malformed(ValueError):
    """Not a protobuf message this reader can walk (the runtime will say what is wrong with the file)."""


def varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def fields(data: memoryview) -> Iterator[tuple[int, int, int | memoryview | None]]:
    """(field number, wire type, value) of one message: an int for varints, a memoryview for
    length-delimited fields, None for the fixed-size ones (skipped)."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
            yield number, wire, value
        elif wire == 2:
            size, pos = varint(data, pos)
            if pos + size > len(data):
                raise Malformed(f"field {number}'s length runs past the end")
            yield number, wire, data[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            yield number, wire, None
        else:  # groups (3, 4) are not used by onnx.proto
            raise Malformed(f"wire type {wire} of field {number}")
    if pos != len(data):
        raise Malformed("the last field runs past the end")
