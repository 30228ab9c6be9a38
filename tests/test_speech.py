"""Speech recognition, the edge_asr kind (issue 52, docs/speech.md): a tiny Whisper made by
fixtures/make_speech.py (transformers, exported by Hugging Face Optimum; an int8 copy by ONNX
Runtime's quantizer; a perturbed copy), espeak-ng audio; the NumPy features against transformers'
own, the ONNX pair against PyTorch's greedy tokens, and the marker as users meet it."""

from __future__ import annotations

import json
import os
import signal
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES

from pytest_edge.backends.speech import SpeechConfig
from pytest_edge.run.speech_plan import open_recognizer, speech_backends
from pytest_edge.backends.speech_features import AudioError, FeatureConfig, log_mel, read_wav

SPEECH = FIXTURES / "speech"
AUDIO = SPEECH / "audio"
# The speech runtimes besides ONNX Runtime (whisper.cpp, CTranslate2, sherpa-onnx, ...): whisper_tiny
# holds no export of theirs, so each is skipped in every edge_asr test on it, saying which files.
OTHERS = len(speech_backends()) - 1
WAVS = ("hello.wav", "weather.wav")
pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("name", WAVS)
def test_numpy_features_equal_transformers_whisper_feature_extractor(name: str) -> None:
    """The stored frames are transformers' WhisperFeatureExtractor's (fixtures/make_speech.py)."""
    config = FeatureConfig.read(SPEECH / "whisper_tiny" / "preprocessor_config.json")
    ours = log_mel(read_wav(AUDIO / name, config.sampling_rate), config)
    theirs = np.load(AUDIO / name.replace(".wav", ".mel.npy"))
    assert ours.shape == (1, 80, 3000)
    assert np.abs(ours[0, :, :theirs.shape[1]] - theirs).max() < 1e-4


def test_numpy_features_equal_transformers_live() -> None:
    """The same, against transformers itself where it is installed (the fixtures' environment)."""
    transformers = pytest.importorskip("transformers")
    samples = read_wav(AUDIO / "hello.wav", 16000)
    theirs = transformers.WhisperFeatureExtractor(feature_size=80)(samples, sampling_rate=16000,
                                                                   return_tensors="np").input_features
    assert np.abs(log_mel(samples, FeatureConfig()) - theirs).max() < 1e-4


def test_the_onnx_pair_gives_pytorchs_greedy_tokens() -> None:
    """The Optimum export run by ONNX Runtime from the configuration's forced tokens gives the tokens
    PyTorch's greedy decoding of the same network gave (fixtures/speech/pytorch_greedy.json)."""
    greedy = json.loads((SPEECH / "pytorch_greedy.json").read_text())
    recognizer = open_recognizer("onnxruntime-cpu", SPEECH / "whisper_tiny", 1)
    assert recognizer.config.prompt == [60, 61, 62, 63]  # start, language, task, no-timestamps: generation_config.json
    for name in WAVS:
        run = recognizer.transcribe(read_wav(AUDIO / name, 16000), greedy["new_tokens"])
        assert run.tokens == greedy["tokens"][name], name
        assert run.audio_s == pytest.approx(len(read_wav(AUDIO / name, 16000)) / 16000)
        assert run.real_time_factor == pytest.approx(run.total_ms / 1e3 / run.audio_s)


