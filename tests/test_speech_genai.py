"""edge_asr on ONNX Runtime GenAI (docs/speech.md): fixtures/speech/whisper_vocab's model (a
tiny Whisper with Whisper's 51865-id vocabulary, trained on the two sentences) through GenAI's own model builder
(``genai/``: fixtures/make_speech_genai.py), run by GenAI's model, processor and generator, judged
against ONNX Runtime's golden and PyTorch's greedy tokens on the espeak-ng audio. Skipped with the
reason where onnxruntime-genai is not installed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.errors import BackendError
from pytest_edge.run.speech_plan import why_not

pytest_plugins = ["pytester"]

SPEECH = Path(__file__).resolve().parent.parent / "fixtures" / "speech"
FLOAT = SPEECH / "whisper_vocab"
AUDIO = SPEECH / "audio"
GREEDY = json.loads((SPEECH / "whisper_vocab_greedy.json").read_text())["tokens"]
GENAI = "onnxruntime-genai"
# What the other runtimes' exports add to the folder: GenAI's tests need none of it.
OTHERS = shutil.ignore_patterns("ggml-model.bin", "ctranslate2", "sherpa-onnx", "executorch", "pytorch")

pytestmark = pytest.mark.skipif(why_not(GENAI) is not None, reason=str(why_not(GENAI)))


def _samples(name: str) -> np.ndarray:
    from pytest_edge.backends.speech_features import read_wav

    return read_wav(AUDIO / f"{name}.wav", 16000)


def test_genai_export_gives_pytorch_tokens_and_forced_logits() -> None:
    from pytest_edge.backends.speech import mask_suppressed
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer(GENAI, FLOAT, 1)
    reference = open_recognizer("onnxruntime-cpu", FLOAT, 1)
    assert recognizer.prompt_text == "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    for name in ("hello", "weather"):
        run = recognizer.transcribe(_samples(name), 12)
        assert run.tokens == GREEDY[f"{name}.wav"] and run.ended  # the sentence, then end-of-text
        # GenAI runs its encoder inside the generator's first call: not timed apart; the first token is.
        assert run.encoder_ms is None and 0 < run.features_ms < run.first_token_ms <= run.total_ms
        assert run.decode_tps is not None and run.decode_tps > 0
        # Teacher-forced through get_output("logits"): ONNX Runtime's logits of the same weights.
        forced = recognizer.teacher_force(_samples(name), GREEDY[f"{name}.wav"])
        assert forced.shape == (len(GREEDY[f"{name}.wav"]), 51865)
        assert np.argmax(mask_suppressed(forced, recognizer.config), axis=1).tolist() == GREEDY[f"{name}.wav"]
        expected = reference.teacher_force(_samples(name), GREEDY[f"{name}.wav"])
        np.testing.assert_allclose(forced, expected, atol=1e-4)  # measured: 4.3e-6 at most
    wrong = [100, 200, 300, 400]  # forced: each row predicts having seen these, whatever they are
    assert recognizer.teacher_force(_samples("weather"), wrong).shape == (4, 51865)
    assert recognizer.teacher_force(_samples("weather"), wrong[:1]).shape == (1, 51865)


def test_genai_features_are_whisper_log_mel() -> None:
    """GenAI computes its own log-mel features (audio_processor_config.json): what its processor gives
    is the reference's NumPy log-mel within float32 rounding, so the recognizer uses GenAI's."""
    import onnxruntime_genai as og

    from pytest_edge.backends.onnxruntime_genai.speech import wav_bytes
    from pytest_edge.backends.speech_features import log_mel
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer(GENAI, FLOAT, 1)
    for name in ("hello", "weather"):
        samples = _samples(name)
        assert wav_bytes(samples, 16000)[44:] == (AUDIO / f"{name}.wav").read_bytes()[-2 * len(samples):]
        inputs = recognizer.processor(recognizer.prompt_text, audios=og.Audios.open_bytes(wav_bytes(samples, 16000)))
        ours = log_mel(samples, recognizer.config.features)
        assert inputs["input_ids"].as_numpy().tolist() == [recognizer.config.prompt]
        assert np.abs(inputs["audio_features"].as_numpy() - ours).max() < 1e-4  # measured: 2.3e-5 at most


def test_genai_own_search_applies_no_suppression() -> None:
    """Why the recognizer picks the tokens itself: GenAI's own greedy loop (generate_next_token) sees
    the logits of every token generation_config.json suppresses unmasked (a random network's loop
    emitted <|transcribe|>, 50359, at position 9 of both files); on the trained model its own loop
    happens to give the reference's sentence."""
    from pytest_edge.backends.onnxruntime_genai.speech import wav_bytes
    from pytest_edge.run.speech_plan import open_recognizer

    recognizer = open_recognizer(GENAI, FLOAT, 1)
    config = recognizer.config
    for name in ("hello", "weather"):
        generator = recognizer._generator()
        generator.set_inputs(recognizer._features(wav_bytes(_samples(name), 16000)))
        first = np.asarray(generator.get_logits(), np.float32).reshape(-1)
        assert np.isfinite(first[list(config.suppress_tokens)]).all() and 50359 in config.suppress_tokens  # not masked
        while not generator.is_done():
            generator.generate_next_token()
        own = [int(t) for t in generator.get_sequence(0)][len(config.prompt):]
        assert own == GREEDY[f"{name}.wav"]  # its own loop stops at end-of-text, not kept in the sequence


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "whisper_vocab"
    shutil.copytree(FLOAT, folder, ignore=OTHERS)
    return folder


