"""Issue 49, round 4's worst cases replayed (benchmarks/probe_round4_replay.py runs them all, through
pytest and the CLI, capped): the cheap ones as tests here, and ``pytest-edge inspect`` on a file of
every registered suffix (item 5: a ``.gguf``, a ``.litertlm`` and the speech runtimes' files were
"not found"). Fast: inspect's own calls, no measured run."""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
from pathlib import Path

import pytest

from edge_helpers import FIXTURES
from pytest_edge.backends import all_backends
from pytest_edge.cli.inspect import export_summary, inspect_command

# A real file of each registered suffix: the exporters' own outputs (fixtures/); ".xml" is
# converted in the test by OpenVINO itself.
REAL_FILES = {
    ".gguf": FIXTURES / "llm" / "gguf_llama" / "model.gguf",
    ".litertlm": FIXTURES / "llm" / "litertlm_llama_int8" / "model.litertlm",
    ".mnn": FIXTURES / "tiny_mlp.mnn",
    ".ncnn.param": FIXTURES / "tiny_mlp.ncnn.param",
    ".onnx": FIXTURES / "tiny_mlp.onnx",
    ".pte": FIXTURES / "tiny_mlp.pte",
    ".tflite": FIXTURES / "tiny_mlp.tflite",
    "ctranslate2/model.bin": FIXTURES / "speech" / "whisper_vocab" / "ctranslate2" / "model.bin",
    "ggml-model.bin": FIXTURES / "speech" / "whisper_vocab" / "ggml-model.bin",
    "sherpa-onnx/whisper-encoder.onnx": FIXTURES / "speech" / "whisper_vocab" / "sherpa-onnx" / "whisper-encoder.onnx",
}
SUFFIXES = sorted({suffix for backend in all_backends().values() for suffix in backend.artifact_suffixes()})


def _inspect(path: Path, backends: str = "") -> tuple[int, str]:
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        status = inspect_command(argparse.Namespace(model=str(path), model_dir=[], target=[], backends=backends))
    return status, said.getvalue()


