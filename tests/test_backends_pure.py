"""The pure modules of backends/ (no runtime needed): protobuf_wire (an ``.onnx`` file's fields read
without the onnx package, bounded on any bytes), decoder_search (the decoder LLMs ``pytest-edge init``
finds in a project), native_output (a native runtime's stderr captured around a call) and
executorch/dtypes (ExecuTorch's ScalarType codes as NumPy dtypes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_edge.backends.decoder_search import Decoders, FoundDecoder, find_decoders
from pytest_edge.backends.executorch.dtypes import INTERMEDIATE_TYPES, SCALAR_TYPES
from pytest_edge.backends.native_output import MAX_CHARS, Said, native_stderr
from pytest_edge.backends.protobuf_wire import Malformed, fields, varint

# ------------------------------------------------------------------ protobuf_wire


def tiny_onnx() -> bytes:
    """A ModelProto (ir_version 8, one Relu), serialized by the onnx package's helpers."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytest-edge")
    model.ir_version = 8
    return model.SerializeToString()


def test_fields_walk_an_onnx_model_as_the_onnx_package_wrote_it() -> None:
    """ModelProto: ir_version (1, varint), producer_name (2), graph (7); GraphProto: node (1), name
    (2), input (11), output (12); ValueInfoProto: name (1)."""
    top = {number: value for number, _, value in fields(memoryview(tiny_onnx()))}
    assert top[1] == 8 and bytes(top[2]) == b"pytest-edge"
    graph = list(fields(top[7]))
    assert bytes(next(v for n, _, v in graph if n == 2)) == b"tiny"

    def names(number: int) -> list[str]:
        return [bytes(next(v for n, w, v in fields(value) if n == 1)).decode() for n, _, value in graph if n == number]

    assert names(11) == ["x"] and names(12) == ["y"]


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63, 2**64 - 1])
def test_varint_reads_what_protobuf_writes(value: int) -> None:
    encoded = bytearray()
    rest = value
    while True:
        encoded.append((rest & 0x7F) | (0x80 if rest > 0x7F else 0))
        rest >>= 7
        if not rest:
            break
    assert varint(memoryview(bytes(encoded) + b"\x05"), 0) == (value, len(encoded))


def test_varint_longer_than_64_bits_or_cut_short_is_malformed() -> None:
    with pytest.raises(Malformed, match="truncated varint"):
        varint(memoryview(b"\xff" * 10 + b"\x01"), 0)
    with pytest.raises(Malformed, match="truncated varint"):
        varint(memoryview(b"\x80\x80"), 0)


def test_fixed_size_fields_are_skipped_and_their_values_none() -> None:
    data = bytes([(3 << 3) | 5]) + b"\x00" * 4 + bytes([(4 << 3) | 1]) + b"\x00" * 8 + bytes([(5 << 3) | 0, 42])
    assert list(fields(memoryview(data))) == [(3, 5, None), (4, 1, None), (5, 0, 42)]


@pytest.mark.parametrize(("data", "message"), [
    (bytes([(1 << 3) | 2, 5]) + b"abc", "field 1's length runs past the end"),
    (bytes([(2 << 3) | 3]), "wire type 3 of field 2"),  # a group
    (bytes([(2 << 3) | 7]), "wire type 7 of field 2"),
    (bytes([(6 << 3) | 1]) + b"\x00" * 3, "the last field runs past the end"),  # a fixed64 cut short
])
def test_malformed_messages_say_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(Malformed, match=message):
        list(fields(memoryview(data)))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_are_fields_or_malformed_never_another_error(data: bytes) -> None:
    try:
        found = list(fields(memoryview(data)))
    except Malformed:
        return
    for _, wire, value in found:  # whatever was read lies within the buffer
        assert wire in (0, 1, 2, 5)
        assert not isinstance(value, memoryview) or len(value) <= len(data)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_truncated_onnx_model_is_malformed_or_a_prefix_never_an_index_error(data: st.DataObject) -> None:
    whole = tiny_onnx()
    cut = data.draw(st.integers(0, len(whole) - 1))

    def walk(message: memoryview, depth: int = 0) -> None:
        for _, wire, value in fields(message):
            if wire == 2 and depth < 3:
                try:
                    walk(value, depth + 1)  # a string is not always a message: its own Malformed
                except Malformed:
                    pass

    try:
        walk(memoryview(whole[:cut]))
    except Malformed:
        pass


# ------------------------------------------------------------------ decoder_search


def folders(root: Path) -> list[Path]:
    return [root, *sorted(p for p in root.rglob("*") if p.is_dir())]


def relative(path: Path, base: Path) -> str:
    return path.relative_to(base).as_posix() or "."


HF = {"architectures": ["LlamaForCausalLM"], "vocab_size": 320, "num_hidden_layers": 2, "num_attention_heads": 4,
      "hidden_size": 64, "max_position_embeddings": 512}
