"""ONNX Runtime's speech capability: a Whisper export in Hugging Face Optimum's layout
(``encoder_model.onnx``: ``input_features`` [batch, mel bins, frames] -> ``last_hidden_state``;
``decoder_model.onnx``: ``input_ids`` + ``encoder_hidden_states`` -> ``logits``, no past), run on
the CPU execution provider: log-mel features in NumPy (backends/speech_features.py), the encoder
once, then greedy decoding from the configuration's forced start tokens, the decoder re-run over
the whole prefix at each step (the export without past; a tiny model's steps are cheap)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import BackendError
from ..speech import Recognizer, SpeechConfig, SpeechRuntime, Stopwatch, Transcription, greedy_decode, one_window
from ..speech_features import log_mel

BACKEND = "onnxruntime-cpu"


def _session(path: Path, threads: int):
    import onnxruntime as ort

    if not path.is_file():
        raise BackendError(f"{path} ({BACKEND}): missing (an Optimum Whisper export has encoder_model.onnx and "
                           "decoder_model.onnx)")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes
        raise BackendError(f"{path} ({BACKEND}): cannot load: {exc}") from None


class OrtRecognizer:
    def __init__(self, folder: Path, threads: int) -> None:
        self.config = SpeechConfig.opened_by(folder, BACKEND)
        self.encoder_path, self.decoder_path = folder / "encoder_model.onnx", folder / "decoder_model.onnx"
        self.encoder = _session(self.encoder_path, threads)
        self.decoder = _session(self.decoder_path, threads)
        self._check_inputs()

    def _check_inputs(self) -> None:
        """The configuration against the models' own inputs and outputs: mel bins and frames of the
        encoder's features, the decoder's inputs, its logits' vocabulary."""
        encoder = {i.name: i for i in self.encoder.get_inputs()}
        features = encoder.get("input_features")
        if features is None:
            raise BackendError(f"{self.encoder_path} ({BACKEND}): no input_features input (inputs: {list(encoder)}); "
                               "not an Optimum Whisper encoder")
        bins, frames = features.shape[1], features.shape[2]
        if isinstance(bins, int) and bins != self.config.num_mel_bins:
            raise BackendError(f"{self.encoder_path} ({BACKEND}): takes {bins} mel bins, its config.json says "
                               f"{self.config.num_mel_bins}")
        if isinstance(frames, int) and frames != self.config.features.frames:
            raise BackendError(f"{self.encoder_path} ({BACKEND}): takes {frames} frames, preprocessor_config.json "
                               f"makes {self.config.features.frames}")
        decoder = {i.name for i in self.decoder.get_inputs()}
        if not {"input_ids", "encoder_hidden_states"} <= decoder:
            raise BackendError(f"{self.decoder_path} ({BACKEND}): inputs {sorted(decoder)}; an Optimum Whisper "
                               "decoder without past takes input_ids and encoder_hidden_states")
        vocab = self.decoder.get_outputs()[0].shape[-1]
        if isinstance(vocab, int) and vocab != self.config.vocab_size:
            raise BackendError(f"{self.decoder_path} ({BACKEND}): logits over {vocab} ids, config.json's vocab_size "
                               f"is {self.config.vocab_size}")

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        config = self.config
        audio_s = one_window(audio, config, BACKEND)
        clock = Stopwatch()
        features = log_mel(audio, config.features)
        features_ms = clock.lap()
        try:
            hidden = self.encoder.run(None, {"input_features": features})[0]
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.encoder_path} ({BACKEND}): the encoder failed: {exc}") from None
        encoder_ms = clock.lap()

        def next_logits(step: int, tokens: list[int]) -> np.ndarray | None:
            ids = [*config.prompt, *tokens]  # the whole prefix each step: the export has no cache
            if len(ids) >= config.max_target_positions:
                return None
            try:
                return self.decoder.run(None, {"input_ids": np.asarray([ids], np.int64),
                                               "encoder_hidden_states": hidden})[0][0, -1]
            except Exception as exc:  # noqa: BLE001
                raise BackendError(f"{self.decoder_path} ({BACKEND}): the decoder failed at step {step}: {exc}") from None

        tokens, ended, first_token_ms, decode_s = greedy_decode(next_logits, config, new_tokens, clock)
        return Transcription(tokens, ended, audio_s, features_ms, encoder_ms, first_token_ms, decode_s, clock.total())

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray:
        """Logits [len(tokens), vocab]: one decoder run over the forced start and ``tokens`` (but the
        last), row j predicting ``tokens[j]``."""
        config = self.config
        hidden = self.encoder.run(None, {"input_features": log_mel(audio, config.features)})[0]
        ids = [*config.prompt, *tokens[:-1]]
        try:
            logits = self.decoder.run(None, {"input_ids": np.asarray([ids], np.int64),
                                             "encoder_hidden_states": hidden})[0][0]
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.decoder_path} ({BACKEND}): the decoder failed teacher-forced: {exc}") from None
        start = len(config.prompt) - 1
        return np.asarray(logits[start:start + len(tokens)], np.float32)


class OrtSpeech(SpeechRuntime):
    """A Whisper export in Hugging Face Optimum's layout on the CPU EP (``OrtBackend.speech``)."""

    files = ("encoder_model.onnx", "decoder_model.onnx")

    def open(self, folder: Path, threads: int) -> Recognizer:
        return OrtRecognizer(folder, threads)