def test_recognition_runs_in_the_backends_worker_and_gives_what_the_runtime_gives() -> None:
    """The check's recognizer lives in the backend's worker (OpenSpeech, Transcribe, ForceSpeech):
    the same tokens, configuration and teacher-forced logits as the recognizer opened here, and a
    worker that died is replaced with the recognizer opened again."""
    from pytest_edge.run.speech_check import WorkerRecognizer
    from pytest_edge.worker.pool import WorkerPool

    here = open_recognizer("onnxruntime-cpu", SPEECH / "whisper_tiny", 1)
    audio = read_wav(AUDIO / "hello.wav", 16000)
    pool = WorkerPool(True, 120.0, on_crash=lambda backend: None)
    try:
        there = WorkerRecognizer(pool, "onnxruntime-cpu", SPEECH / "whisper_tiny", 1)
        assert there.config == here.config
        run = there.transcribe(audio, 8)
        assert run.tokens == here.transcribe(audio, 8).tokens and run.audio_s == pytest.approx(len(audio) / 16000)
        assert np.array_equal(there.teacher_force(audio, run.tokens), here.teacher_force(audio, run.tokens))
        worker = pool.worker("onnxruntime-cpu")
        pid = worker.call("ping")
        os.kill(pid, signal.SIGKILL)  # dies between requests (the OOM killer): replaced, opened again
        worker._process.wait(timeout=30)
        assert there.transcribe(audio, 8).tokens == run.tokens and worker.restarted
        assert worker.call("ping") not in (pid, os.getpid())
    finally:
        pool.close()


def test_a_configuration_that_contradicts_the_model_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "whisper"
    shutil.copytree(SPEECH / "whisper_tiny", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_mel_bins": 128}))
    with pytest.raises(ValueError, match="num_mel_bins 128 differs from preprocessor_config.json's feature_size 80"):
        SpeechConfig.read(folder)
    (folder / "config.json").write_text(json.dumps(config))
    preprocessor = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**preprocessor, "feature_size": 128}))
    (folder / "config.json").write_text(json.dumps({**config, "num_mel_bins": 128}))
    from pytest_edge.errors import BackendError

    with pytest.raises(BackendError, match=r"encoder_model.onnx \(onnxruntime-cpu\): takes 80 mel bins, its config.json "
                                           "says 128"):
        open_recognizer("onnxruntime-cpu", folder, 1)


def _wav(path: Path, rate: int) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.sin(np.arange(rate) / 10) * 8000).astype("<i2").tobytes())
    return path


def test_audio_at_another_rate_is_named(tmp_path: Path) -> None:
    with pytest.raises(AudioError, match=r"8k.wav: sampled at 8000 Hz, the model's features take 16000 Hz"):
        read_wav(_wav(tmp_path / "8k.wav", 8000), 16000)


# The 64-id fixtures hold an ONNX export only: whisper.cpp and CTranslate2 skip each test, saying
# the folder holds no export of theirs (tests/test_speech_runtimes.py runs them).
def _project(pytester: pytest.Pytester) -> None:
    for name in ("whisper_tiny", "whisper_tiny_int8", "whisper_tiny_perturbed"):
        shutil.copytree(SPEECH / name, pytester.path / "models" / name)
    shutil.copytree(AUDIO, pytester.path / "audio", ignore=shutil.ignore_patterns("*.npy"))
    audio = '["audio/hello.wav", "audio/weather.wav"]'
    pytester.makepyfile(test_asr=f"""
        import pytest

        @pytest.mark.edge_asr(model="models/whisper_tiny", audio={audio}, new_tokens=12)
        def test_float(edge_asr):
            assert len(edge_asr.transcribe("audio/hello.wav")) == 12

        @pytest.mark.edge_asr(model="models/whisper_tiny_int8", audio={audio}, new_tokens=12,
                              reference="models/whisper_tiny", max_wer=1.0, max_cer=0.6,
                              min_top1_agreement=0.5, max_kld=0.5)
        def test_int8_generous(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_tiny_int8", audio={audio}, new_tokens=12,
                              reference="models/whisper_tiny", max_wer=0.0, max_kld=0.001)
        def test_int8_strict(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_tiny_perturbed", audio={audio}, new_tokens=12,
                              reference=None)
        def test_perturbed(edge_asr):
            pass
    """)


