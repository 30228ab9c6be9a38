"""edge_asr on the runtimes beyond ONNX Runtime (issue 52, docs/speech.md): whisper.cpp
(pywhispercpp), CTranslate2 and sherpa-onnx, on fixtures/speech/whisper_vocab (a trained tiny
Whisper with Whisper's 51865-id vocabulary, exported by Optimum, whisper.cpp's converter and
CTranslate2's: fixtures/make_speech_runtimes.py; by sherpa-onnx's own exporter:
fixtures/make_speech_sherpa.py) and its CTranslate2 int8 copy, judged against ONNX Runtime's
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
    assert run.tokens == GREEDY["weather.wav"] and run.ended  # PyTorch's greedy tokens of the same model
    timers = run.runtime_timers
    assert timers is not None and timers.source == "whisper_print_timings"
    # Both clocks saw the same run: whisper.cpp's encode timer runs between its encoder-begin and abort
    # callbacks, which bound ours (0.01 ms: whisper_print_timings rounds to two decimals); no bound on
    # either's size (their agreement is benchmarks/bench_speech_timers.py's).
    assert 0 < timers.encode_ms <= timers.total_ms and 0 < timers.mel_ms and timers.decode_ms > 0
    assert timers.encode_ms <= run.encoder_ms + 0.01 and run.encoder_ms < run.first_token_ms <= run.total_ms
    # Teacher-forced through whisper.h: its argmax (suppressed tokens out) is its own greedy choice.
    logits = recognizer.teacher_force(_samples("weather"), run.tokens)
    assert logits.shape == (len(GREEDY["weather.wav"]), 51865)
    assert np.argmax(mask_suppressed(logits, recognizer.config), axis=1).tolist() == run.tokens


@needs_ctranslate2
def test_ctranslate2_float_gives_pytorch_tokens_and_forced_logits() -> None:
    from pytest_edge.backends.speech import mask_suppressed
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer("ctranslate2", FLOAT, 1)
    for name in ("hello", "weather"):
        run = recognizer.transcribe(_samples(name), 12)
        assert run.tokens == GREEDY[f"{name}.wav"] and run.ended  # the sentence, then end-of-text
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
                              reference="models/whisper_vocab", max_wer=0.0, max_kld=1e-9, backends=["ctranslate2"])
        def test_int8_strict(edge_asr):
            pass
    """)