GENAI = {"model": {"vocab_size": 640, "context_length": 256, "decoder": {
    "filename": "decoder.onnx", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_size": 16}}}
OWN = {"vocab_size": 96, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "head_dim": 8, "max_context": 64}


def project(root: Path) -> Path:
    """An Optimum folder, a GenAI folder, an ONNX decoder with a hand-written configuration, a tensor
    model, and a GenAI folder whose configuration names a file outside it."""
    def write(path: str, content: str | bytes = b"onnx") -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content if isinstance(content, bytes) else content.encode())

    write("models/optimum/model.onnx")
    write("models/optimum/config.json", json.dumps(HF))
    write("models/genai/decoder.onnx")
    write("models/genai/genai_config.json", json.dumps(GENAI))
    write("models/mine/tiny_llm.onnx")
    write("models/mine/tiny_llm.json", json.dumps(OWN))
    write("models/mine/classifier.onnx")
    write("models/bad/genai_config.json", json.dumps({"model": {"decoder": {"filename": "../escape.onnx"}}}))
    return root


def test_find_decoders_finds_each_export_with_its_vocabulary(tmp_path: Path) -> None:
    root = project(tmp_path)
    found = find_decoders(root, root, folders, relative)
    assert sorted((d.model, d.what, d.vocab_size) for d in found.found) == [
        ("models/genai", "ONNX Runtime GenAI folder", 640),
        ("models/mine/tiny_llm", "ONNX decoder with a hand-written configuration", 96),
        ("models/optimum", "Optimum ONNX folder", 320)]
    assert sorted(p.relative_to(root).as_posix() for p in found.artifacts) == [
        "models/genai/decoder.onnx", "models/mine/tiny_llm.onnx", "models/optimum/model.onnx"]
    # The tensor model is no decoder; the bad folder is said with why.
    [bad] = found.not_covered
    assert bad.startswith("models/bad: ") and "model.decoder.filename must name a file in that folder" in bad


def test_a_folder_holding_one_decoder_alone_is_named_by_the_folder(tmp_path: Path) -> None:
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / "model.onnx").write_bytes(b"onnx")
    (tmp_path / "llm" / "model.json").write_text(json.dumps(OWN))
    found = find_decoders(tmp_path, tmp_path, folders, relative)
    assert [(d.model, d.vocab_size) for d in found.found] == [("llm", 96)]


def test_an_unreadable_hand_written_configuration_is_no_decoder(tmp_path: Path) -> None:
    (tmp_path / "net.onnx").write_bytes(b"onnx")
    (tmp_path / "net.json").write_text(json.dumps({**OWN, "n_heads": 3}))  # 3 heads over 2 kv heads
    assert find_decoders(tmp_path, tmp_path, folders, relative).found == []


def test_decoders_artifacts_are_every_found_decoders() -> None:
    found = Decoders([FoundDecoder("a", "x", 1, [Path("a/1.onnx"), Path("a/1.gguf")]), FoundDecoder("b", "y", 2)])
    assert found.artifacts == [Path("a/1.onnx"), Path("a/1.gguf")]


# ------------------------------------------------------------------ native_output


def test_native_stderr_captures_what_is_written_to_file_descriptor_2() -> None:
    before = os.fstat(2)
    with native_stderr() as said:
        os.write(2, b"layer pnnx.Expression not exists or registered\n\n  second line  \n")
        assert said.text == ""  # filled when the block ends
    assert said.text.startswith("layer pnnx.Expression")
    assert said.lines() == ["layer pnnx.Expression not exists or registered", "second line"]
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)  # fd 2 restored


def test_native_stderr_keeps_at_most_max_chars_and_restores_fd_2_after_an_exception() -> None:
    before = os.fstat(2)
    with pytest.raises(RuntimeError, match="load failed"):
        with native_stderr() as said:
            os.write(2, b"x" * (MAX_CHARS * 3))
            raise RuntimeError("load failed")
    assert said.text == "x" * MAX_CHARS
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)


def test_native_stderr_decodes_invalid_utf8_and_limits_lines() -> None:
    with native_stderr() as said:
        os.write(2, b"\xff bad byte\n" + b"".join(f"line {i}\n".encode() for i in range(10)))
    assert said.text.startswith("\ufffd bad byte")
    assert said.lines(limit=3) == ["\ufffd bad byte", "line 0", "line 1"]
    assert Said().lines() == []


def test_native_stderr_flushes_pythons_stderr_first() -> None:
    with native_stderr() as said:
        sys.stderr.write("")  # a block that prints nothing natively says nothing
    assert said.text == ""


# ------------------------------------------------------------------ executorch/dtypes


def test_scalar_types_are_c10s_codes_as_numpy_dtypes() -> None:
    """c10::ScalarType: Byte 0, Char 1, Short 2, Int 3, Long 4, Half 5, Float 6, Double 7, Bool 11;
    UInt16 27, UInt32 28, UInt64 29."""
    sizes = {code: np.dtype(name).itemsize for code, name in INTERMEDIATE_TYPES.items()}
    assert sizes == {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 27: 2, 28: 4, 29: 8}
    assert np.dtype(SCALAR_TYPES[0]).kind == "u" and np.dtype(SCALAR_TYPES[1]).kind == "i"
    assert np.dtype(SCALAR_TYPES[11]) == np.bool_
    assert SCALAR_TYPES.items() <= INTERMEDIATE_TYPES.items()