def test_golden_recorded_then_float_passes_int8_judged_by_wer_perturbed_named(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "float").assert_outcomes(passed=1, skipped=OTHERS)
    golden = json.loads((pytester.path / "golden" / "models" / "whisper_tiny" / "speech" / "hello.json").read_text())
    assert golden["tokens"] == json.loads((SPEECH / "pytorch_greedy.json").read_text())["tokens"]["hello.wav"]
    assert golden["transcript"] == " ".join(f"w{t}" for t in golden["tokens"])
    assert golden["meta"]["reference_backend"] == "onnxruntime-cpu"

    result = pytester.runpytest_inprocess("--edge-report=r.json", "--junitxml=j.xml", "--edge-html=r.html",
                                           "--edge-summary=s.md")
    result.assert_outcomes(passed=2, failed=2, skipped=4 * OTHERS)
    # Both pages have the speech section: a row per audio file, where the tokens part and the rates.
    summary, page = (pytester.path / "s.md").read_text(), (pytester.path / "r.html").read_text()
    assert "### Speech recognition" in summary and '<section id="speech">' in page
    rows = [line for line in summary.splitlines() if line.startswith(r"| test\_asr.py::test\_int8\_strict")]
    assert len(rows) == 2 and any("| weather.wav |" in row and "| 0.917 |" in row and "differ at" in row for row in rows)
    assert "test_float[whisper_tiny-onnxruntime-cpu]" in page.split('<section id="speech">')[1] and "| hello.wav |" in summary
    junit = (pytester.path / "j.xml").read_text()
    assert 'name="edge_wer"' in junit and 'name="edge_real_time_factor"' in junit
    out = result.stdout.str()
    # The strict budget names the figure and both transcripts.
    weather = " ".join(f"w{t}" for t in json.loads((SPEECH / "pytorch_greedy.json").read_text())["tokens"]["weather.wav"])
    assert "word error rate against the reference's transcript 0.9167 exceeds the budget max_wer=0 on weather.wav" in out
    assert f"reference transcript '{weather}', got 'w41 w25 w41" in out
    # The perturbed export without reference= is judged against its own golden: none recorded.
    assert "no speech golden" in out and "whisper_tiny_perturbed" in out
    records = {r["test"].split("::")[1].split("[")[0]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]
               if r["backend"] == "onnxruntime-cpu"}
    from pytest_edge.core.record import Record

    for record in records.values():  # the typed speech block reads back as written (xdist, stored reports)
        assert Record.from_json(record).to_json() == record
    float_block = records["test_float"]["speech"]
    assert [f["first_difference"] for f in float_block["files"]] == [None, None]
    assert float_block["wer"] == 0.0 and float_block["cer"] == 0.0
    for figure in ("real_time_factor", "encoder_ms", "first_token_ms", "decode_tokens_per_s"):
        assert all(f[figure] is not None and f[figure] > 0 for f in float_block["files"]), figure
    int8 = records["test_int8_generous"]["speech"]
    assert int8["reference"] == "models/whisper_tiny"
    assert 0 < int8["wer"] <= 1.0 and 0 < int8["cer"] <= 0.6
    assert [f["check"] for f in records["test_int8_strict"]["budget_findings"]] == ["max_wer", "max_kld"]
    assert "teacher-forced mean KL divergence" in out and "exceeds the budget max_kld=0.001" in out
    # Teacher-forced over the golden's tokens: the float export agrees everywhere, the int8 one not.
    assert float_block["teacher_forced"]["top1_agreement"] == 1.0
    assert abs(float_block["teacher_forced"]["kld"]["mean"]) < 1e-6
    assert 0.5 <= int8["teacher_forced"]["top1_agreement"] < 1.0 and 0.001 < int8["teacher_forced"]["kld"]["mean"] <= 0.5
    golden_top = json.loads((pytester.path / "golden" / "models" / "whisper_tiny" / "speech" / "hello.json").read_text())
    assert np.asarray(golden_top["top_ids"]).shape == (12, 64)


def test_a_perturbed_export_fails_naming_the_first_differing_token(pytester: pytest.Pytester) -> None:
    """The perturbed network judged against the float export's golden, as the float one would be:
    the golden is copied as the perturbed model's own, so its tokens must equal it."""
    _project(pytester)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "float").assert_outcomes(passed=1, skipped=OTHERS)
    shutil.copytree(pytester.path / "golden" / "models" / "whisper_tiny",
                    pytester.path / "golden" / "models" / "whisper_tiny_perturbed")
    result = pytester.runpytest_inprocess("-k", "perturbed")
    result.assert_outcomes(failed=1, skipped=OTHERS)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: hello.wav: tokens differ from the golden's (onnxruntime-cpu) at "
                                 "position 1: golden 58, got 42*"])