@needs_whisper_cpp
@needs_ctranslate2
def test_every_runtime_judged_against_onnx_runtimes_golden(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "float").assert_outcomes(passed=2)
    golden = json.loads((pytester.path / "golden" / "models" / "whisper_vocab" / "speech" / "weather.json").read_text())
    assert golden["meta"]["reference_backend"] == "onnxruntime-cpu" and golden["tokens"] == GREEDY["weather.wav"]

    result = pytester.runpytest_inprocess("-k", "both or int8", "--edge-report=r.json")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    # CTranslate2's int8 conversion: the same transcripts (WER 0 passes), judged by the teacher-forced
    # KL divergence too, where it is not the float export's.
    assert "max_wer" not in out and "teacher-forced mean KL divergence" in out and "exceeds the budget max_kld=1e-09" in out
    records = {(r["test"].split("::")[1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    cpp = records[("test_whisper_cpp_both", "whisper-cpp")]
    assert cpp["runtime"]["name"] == "pywhispercpp"
    assert [f["first_difference"] for f in cpp["speech"]["files"]] == [None, None]  # its f16 file: the same tokens
    for file in cpp["speech"]["files"]:
        timers = file["runtime_timers"]
        assert timers["source"] == "whisper_print_timings" and 0 < timers["encode_ms"] <= timers["total_ms"]
    forced = cpp["speech"]["teacher_forced"]
    assert forced["positions"] == len(GREEDY["hello.wav"]) + len(GREEDY["weather.wav"])
    assert forced["top1_agreement"] == 1.0 and 0 < forced["kld"]["mean"] < 1e-3  # f16 arithmetic: close, not equal
    int8 = records[("test_int8_generous", "ctranslate2")]
    assert int8["verdict"] == "passed" and int8["runtime"]["name"] == "ctranslate2"
    assert [f["first_difference"] for f in int8["speech"]["files"]] == [None, None]
    assert int8["speech"]["wer"] == 0.0 and int8["speech"]["cer"] == 0.0
    assert all(f["first_token_ms"] is None and f["runtime_timers"] is None for f in int8["speech"]["files"])
    assert int8["speech"]["teacher_forced"]["top1_agreement"] == 1.0 and int8["speech"]["teacher_forced"]["kld"]["mean"] > 1e-9


# ------------------------------------------------------------------ sherpa-onnx (its own exporter)

needs_sherpa = pytest.mark.skipif(why_not("sherpa-onnx") is not None, reason=str(why_not("sherpa-onnx")))
SHERPA = FLOAT / "sherpa-onnx"


def _sherpa_greedy(mel: np.ndarray, suppress: bool, n: int = 12) -> list[int]:
    """sherpa-onnx's export run by ONNX Runtime as sherpa-onnx's search runs it (the forced start,
    then one token a step through the self-attention cache), on ``mel`` [80, frames]; with
    ``suppress``, the export's suppression as the reference decodes."""
    import onnxruntime as ort

    from pytest_edge.backends.speech import SpeechConfig, greedy_pick

    config = SpeechConfig.read(FLOAT)
    encoder = ort.InferenceSession(str(SHERPA / "whisper-encoder.onnx"), providers=["CPUExecutionProvider"])
    decoder = ort.InferenceSession(str(SHERPA / "whisper-decoder.onnx"), providers=["CPUExecutionProvider"])
    cross_k, cross_v = encoder.run(None, {"mel": mel[None].astype(np.float32)})
    cache_k = np.zeros((2, 1, 64, 32), np.float32)
    cache_v = np.zeros_like(cache_k)
    step_in, offset, found = config.prompt, 0, []
    for step in range(n):
        logits, cache_k, cache_v = decoder.run(None, {
            "tokens": np.array([step_in], np.int64), "in_n_layer_self_k_cache": cache_k,
            "in_n_layer_self_v_cache": cache_v, "n_layer_cross_k": cross_k, "n_layer_cross_v": cross_v,
            "offset": np.array([offset], np.int64)})
        offset += len(step_in)
        token = greedy_pick(logits[0, -1], config, step) if suppress else int(np.argmax(logits[0, -1]))
        if token == config.eos_token_id:
            break
        found.append(token)
        step_in = [token]
    return found


@needs_sherpa
def test_sherpa_onnx_export_holds_the_reference_model() -> None:
    """sherpa-onnx's own exporter wrote the same model: its files, run on the reference's features
    (a 30-second window) with the reference's suppression, give PyTorch's greedy tokens on both
    files. What sherpa-onnx's runtime then does differently is the next test's."""
    from pytest_edge.backends.speech import SpeechConfig
    from pytest_edge.backends.speech_features import log_mel

    config = SpeechConfig.read(FLOAT)
    for name in ("hello", "weather"):
        mel = log_mel(_samples(name), config.features)[0]
        assert mel.shape == (80, 3000)
        assert _sherpa_greedy(mel, suppress=True) == GREEDY[f"{name}.wav"]


@needs_sherpa
def test_sherpa_onnx_decodes_its_own_way_and_says_what_it_does_not_measure() -> None:
    from pytest_edge.backends.speech import SpeechConfig
    from pytest_edge.backends.speech_features import log_mel
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer("sherpa-onnx", FLOAT, 1)
    assert (recognizer.language, recognizer.task) == ("en", "transcribe")  # from the export's forced tokens
    config = SpeechConfig.read(FLOAT)
    for name in ("hello", "weather"):
        samples = _samples(name)
        run = recognizer.transcribe(samples, 12)
        assert run.tokens == GREEDY[f"{name}.wav"] and run.ended  # the reference's sentence, then end-of-text
        # sherpa-onnx's encoder sees the speech frames and 1000 frames of zeros (the reference: a 30 s
        # window whose silence is log-mel's floor, not zero). Our features of the speech so padded,
        # decoded as its search decodes (no suppression), give its tokens: the fixture's model was
        # trained under both paddings, as a trained Whisper reads either (a random network did not:
        # it parted at position 0 on both files).
        frames = len(samples) // 160
        mel = log_mel(samples, config.features)[0]
        padded = np.concatenate([mel[:, :frames], np.zeros((80, 1000), np.float32)], axis=1)
        assert _sherpa_greedy(padded, suppress=False) == run.tokens, name
        # One decode_stream call: the encoder, first token and decoder steps are not timed apart.
        assert run.encoder_ms is None and run.first_token_ms is None and run.decode_tps is None
        assert 0 < run.features_ms < run.total_ms and run.real_time_factor > 0
    assert recognizer.teacher_force(_samples("weather"), GREEDY["weather.wav"]) is None  # no logits in its API
    # More tokens than its search decodes for the audio (6 a second): an error, not a shorter comparison.
    # (The first second of weather.wav: the trained model is still speaking when the limit stops it.)
    with pytest.raises(BackendError, match=r"\(sherpa-onnx\): stopped after 6 tokens, its greedy search's limit "
                                           r"for 1.00 s of audio"):
        recognizer.transcribe(_samples("weather")[:16000], 20)


@needs_sherpa
def test_sherpa_onnx_ids_are_its_own_tokens_txt_strings() -> None:
    """The ids the recognizer reads back (a symbol table spelling each id) are the tokens sherpa-onnx
    gives with the export's own whisper-tokens.txt: each id's bytes there, as its result's strings."""
    import base64

    import sherpa_onnx

    from pytest_edge.run.speech_plan import open_recognizer

    lines = (SHERPA / "whisper-tokens.txt").read_text().splitlines()
    table = {int(i): base64.b64decode(t) for t, i in (line.split() for line in lines)}
    own = sherpa_onnx.OfflineRecognizer.from_whisper(
        encoder=str(SHERPA / "whisper-encoder.onnx"), decoder=str(SHERPA / "whisper-decoder.onnx"),
        tokens=str(SHERPA / "whisper-tokens.txt"), language="en", task="transcribe", num_threads=1)
    ids = open_recognizer("sherpa-onnx", FLOAT, 1)
    for name in ("hello", "weather"):
        stream = own.create_stream()
        stream.accept_waveform(16000, _samples(name))
        own.decode_stream(stream)
        spelled = ids.recognizer.create_stream()
        spelled.accept_waveform(16000, _samples(name))
        ids.recognizer.decode_stream(spelled)
        found = [int(t) for t in spelled.result.tokens]
        assert found and all(i < 50257 for i in found)  # no special token here, so none was left out
        assert stream.result.tokens == [table[i].decode() for i in found]


@needs_sherpa
def test_a_damaged_or_contradicting_sherpa_export_names_the_file_and_sherpa_onnx(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import missing_files, open_recognizer

    folder = _copy(tmp_path)
    encoder, decoder, tokens = (folder / "sherpa-onnx" / f"whisper-{p}" for p in ("encoder.onnx", "decoder.onnx",
                                                                                 "tokens.txt"))
    data = {path: path.read_bytes() for path in (encoder, decoder, tokens)}
    decoder.unlink()
    assert missing_files("sherpa-onnx", folder) == ["sherpa-onnx/whisper-decoder.onnx"]
    with pytest.raises(BackendError, match=rf"{decoder} \(sherpa-onnx\): missing"):
        open_recognizer("sherpa-onnx", folder, 1)
    decoder.write_bytes(data[decoder][:100_000])  # cut: sherpa-onnx's own reason (ONNX Runtime's)
    with pytest.raises(BackendError, match=r"\(sherpa-onnx\): cannot load .*whisper-decoder.onnx failed:Protobuf "
                                           r"parsing failed"):
        open_recognizer("sherpa-onnx", folder, 1)
    decoder.write_bytes(data[decoder])
    encoder.write_bytes(data[encoder][:5000])
    with pytest.raises(BackendError, match=rf"{encoder} \(sherpa-onnx\): not an ONNX model: .*runs past the end"):
        open_recognizer("sherpa-onnx", folder, 1)
    encoder.write_bytes(b"not a model at all " * 10)
    with pytest.raises(BackendError, match=rf"{encoder} \(sherpa-onnx\): "):
        open_recognizer("sherpa-onnx", folder, 1)
    encoder.write_bytes(data[encoder])
    tokens.write_text("\n".join(data[tokens].decode().splitlines()[:1000]) + "\n")
    with pytest.raises(BackendError, match=rf"{tokens} \(sherpa-onnx\): 1000 tokens, the export's end-of-text is "
                                           r"50257"):
        open_recognizer("sherpa-onnx", folder, 1)
    tokens.write_bytes(data[tokens])
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_target_positions": 448}))
    with pytest.raises(BackendError, match=rf"{encoder} \(sherpa-onnx\): its metadata's n_text_ctx is 64, the "
                                           r"export's config says max_target_positions 448"):
        open_recognizer("sherpa-onnx", folder, 1)
    (folder / "config.json").write_text(json.dumps(config))
    generation = json.loads((folder / "generation_config.json").read_text())
    generation["forced_decoder_ids"] = [[1, 50259], [2, 50359]]  # no no-timestamps: sherpa-onnx always adds it
    (folder / "generation_config.json").write_text(json.dumps(generation))
    with pytest.raises(BackendError, match=r"\(sherpa-onnx\): sherpa-onnx decodes from \[start 50258, a language"):
        open_recognizer("sherpa-onnx", folder, 1)


@needs_sherpa
def test_edge_asr_on_sherpa_onnx_judged_against_onnx_runtimes_golden(pytester: pytest.Pytester) -> None:
    shutil.copytree(FLOAT, pytester.path / "models" / "whisper_vocab")
    shutil.copytree(AUDIO, pytester.path / "audio", ignore=shutil.ignore_patterns("*.npy"))
    pytester.makepyfile(test_asr="""
        import pytest

        BOTH = ["audio/hello.wav", "audio/weather.wav"]

        @pytest.mark.edge_asr(model="models/whisper_vocab", audio=BOTH, new_tokens=12,
                              backends=["onnxruntime-cpu", "sherpa-onnx"])
        def test_float(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_vocab", audio=["audio/weather.wav"], new_tokens=12,
                              min_top1_agreement=0.5, backends=["sherpa-onnx"])
        def test_forced(edge_asr):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "float and onnxruntime").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "tokens differ" not in out  # sherpa-onnx gives the reference's tokens on both files
    # No logits in sherpa-onnx's API: a budget on the teacher-forced figures fails, saying so.
    assert ("sherpa-onnx: teacher-forced top-1 agreement not measured: sherpa-onnx gives no decoder logits "
            "(weather.wav); budget min_top1_agreement=0.5") in out
    records = {(r["test"].split("::")[1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    sherpa = records[("test_float", "sherpa-onnx")]
    assert sherpa["runtime"]["name"] == "sherpa-onnx" and sherpa["verdict"] == "passed"
    assert [f["first_difference"] for f in sherpa["speech"]["files"]] == [None, None]
    assert all(f["encoder_ms"] is None and f["first_token_ms"] is None and f["real_time_factor"] > 0
               for f in sherpa["speech"]["files"])
    assert sherpa["speech"]["teacher_forced"]["not_measured"].startswith("not measured: sherpa-onnx gives no decoder")
    assert records[("test_forced", "sherpa-onnx")]["verdict"] == "failed"
