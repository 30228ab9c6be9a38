"""edge_asr on the runtimes beyond ONNX Runtime (issue 52, docs/speech.md): whisper.cpp
(pywhispercpp) and CTranslate2, on fixtures/speech/whisper_vocab (a random-weight tiny Whisper with
Whisper's 51865-id vocabulary, exported by Optimum, whisper.cpp's converter and CTranslate2's:
fixtures/make_speech_runtimes.py) and its CTranslate2 int8 copy, judged against ONNX Runtime's
golden tokens on the espeak-ng audio. A runtime that is not installed is skipped with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.run.speech_plan import why_not
from pytest_edge.errors import BackendError

pytest_plugins = ["pytester"]

SPEECH = Path(__file__).resolve().parent.parent / "fixtures" / "speech"
FLOAT = SPEECH / "whisper_vocab"
AUDIO = SPEECH / "audio"
GREEDY = json.loads((SPEECH / "whisper_vocab_greedy.json").read_text())["tokens"]

needs_whisper_cpp = pytest.mark.skipif(why_not("whisper-cpp") is not None, reason=str(why_not("whisper-cpp")))
needs_ctranslate2 = pytest.mark.skipif(why_not("ctranslate2") is not None, reason=str(why_not("ctranslate2")))


def _samples(name: str) -> np.ndarray:
    from pytest_edge.backends.speech_features import read_wav

    return read_wav(AUDIO / f"{name}.wav", 16000)


@needs_whisper_cpp
def test_whisper_cpp_reads_its_file_and_its_own_timers() -> None:
    from pytest_edge.backends.speech import mask_suppressed
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer("whisper-cpp", FLOAT, 1)
    assert (recognizer.header.n_vocab, recognizer.header.n_mels, recognizer.header.ftype) == (51865, 80, 1)
    run = recognizer.transcribe(_samples("weather"), 12)
    assert run.tokens == GREEDY["weather.wav"]  # PyTorch's greedy tokens of the same model
    timers = run.runtime_timers
    assert timers is not None and timers.source == "whisper_print_timings"
    # Both clocks saw the same run: whisper.cpp's encode timer runs between its encoder-begin and abort
    # callbacks, which bound ours (0.01 ms: whisper_print_timings rounds to two decimals); no bound on
    # either's size (their agreement is benchmarks/bench_speech_timers.py's).
    assert 0 < timers.encode_ms <= timers.total_ms and 0 < timers.mel_ms and timers.decode_ms > 0
    assert timers.encode_ms <= run.encoder_ms + 0.01 and run.encoder_ms < run.first_token_ms <= run.total_ms
    # Teacher-forced through whisper.h: its argmax (suppressed tokens out) is its own greedy choice.
    logits = recognizer.teacher_force(_samples("weather"), run.tokens)
    assert logits.shape == (12, 51865)
    assert np.argmax(mask_suppressed(logits, recognizer.config), axis=1).tolist() == run.tokens


@needs_ctranslate2
def test_ctranslate2_float_gives_pytorch_tokens_and_forced_logits() -> None:
    from pytest_edge.backends.speech import mask_suppressed
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer("ctranslate2", FLOAT, 1)
    for name in ("hello", "weather"):
        run = recognizer.transcribe(_samples(name), 12)
        assert run.tokens == GREEDY[f"{name}.wav"] and not run.ended
        assert run.first_token_ms is None and run.decode_tps is not None and run.decode_tps > 0
    wrong = [100, 200, 300, 400]  # forced: each row predicts having seen these, whatever they are
    logits = recognizer.teacher_force(_samples("weather"), wrong)
    assert logits.shape == (4, 51865)
    free = mask_suppressed(recognizer.teacher_force(_samples("weather"), GREEDY["weather.wav"]), recognizer.config)
    assert np.argmax(free, axis=1).tolist() == GREEDY["weather.wav"]


def _copy(tmp_path: Path, name: str = "whisper_vocab") -> Path:
    folder = tmp_path / name
    shutil.copytree(SPEECH / name, folder)
    return folder


@needs_whisper_cpp
def test_whisper_cpp_refuses_a_file_that_contradicts_the_export(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import open_recognizer

    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_target_positions": 448}))
    with pytest.raises(BackendError, match=r"ggml-model.bin \(whisper-cpp\): the file says max_target_positions 64, "
                                           r"config.json 448"):
        open_recognizer("whisper-cpp", folder, 1)
    (folder / "config.json").write_text(json.dumps(config))
    generation = json.loads((folder / "generation_config.json").read_text())
    generation["forced_decoder_ids"] = [[1, 50259], [2, 50358], [3, 50359]]
    (folder / "generation_config.json").write_text(json.dumps(generation))
    with pytest.raises(BackendError, match=r"\(whisper-cpp\): the forced tokens \[50259, 50358, 50359\] after the "
                                           r"language are not transcribe/translate then no-timestamps"):
        open_recognizer("whisper-cpp", folder, 1)


@needs_whisper_cpp
def test_a_damaged_ggml_file_names_the_file_and_whisper_cpp(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import open_recognizer

    folder = _copy(tmp_path)
    model = folder / "ggml-model.bin"
    data = model.read_bytes()
    model.write_bytes(data[:20])
    with pytest.raises(BackendError, match=r"ggml-model.bin \(whisper-cpp\): 20 bytes, shorter than a GGML Whisper header"):
        open_recognizer("whisper-cpp", folder, 1)
    model.write_bytes(data[:len(data) // 2])  # a whole header, half the tensors: whisper.cpp's own reason
    with pytest.raises(BackendError, match=r"ggml-model.bin \(whisper-cpp\): whisper.cpp cannot load it: .+"):
        open_recognizer("whisper-cpp", folder, 1)


@needs_ctranslate2
def test_ctranslate2_refuses_a_conversion_that_contradicts_the_export(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import open_recognizer

    folder = _copy(tmp_path)
    own = folder / "ctranslate2" / "config.json"
    config = json.loads(own.read_text())
    own.write_text(json.dumps({**config, "suppress_ids": config["suppress_ids"][:10]}))
    with pytest.raises(BackendError, match=r"ctranslate2/config.json \(ctranslate2\): suppresses 10 tokens where the "
                                           r"export's generation_config.json suppress_tokens has 1607"):
        open_recognizer("ctranslate2", folder, 1)


def _project(pytester: pytest.Pytester) -> None:
    for name in ("whisper_vocab", "whisper_vocab_int8"):
        shutil.copytree(SPEECH / name, pytester.path / "models" / name)
    shutil.copytree(AUDIO, pytester.path / "audio", ignore=shutil.ignore_patterns("*.npy"))
    pytester.makepyfile(test_asr="""
        import pytest

        BOTH = ["audio/hello.wav", "audio/weather.wav"]

        @pytest.mark.edge_asr(model="models/whisper_vocab", audio=BOTH, new_tokens=12,
                              backends=["onnxruntime-cpu", "ctranslate2"])
        def test_float(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_vocab", audio=BOTH, new_tokens=12, backends=["whisper-cpp"])
        def test_whisper_cpp_both(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_vocab_int8", audio=BOTH, new_tokens=12,
                              reference="models/whisper_vocab", max_wer=1.0, max_cer=0.8, min_top1_agreement=0.5,
                              max_kld=1.0, backends=["ctranslate2"])
        def test_int8_generous(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_vocab_int8", audio=BOTH, new_tokens=12,
                              reference="models/whisper_vocab", max_wer=0.0, backends=["ctranslate2"])
        def test_int8_strict(edge_asr):
            pass
    """)


@needs_whisper_cpp
@needs_ctranslate2
def test_every_runtime_judged_against_onnx_runtimes_golden(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.runpytest_subprocess("--edge-update-golden", "-k", "float").assert_outcomes(passed=2)
    golden = json.loads((pytester.path / "golden" / "models" / "whisper_vocab" / "speech" / "weather.json").read_text())
    assert golden["meta"]["reference_backend"] == "onnxruntime-cpu" and golden["tokens"] == GREEDY["weather.wav"]

    result = pytester.runpytest_subprocess("-k", "both or int8", "--edge-report=r.json")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    # whisper.cpp's f16 arithmetic parts from the float32 reference on hello.wav, named by position.
    expected = GREEDY["hello.wav"]
    assert (f"whisper-cpp: hello.wav: tokens differ from the golden's (onnxruntime-cpu) at position 2: "
            f"golden {expected[2]}, got 21172") in out
    # CTranslate2's int8 conversion: judged by WER against the float export's transcript.
    assert "word error rate against the reference's transcript" in out and "exceeds the budget max_wer=0 on weather.wav" in out
    records = {(r["test"].split("::")[1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    cpp = records[("test_whisper_cpp_both", "whisper-cpp")]
    assert cpp["runtime"]["name"] == "pywhispercpp"
    assert [f["first_difference"] for f in cpp["speech"]["files"]] == [2, None]
    for file in cpp["speech"]["files"]:
        timers = file["runtime_timers"]
        assert timers["source"] == "whisper_print_timings" and 0 < timers["encode_ms"] <= timers["total_ms"]
    forced = cpp["speech"]["teacher_forced"]
    assert forced["positions"] == 24 and forced["first_top1_difference"] == {"prompt": "hello.wav", "position": 2}
    assert 0.5 < forced["top1_agreement"] < 1.0
    int8 = records[("test_int8_generous", "ctranslate2")]
    assert int8["verdict"] == "passed" and int8["runtime"]["name"] == "ctranslate2"
    assert [f["first_difference"] for f in int8["speech"]["files"]] == [None, 2]
    assert 0 < int8["speech"]["wer"] <= 1.0 and int8["speech"]["files"][0]["wer"] == 0.0
    assert all(f["first_token_ms"] is None and f["runtime_timers"] is None for f in int8["speech"]["files"])
    assert 0.5 <= int8["speech"]["teacher_forced"]["top1_agreement"] < 1.0