def test_a_damaged_onnx_names_the_file_and_the_backend(pytester: pytest.Pytester) -> None:
    _project(pytester)
    decoder = pytester.path / "models" / "whisper_tiny" / "decoder_model.onnx"
    decoder.write_bytes(decoder.read_bytes()[:5000])
    result = pytester.runpytest_inprocess("-k", "float")
    result.assert_outcomes(failed=1, skipped=OTHERS)
    result.stdout.fnmatch_lines(["*models/whisper_tiny/decoder_model.onnx (onnxruntime-cpu): cannot load*"])


def test_audio_at_the_wrong_rate_is_an_error_naming_the_file(pytester: pytest.Pytester) -> None:
    _project(pytester)
    _wav(pytester.path / "audio" / "hello.wav", 8000)
    result = pytester.runpytest_inprocess("-k", "float", "--edge-update-golden")
    result.assert_outcomes(failed=1, skipped=OTHERS)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: *audio/hello.wav: sampled at 8000 Hz, the model's features take "
                                 "16000 Hz*"])


def test_what_users_type_is_validated() -> None:
    from pytest_edge.errors import EdgeUsageError
    from pytest_edge.run.speech_plan import parse_speech_marker

    with pytest.raises(EdgeUsageError, match="edge_asr: unknown keyword.s. max_werr"):
        parse_speech_marker((), {"model": "m", "audio": ["a.wav"], "max_werr": 0.1})
    with pytest.raises(EdgeUsageError, match="edge_asr needs audio="):
        parse_speech_marker(("m",), {})
    with pytest.raises(EdgeUsageError, match="edge_asr max_wer"):
        parse_speech_marker((), {"model": "m", "audio": "a.wav", "max_wer": "lots"})
    with pytest.raises(EdgeUsageError, match="edge_asr: unknown backend 'whisper.cpp'"):
        parse_speech_marker((), {"model": "m", "audio": "a.wav", "backends": ["whisper.cpp"]})
    spec = parse_speech_marker(("m",), {"audio": "a.wav", "max_cer": "5%"})
    assert spec.audio == ("a.wav",) and spec.budgets() == {"max_wer": None, "max_cer": 0.05, "min_top1_agreement": None,
                                                       "max_kld": None}


def test_reference_without_a_budget_judges_nothing_and_says_so(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makepyfile(test_unjudged="""
        import pytest

        @pytest.mark.edge_asr(model="models/whisper_tiny_int8", audio=["audio/hello.wav"], new_tokens=4,
                              reference="models/whisper_tiny")
        def test_unjudged(edge_asr):
            pass
    """)
    result = pytester.runpytest_inprocess("test_unjudged.py", "--edge-update-golden")
    result.assert_outcomes(failed=1, skipped=OTHERS)
    result.stdout.fnmatch_lines(["*edge_asr reference='models/whisper_tiny': * none is given, so nothing would be judged*"])


def _long_audio(path: Path) -> None:
    """hello.wav padded with silence to exactly one 30 s window, then weather.wav: 2 windows, each
    the samples one of the short files gives the export (it pads a window to 30 s with zeros)."""
    hello, weather = read_wav(AUDIO / "hello.wav", 16000), read_wav(AUDIO / "weather.wav", 16000)
    samples = np.concatenate([hello, np.zeros(30 * 16000 - len(hello), np.float32), weather])
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1), wav.setsampwidth(2), wav.setframerate(16000)
        wav.writeframes(np.round(samples * 32768).astype("<i2").tobytes())


