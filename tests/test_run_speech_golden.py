"""run/speech_golden.py: a speech golden file read as what a speech check compares against."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.errors import GoldenError
from pytest_edge.files import sha256_file
from pytest_edge.run.speech_golden import GoldenWindow, SpeechGolden, golden_path, read_speech_golden


def _audio(tmp_path: Path) -> Path:
    audio = tmp_path / "hello.wav"
    audio.write_bytes(b"RIFF not really")
    return audio


def test_one_window_and_several_are_read_as_windows(tmp_path: Path) -> None:
    audio = _audio(tmp_path)
    path = golden_path(tmp_path / "golden", "whisper", audio)
    assert path == tmp_path / "golden/whisper/speech/hello.json"
    path.parent.mkdir(parents=True)
    meta = {"reference_backend": "onnxruntime-cpu", "audio_sha256": sha256_file(audio)}
    path.write_text(json.dumps({"tokens": [5, 6, 7], "ended": True, "top_ids": [[5, 1], [6, 1], [7, 1]],
                                "top_logprobs": [[-0.1, -3], [-0.2, -3], [-0.3, -3]], "rest_logprob": [None, -5, -5],
                                "meta": meta}))
    golden = read_speech_golden(path, audio, "whisper", new_tokens=2)
    (window,) = golden.windows
    assert window.tokens == [5, 6] and golden.tokens == [5, 6] and golden.transcript == "w5 w6"
    assert golden.reference == "onnxruntime-cpu"
    assert window.distributions is not None and window.distributions.ids.tolist() == [[5, 1], [6, 1]]
    assert np.isneginf(window.distributions.rest[0])
    path.write_text(json.dumps({"windows": [{"tokens": [1], "ended": True}, {"tokens": [2, 3], "ended": False}],
                                "meta": meta}))
    assert read_speech_golden(path, audio, "whisper", new_tokens=2) == SpeechGolden(
        [GoldenWindow([1], None), GoldenWindow([2, 3], None)], "onnxruntime-cpu")


def test_a_golden_that_does_not_fit_is_an_error_naming_it(tmp_path: Path) -> None:
    audio = _audio(tmp_path)
    path = golden_path(tmp_path, "m", audio)
    with pytest.raises(GoldenError, match=f"no speech golden {path} for hello.wav of m: record it"):
        read_speech_golden(path, audio, "m", 4)
    path.parent.mkdir(parents=True)
    meta = {"audio_sha256": sha256_file(audio)}
    path.write_text(json.dumps({"tokens": [1], "ended": False, "meta": meta}))
    with pytest.raises(GoldenError, match="holds 1 tokens, the test asks for new_tokens=4"):
        read_speech_golden(path, audio, "m", 4)
    path.write_text(json.dumps({"windows": "none", "meta": meta}))
    with pytest.raises(GoldenError, match="not a speech golden"):
        read_speech_golden(path, audio, "m", 4)
    path.write_text(json.dumps({"tokens": [1], "ended": True, "meta": {"audio_sha256": "0" * 64}}))
    with pytest.raises(GoldenError, match="recorded from another hello.wav"):
        read_speech_golden(path, audio, "m", 4)
