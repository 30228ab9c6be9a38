"""edge_asr on ExecuTorch (docs/speech.md): fixtures/speech/whisper_vocab's model (a tiny Whisper
with Whisper's 51865-id vocabulary, trained on the two sentences) through optimum-executorch's
Whisper export (``executorch/model.pte``: fixtures/make_speech_executorch.py, recipe xnnpack), run
by ``executorch.runtime`` as optimum-executorch's own runtime drives it (encoder once, text_decoder
a token a call with its cache position), judged against ONNX Runtime's golden and PyTorch's greedy
tokens on the espeak-ng audio. Skipped with the reason where executorch is not installed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from pytest_edge.errors import BackendError
from pytest_edge.run.speech_plan import why_not

if TYPE_CHECKING:
    from pytest_edge.backends.executorch.speech import ExecuTorchRecognizer

pytest_plugins = ["pytester"]

SPEECH = Path(__file__).resolve().parent.parent / "fixtures" / "speech"
FLOAT = SPEECH / "whisper_vocab"
AUDIO = SPEECH / "audio"
GREEDY = json.loads((SPEECH / "whisper_vocab_greedy.json").read_text())["tokens"]
EXECUTORCH = "executorch"
# What the other runtimes' exports add to the folder: ExecuTorch's tests need none of it.
OTHERS = shutil.ignore_patterns("ggml-model.bin", "ctranslate2", "sherpa-onnx", "genai")

pytestmark = pytest.mark.skipif(why_not(EXECUTORCH) is not None, reason=str(why_not(EXECUTORCH)))


def _samples(name: str) -> np.ndarray:
    from pytest_edge.backends.speech_features import read_wav

    return read_wav(AUDIO / f"{name}.wav", 16000)


@pytest.fixture(scope="module")
def recognizer() -> "ExecuTorchRecognizer":
    from pytest_edge.run.speech_plan import open_recognizer

    return open_recognizer(EXECUTORCH, FLOAT, 1)


def test_executorch_export_gives_pytorch_tokens_and_forced_logits(recognizer: "ExecuTorchRecognizer") -> None:
    from pytest_edge.backends.speech import mask_suppressed
    from pytest_edge.run.speech_plan import open_recognizer

    reference = open_recognizer("onnxruntime-cpu", FLOAT, 1)
    # The exporter's cache (get_max_seq_len 64, --max_seq_len) and config.json's max_target_positions.
    assert recognizer.context == 64
    for name in ("hello", "weather"):
        expected = GREEDY[f"{name}.wav"]
        run = recognizer.transcribe(_samples(name), 12)
        assert run.tokens == expected and run.ended  # the sentence, then end-of-text
        assert 0 < run.features_ms and 0 < run.encoder_ms < run.first_token_ms <= run.total_ms
        assert run.decode_tps is not None and run.decode_tps > 0
        # A second run restarts at cache position 0: what the first left in the cache is masked.
        assert recognizer.transcribe(_samples(name), 12).tokens == expected
        forced = recognizer.teacher_force(_samples(name), expected)
        assert forced.shape == (len(expected), 51865)
        assert np.argmax(mask_suppressed(forced, recognizer.config), axis=1).tolist() == expected
        np.testing.assert_allclose(forced, reference.teacher_force(_samples(name), expected),
                                   atol=1e-4)  # measured: 5.2e-6 at most (XNNPACK's float32 kernels)
    wrong = [100, 200, 300, 400]  # forced: each row predicts having seen these, whatever they are
    assert recognizer.teacher_force(_samples("weather"), wrong).shape == (4, 51865)
    assert recognizer.teacher_force(_samples("weather"), wrong[:1]).shape == (1, 51865)
    with pytest.raises(BackendError, match=r"model.pte \(executorch\): 62 tokens after the forced start exceed "
                                           r"the decoder's context of 64"):
        recognizer.teacher_force(_samples("weather"), [100] * 62)  # positions 0-64: one past the cache


def test_the_program_is_optimum_executorchs_whisper_export() -> None:
    """What the recognizer reads of the .pte without the runtime: the methods optimum-executorch's
    Seq2SeqLMExportableModule writes, their shapes and its constant methods."""
    from pytest_edge.backends import get_backend
    from pytest_edge.backends.executorch.speech import program_figures

    figures = program_figures(FLOAT / "executorch" / "model.pte")
    assert {"encoder", "text_decoder", "sampler"} <= set(figures)
    (features,), (hidden,) = figures["encoder"]
    assert features.sizes == (1, 80, 3000) and hidden.sizes == (1, 1500, 32)
    inputs, (logits,) = figures["text_decoder"]
    assert [t.sizes for t in inputs] == [(1, 1), (1, 1500, 32), (1,)] and logits.sizes == (1, 1, 51865)
    own = dict(get_backend(EXECUTORCH).speech.file_figures(FLOAT))
    assert own["get_vocab_size"] == 51865 and own["get_max_seq_len"] == 64
    assert own["decoder_start_token_id"] == 50258 and own["get_eos_id"] == 50257


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "whisper_vocab"
    shutil.copytree(FLOAT, folder, ignore=OTHERS)
    return folder


def test_a_damaged_program_names_the_file_and_the_backend(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import open_recognizer

    folder = _copy(tmp_path)
    program = folder / "executorch" / "model.pte"
    data = program.read_bytes()
    program.write_bytes(data[:len(data) // 2])
    with pytest.raises(BackendError, match=r"executorch/model.pte is truncated: its header says \d+ bytes, the "
                                           r"file has \d+; re-export or re-download it \(executorch\)"):
        open_recognizer(EXECUTORCH, folder, 1)
    program.write_bytes(data[:4] + b"XX12" + data[8:])
    with pytest.raises(BackendError, match=r"model.pte is not an ExecuTorch program: bytes 4-8 are b'XX12'.* "
                                           r"\(executorch\)"):
        open_recognizer(EXECUTORCH, folder, 1)
    # A flatbuffer root offset past the end: ExecuTorch's own verifier refuses it, quoted.
    program.write_bytes(b"\xff\xff\xff\x7f" + data[4:])
    with pytest.raises(BackendError, match=r"model.pte \(executorch\): cannot load: Failed to load program, error: "
                                           r"0x:23 \(Error::InvalidProgram: "):
        open_recognizer(EXECUTORCH, folder, 1)
    program.unlink()
    with pytest.raises(BackendError, match=r"executorch/model.pte \(executorch\): missing"):
        open_recognizer(EXECUTORCH, folder, 1)


def test_program_and_configuration_disagreeing_is_an_error(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import open_recognizer

    folder = _copy(tmp_path)
    config_path = folder / "config.json"
    text = config_path.read_text()
    config = json.loads(text)
    config["vocab_size"] = 51866
    config_path.write_text(json.dumps(config))
    with pytest.raises(BackendError, match=r"model.pte \(executorch\): its text_decoder's logits are over 51865 "
                                           r"ids, config.json's vocab_size is 51866"):
        open_recognizer(EXECUTORCH, folder, 1)
    config_path.write_text(text)
    generation_path = folder / "generation_config.json"
    generation = json.loads(generation_path.read_text())
    generation["decoder_start_token_id"] = 50259
    generation_path.write_text(json.dumps(generation))
    with pytest.raises(BackendError, match=r"model.pte \(executorch\): its decoder_start_token_id is 50258, "
                                           r"generation_config.json's decoder_start_token_id is 50259"):
        open_recognizer(EXECUTORCH, folder, 1)


def test_executorch_judged_against_onnx_runtimes_golden(pytester: pytest.Pytester) -> None:
    shutil.copytree(FLOAT, pytester.path / "models" / "whisper_vocab", ignore=OTHERS)
    shutil.copytree(SPEECH / "whisper_tiny", pytester.path / "models" / "whisper_tiny")
    shutil.copytree(AUDIO, pytester.path / "audio", ignore=shutil.ignore_patterns("*.npy"))
    pytester.makepyfile(test_asr="""
        import pytest

        BOTH = ["audio/hello.wav", "audio/weather.wav"]

        @pytest.mark.edge_asr(model="models/whisper_vocab", audio=BOTH, new_tokens=12,
                              backends=["onnxruntime-cpu", "executorch"])
        def test_float(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_tiny", audio=BOTH, new_tokens=12, backends=["executorch"])
        def test_no_executorch_export(edge_asr):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "float and onnxruntime-cpu").assert_outcomes(
        passed=1, deselected=2)
    golden = json.loads((pytester.path / "golden" / "models" / "whisper_vocab" / "speech" / "hello.json").read_text())
    assert golden["meta"]["reference_backend"] == "onnxruntime-cpu" and golden["tokens"] == GREEDY["hello.wav"]

    result = pytester.runpytest_inprocess("--edge-report=r.json", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*whisper_tiny holds no executorch export (no executorch/model.pte*"])
    records = {(r["test"].split("::")[1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    record = records[("test_float", EXECUTORCH)]
    assert record["verdict"] == "passed" and record["runtime"]["name"] == "executorch"
    assert [f["first_difference"] for f in record["speech"]["files"]] == [None, None]
    for file in record["speech"]["files"]:
        assert file["encoder_ms"] > 0 and file["first_token_ms"] > file["encoder_ms"] and file["decode_tokens_per_s"] > 0
    forced = record["speech"]["teacher_forced"]
    assert forced["positions"] == len(GREEDY["hello.wav"]) + len(GREEDY["weather.wav"])
    assert forced["top1_agreement"] == 1.0 and forced["kld"]["mean"] < 1e-6