def test_audio_longer_than_a_window_is_decoded_window_by_window_each_judged(pytester: pytest.Pytester) -> None:
    """A 30 s + 2.6 s file: two windows, each decoded from the forced start; the golden keeps both,
    each window's tokens are the short file's own (PyTorch's greedy tokens), and the record keeps
    each window's latency; a window that parts from its golden is named by its start."""
    shutil.copytree(SPEECH / "whisper_tiny", pytester.path / "models" / "whisper_tiny")
    shutil.copytree(SPEECH / "whisper_tiny_perturbed", pytester.path / "models" / "whisper_tiny_perturbed")
    (pytester.path / "audio").mkdir()
    _long_audio(pytester.path / "audio" / "long.wav")
    pytester.makepyfile(test_long="""
        import pytest

        @pytest.mark.edge_asr(model="models/whisper_tiny", audio=["audio/long.wav"], new_tokens=12,
                              backends=["onnxruntime-cpu"])
        def test_long(edge_asr):
            assert len(edge_asr.transcribe("audio/long.wav")) == 24  # 12 new tokens in each window

        @pytest.mark.edge_asr(model="models/whisper_tiny_perturbed", audio=["audio/long.wav"], new_tokens=12,
                              backends=["onnxruntime-cpu"])
        def test_long_perturbed(edge_asr):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "not perturbed").assert_outcomes(passed=1, deselected=1)
    golden = json.loads((pytester.path / "golden" / "models" / "whisper_tiny" / "speech" / "long.json").read_text())
    greedy = json.loads((SPEECH / "pytorch_greedy.json").read_text())["tokens"]
    assert [w["start_s"] for w in golden["windows"]] == [0.0, 30.0]
    assert [w["tokens"] for w in golden["windows"]] == [greedy["hello.wav"], greedy["weather.wav"]]
    assert golden["tokens"] == greedy["hello.wav"] + greedy["weather.wav"]

    shutil.copytree(pytester.path / "golden" / "models" / "whisper_tiny",
                    pytester.path / "golden" / "models" / "whisper_tiny_perturbed")
    result = pytester.runpytest_inprocess("--edge-report=r.json", "--edge-summary=s.md", "--edge-html=r.html")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: long.wav window 0 (0 s): tokens differ from the golden's "
                                 "(onnxruntime-cpu) at position 1*",
                                 "*onnxruntime-cpu: long.wav window 1 (30 s): tokens differ from the golden's*"])
    records = {r["test"].split("::")[1].split("[")[0]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    (file,) = records["test_long"]["speech"]["files"]
    assert file["first_difference"] is None and file["audio_s"] == pytest.approx(30 + len(read_wav(AUDIO / "weather.wav", 16000)) / 16000)
    first, second = file["windows"]
    assert (first["start_s"], first["audio_s"], second["start_s"]) == (0.0, 30.0, 30.0)
    assert first["tokens"] == len(greedy["hello.wav"]) and second["first_difference"] is None
    assert first["total_ms"] > 0 and second["total_ms"] > 0  # each window's latency: the per-chunk latency
    # Peak memory, measured in the worker around the recognizer's open and each transcription.
    assert file["peak_memory_mb"] is not None and file["peak_memory_mb"] > 0
    assert records["test_long"]["peak_memory_mb"] == file["peak_memory_mb"]
    assert file["real_time_factor"] == pytest.approx((first["total_ms"] + second["total_ms"]) / 1e3 / file["audio_s"])
    assert records["test_long"]["speech"]["teacher_forced"]["positions"] == 24
    from pytest_edge.core.record import Record

    assert Record.from_json(records["test_long"]).to_json() == records["test_long"]
    (row,) = [line for line in (pytester.path / "s.md").read_text().splitlines() if "| long.wav |" in line
              and "test\\_long\\_perturbed" not in line]
    assert f"| {first['total_ms']:.2f} / {second['total_ms']:.2f} |" in row  # each window's latency, in order
    # The page's speech section draws them: bars per audio file, and the windows' latencies as a line.
    section = (pytester.path / "r.html").read_text().split('<section id="speech">')[1].split("</section>")[0]
    for title in ("Real-time factor (processing time / audio duration)", "Encoder time", "Time to first token",
                  "Latency of each window"):
        assert f"<h3>{title}</h3><svg" in section, title
    assert "test_long · onnxruntime-cpu · long.wav" in section