def test_a_damaged_genai_config_names_the_file_and_the_backend(tmp_path: Path) -> None:
    from pytest_edge.run.speech_plan import open_recognizer

    folder = _copy(tmp_path)
    own = folder / "genai" / "genai_config.json"
    text = own.read_text()
    own.write_text(text[:200])
    with pytest.raises(BackendError, match=r"genai/genai_config.json \(onnxruntime-genai\): not readable JSON: "):
        open_recognizer(GENAI, folder, 1)
    config = json.loads(text)
    config["model"]["vocab_size"] = 51864
    own.write_text(json.dumps(config))
    with pytest.raises(BackendError, match=r"genai/genai_config.json \(onnxruntime-genai\): vocab_size 51864, "
                                           r"config.json's vocab_size 51865"):
        open_recognizer(GENAI, folder, 1)
    config = json.loads(text)
    config["model"]["decoder"]["num_hidden_layers"] = 4
    own.write_text(json.dumps(config))
    with pytest.raises(BackendError, match=r"genai_config.json \(onnxruntime-genai\): decoder.num_hidden_layers 4, "
                                           r"config.json's decoder_layers 2"):
        open_recognizer(GENAI, folder, 1)
    config = json.loads(text)
    config["model"]["decoder"]["bogus"] = 1  # GenAI's own parser refuses it: its reason is quoted
    own.write_text(json.dumps(config))
    with pytest.raises(BackendError, match=r"genai \(onnxruntime-genai\): cannot load: .*genai_config.json.* "
                                           r"Unknown value \"bogus\""):
        open_recognizer(GENAI, folder, 1)
    own.write_text(text)
    audio = folder / "genai" / "audio_processor_config.json"
    audio.write_text(audio.read_text().replace('"n_mel": 80', '"n_mel": 128'))
    with pytest.raises(BackendError, match=r"audio_processor_config.json \(onnxruntime-genai\): log_mel_spectrogram's "
                                           r"n_mel 128, config.json's num_mel_bins 80"):
        open_recognizer(GENAI, folder, 1)


def test_genai_judged_against_onnx_runtimes_golden(pytester: pytest.Pytester) -> None:
    shutil.copytree(FLOAT, pytester.path / "models" / "whisper_vocab", ignore=OTHERS)
    shutil.copytree(SPEECH / "whisper_tiny", pytester.path / "models" / "whisper_tiny")
    shutil.copytree(AUDIO, pytester.path / "audio", ignore=shutil.ignore_patterns("*.npy"))
    pytester.makepyfile(test_asr="""
        import pytest

        BOTH = ["audio/hello.wav", "audio/weather.wav"]

        @pytest.mark.edge_asr(model="models/whisper_vocab", audio=BOTH, new_tokens=12,
                              backends=["onnxruntime-cpu", "onnxruntime-genai"])
        def test_float(edge_asr):
            pass

        @pytest.mark.edge_asr(model="models/whisper_tiny", audio=BOTH, new_tokens=12, backends=["onnxruntime-genai"])
        def test_no_genai_export(edge_asr):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "float and onnxruntime-cpu").assert_outcomes(passed=1,
                                                                                                       deselected=2)
    golden = json.loads((pytester.path / "golden" / "models" / "whisper_vocab" / "speech" / "hello.json").read_text())
    assert golden["meta"]["reference_backend"] == "onnxruntime-cpu" and golden["tokens"] == GREEDY["hello.wav"]

    result = pytester.runpytest_inprocess("--edge-report=r.json", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*whisper_tiny holds no onnxruntime-genai export (no genai/encoder.onnx, *"])
    records = {(r["test"].split("::")[1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    genai = records[("test_float", GENAI)]
    assert genai["verdict"] == "passed" and genai["runtime"]["name"] == "onnxruntime-genai"
    assert [f["first_difference"] for f in genai["speech"]["files"]] == [None, None]
    for file in genai["speech"]["files"]:
        assert file["encoder_ms"] is None and file["first_token_ms"] > 0 and file["decode_tokens_per_s"] > 0
    forced = genai["speech"]["teacher_forced"]
    assert forced["positions"] == len(GREEDY["hello.wav"]) + len(GREEDY["weather.wav"]) and forced["top1_agreement"] == 1.0 and forced["kld"]["mean"] < 1e-6