def _real(suffix: str, folder: Path) -> Path:
    if suffix == ".xml":
        ov = pytest.importorskip("openvino")
        target = folder / "tiny_mlp.xml"
        ov.save_model(ov.convert_model(str(REAL_FILES[".onnx"])), str(target))
        return target
    assert suffix in REAL_FILES, f"a registered suffix {suffix!r} has no real file here: add one to REAL_FILES"
    return REAL_FILES[suffix]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_inspect_answers_a_real_file_of_every_registered_suffix(suffix: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _real(suffix, tmp_path)
    status, said = _inspect(path)
    assert status == 0, said
    assert "not found" not in said and "Traceback" not in said
    summary = export_summary(path)
    if summary is None:  # a tensor model's file: its coverage table, a row per backend reading it
        assert "delegated" in said.splitlines()[0] and ("delegated" in said.splitlines()[2] or "error:" in said), said
    else:  # a decoder's or a speech export's: its configuration and size
        assert f"{path.stat().st_size:,} bytes" in said and "vocabulary" in said, said
        assert summary.figures and all(value for _, value in summary.figures)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_inspect_names_a_junk_file_of_every_registered_suffix(suffix: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    junk = tmp_path / "export" / ("m" + suffix if suffix.startswith(".") else suffix)
    junk.parent.mkdir(parents=True)
    junk.write_bytes(b"not a model at all " * 10)
    status, said = _inspect(junk)
    assert "Traceback" not in said and "not found" not in said
    assert str(junk) in said, said  # the file named, whatever refused it
    if status == 0:  # the coverage table: every row an error, none a placement of junk
        rows = said.splitlines()[2:]
        assert rows and all("error:" in row for row in rows), said
    else:
        assert status == 2 and said.startswith("pytest-edge inspect: "), said


def test_the_decoder_summary_is_what_the_gguf_metadata_says(tmp_path: Path) -> None:
    summary = export_summary(REAL_FILES[".gguf"])
    assert summary is not None and summary.readers == ("llama.cpp",)
    figures = dict(summary.figures)
    # make_llm_exports.py's tiny Llama: 2 layers, 4 heads (2 key/value), a 256-token vocabulary.
    assert (figures["layers"], figures["attention heads"], figures["key/value heads"], figures["vocabulary"]) == \
        ("2", "4", "2", "256")
    assert "GGUF metadata" in summary.source


def test_a_cut_gguf_is_an_error_naming_it(tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(REAL_FILES[".gguf"].read_bytes()[:3000])
    status, said = _inspect(cut)
    assert status == 2 and f"{cut} (llama.cpp)" in said and "truncated" in said, said


def test_a_whisper_file_whose_header_is_not_ggml_is_named(tmp_path: Path) -> None:
    export = tmp_path / "export"
    shutil.copytree(REAL_FILES["ggml-model.bin"].parent, export,
                    ignore=shutil.ignore_patterns("*.onnx", "ctranslate2", "ggml-model.bin"))
    (export / "ggml-model.bin").write_bytes(b"\0" * 100)
    status, said = _inspect(export / "ggml-model.bin")
    assert status == 2 and f"{export / 'ggml-model.bin'} (whisper-cpp): magic 0x0" in said, said


# ------------------------------------------------------------------- round 4's Ethos-U .pte cases

ETHOS_PTE = FIXTURES / "npu" / "tiny_mlp_ethos_u55.pte"


def _flipped(folder: Path) -> Path:
    """The .pte with 400 bytes in the middle of its Ethos-U delegate's payload inverted (the probe's)."""
    from pytest_edge.backends.executorch.program import delegate_payload, forward_plan, read_plans

    data = bytearray(ETHOS_PTE.read_bytes())
    plan = forward_plan(read_plans(bytes(data)))
    assert plan is not None
    payload = delegate_payload(bytes(data), plan.delegate_data[0])
    start = bytes(data).find(payload) + len(payload) // 2 - 200
    for index in range(start, start + 400):
        data[index] ^= 0xFF
    target = folder / ETHOS_PTE.name
    target.write_bytes(bytes(data))
    return target


def test_the_projects_own_ethos_u_pte_inspects_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ethosu.vela")
    monkeypatch.chdir(tmp_path)
    status, said = _inspect(ETHOS_PTE, backends="ethos-u*")  # round 4: a TypeError formatting None
    assert status == 0 and "Traceback" not in said and "None" not in said, said
    assert "ethos-u55-128  2/4 delegated" in said and "compiled by vela" in said, said


def test_a_flipped_delegate_beside_its_tosa_is_an_error_naming_the_pte(tmp_path: Path) -> None:
    pytest.importorskip("ethosu.vela")
    from pytest_edge.backends.ethos_u.pte import compile_pte
    from pytest_edge.errors import BackendError

    flipped = _flipped(tmp_path)
    shutil.copy(ETHOS_PTE.with_suffix(".tosa"), tmp_path)
    with pytest.raises(BackendError, match=rf"{flipped} \(ethos-u55-128\): .*not its delegate's TOSA graph"):
        compile_pte(flipped, "ethos-u55-128", 120, "test")


def test_a_flipped_delegate_alone_is_judged_on_its_sizes_and_says_so(tmp_path: Path) -> None:
    """The known limit (docs/npu.md): nothing here reads a command stream's bytes; what is judged
    (the blocks' sizes) is the intact program's, and the figures say approximate, no estimate."""
    from pytest_edge.backends.ethos_u.pte import compile_pte

    flipped = compile_pte(_flipped(tmp_path), "ethos-u55-128", 120, "test")
    (tmp_path / "intact").mkdir()
    intact = compile_pte(Path(shutil.copy(ETHOS_PTE, tmp_path / "intact")), "ethos-u55-128", 120, "test")
    assert flipped.coverage.approximate and flipped.estimated_ms is None
    assert flipped.memories == intact.memories and flipped.memories["command_stream"] > 0


@pytest.mark.parametrize("npu", [None, {"memories": None}, {"memories": {"sram": None, "off_chip_flash": "same"}}])
def test_a_baseline_without_npu_figures_is_said_not_compared(npu: object) -> None:
    """A stored record whose NPU block (or one of its memories) is null compared nothing of it: a
    note names what was not compared, where the gate said only '1 compared, 0 regressed'."""
    from pytest_edge.backends import get_backend
    from pytest_edge.core.record import Record
    from pytest_edge.judging.figures import GateFigures
    from pytest_edge.run.pipeline import compiled_gate

    compiled = get_backend("ethos-u55-128").compiler.compile(FIXTURES / "npu" / "kws_dscnn_int8.tflite", {}, 300)
    mine = Record(test="t.py::test_npu", model={"name": "m", "artifact": "m.tflite"}, backend="ethos-u55-128",
                  artifact_bytes=5568, npu=compiled)
    if npu and npu["memories"]:  # the candidate's own flash: compared and equal
        npu = {"memories": {"sram": None, "off_chip_flash": mine.to_json()["npu"]["memories"]["off_chip_flash"]}}
    stored = {"test": "t.py::test_npu", "backend": "ethos-u55-128", "model": {"name": "m", "artifact": "m.tflite"},
              "artifact_bytes": 5568, "npu": npu}
    gate = compiled_gate(mine, GateFigures.from_json(stored, source="base.json"), "base.json", paired=False,
                         max_regression=0.10)
    assert gate.failures == [] and ("NPU memory" in gate.summary.compared) == bool(npu and npu["memories"])
    (note,) = gate.notes
    assert note.startswith("ethos-u55-128: not compared: ") and "SRAM" in note and "the baseline (base.json)" in note
    assert ("off-chip flash" in note) == (not (npu and npu["memories"]))
