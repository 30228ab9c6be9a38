"""ONNX Runtime GenAI's speech capability: a Whisper model through GenAI's own model builder
(``python -m onnxruntime_genai.models.builder -i HF_FOLDER -o EXPORT/genai -p fp32 -e cpu``) in the
export folder's ``genai/``, beside the export's ``config.json`` and ``generation_config.json``, run
as GenAI's Whisper example runs it (examples/python/whisper.py of its repository): ``og.Model``,
its multimodal processor making the log-mel features from the audio (GenAI's own recipe,
``audio_processor_config.json``) and encoding the forced prompt (start-of-transcript, language,
task, no-timestamps) with its tokenizer, then ``og.Generator``.

GenAI runs the encoder inside the generator's first decoder call (``set_inputs`` runs the encoder,
then the decoder over the prompt, as one ``State::Run``): the encoder is not timed apart
(``encoder_ms`` None); the first token and the steps after it are.

Suppression: GenAI's search applies no suppressed tokens (its sources have none, and neither has
``genai_config.json``'s ``search``; the builder does not carry ``generation_config.json``'s
``suppress_tokens`` over). Its own ``generate_next_token`` loop, unsuppressed, emitted
``<|transcribe|>`` at position 9 of both test files on a random network, which the reference never
may. So each step
takes the generator's logits (``get_logits``), picks the argmax with the generation configuration's
suppression (``speech.greedy_pick``, as every runtime here) and feeds it back with
``append_tokens``: GenAI's decoder and KV cache, the reference's decoding rules.

Teacher-forced logits: ``get_output("logits")`` holds every position the last call ran (the
prompt's four, then the golden's tokens but the last, appended at once)."""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import numpy as np

from ...errors import BackendError
from ..speech import ExportJson, SpeechConfig, Stopwatch, Transcription, greedy_decode, one_window
from . import SPEECH_FOLDER

BACKEND = "onnxruntime-genai"
GENAI_CONFIG = "genai_config.json"
AUDIO_CONFIG = "audio_processor_config.json"
START, END = "<|startoftranscript|>", "<|endoftext|>"  # the tokens GenAI's Whisper example spells


class _Section(TypedDict, total=False):
    """An encoder's or decoder's section of ``genai_config.json``'s model: the keys checked."""

    num_hidden_layers: int
    num_attention_heads: int
    hidden_size: int


class _Model(TypedDict, total=False):
    """``genai_config.json``'s ``model`` (GenAI's model builder writes it): the keys checked."""

    type: str
    eos_token_id: int | list[int]
    vocab_size: int
    context_length: int
    encoder: _Section
    decoder: _Section


class _GenAIConfig(TypedDict, total=False):
    """``genai_config.json``: the keys read."""

    model: _Model


class _Operation(TypedDict, total=False):
    type: str  # "LogMelSpectrum", ...
    attrs: dict[str, int]  # n_mel, n_fft, hop_length, chunk_size


class _Step(TypedDict, total=False):
    operation: _Operation


class _FeatureExtraction(TypedDict, total=False):
    sequence: list[_Step]


class _AudioConfig(TypedDict, total=False):
    """``audio_processor_config.json`` (the builder's recipe of the log-mel features): the keys read."""

    feature_extraction: _FeatureExtraction


_File = TypeVar("_File", _GenAIConfig, _AudioConfig)


def wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    """``audio`` (float32 in [-1, 1), as read_wav gives a 16-bit file) as 16-bit mono WAV bytes: the
    file's own samples again (x * 32768 is exact), for GenAI's processor, which decodes audio files."""
    written = io.BytesIO()
    with wave.open(written, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.clip(np.round(np.asarray(audio, np.float64) * 32768), -32768, 32767).astype("<i2").tobytes())
    return written.getvalue()


class GenAIRecognizer:
    def __init__(self, folder: Path, threads: int) -> None:
        import onnxruntime_genai as og

        self.og = og
        self.config = SpeechConfig.opened_by(folder, BACKEND)
        self.path = folder / SPEECH_FOLDER
        self._check_config(json.loads((folder / "config.json").read_text()))  # SpeechConfig.read has read it
        try:
            og_config = og.Config(str(self.path))
            options = {"session_options": {"intra_op_num_threads": threads, "inter_op_num_threads": 1}}
            og_config.overlay(json.dumps({"model": {"encoder": options, "decoder": options}}))
            self.model = og.Model(og_config)
            self.processor = self.model.create_multimodal_processor()
            self.tokenizer = og.Tokenizer(self.model)
        except Exception as exc:  # noqa: BLE001 - onnxruntime-genai raises its own classes
            raise BackendError(f"{self.path} ({BACKEND}): cannot load: {exc}") from None
        self.prompt_text = self._check_tokenizer()

    def _load(self, path: Path, kind: type[_File]) -> _File:
        """The JSON object in ``path``, read as ``kind`` (a TypedDict of the keys checked: their values
        are compared as they come, so a wrong type is a mismatch said with the file's name)."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise BackendError(f"{path} ({BACKEND}): missing (GenAI's model builder writes {GENAI_CONFIG}, "
                               f"{AUDIO_CONFIG}, encoder.onnx and decoder.onnx)") from None
        except (OSError, ValueError) as exc:
            raise BackendError(f"{path} ({BACKEND}): not readable JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BackendError(f"{path} ({BACKEND}): not a JSON object")
        return data

    def _check_config(self, export: ExportJson) -> None:
        """GenAI's own configuration (the builder's ``genai_config.json`` and
        ``audio_processor_config.json``) against the export's: the model's type, vocabulary,
        end-of-text, context and shape, the features' mel bins, FFT, hop and window."""
        config = self.config
        own_path = self.path / GENAI_CONFIG
        own = self._load(own_path, _GenAIConfig)
        model = own.get("model")
        if not isinstance(model, dict):
            raise BackendError(f"{own_path} ({BACKEND}): no model object")
        if model.get("type") != "whisper":
            raise BackendError(f"{own_path} ({BACKEND}): model type {model.get('type')!r}, not a Whisper export "
                               "(GenAI's model builder writes 'whisper')")
        eos = model.get("eos_token_id")
        eos = eos if isinstance(eos, list) else [eos]
        if config.eos_token_id not in eos:
            raise BackendError(f"{own_path} ({BACKEND}): eos_token_id {model.get('eos_token_id')}, the export's "
                               f"generation_config.json says {config.eos_token_id}")
        pairs = [("vocab_size", model.get("vocab_size"), "config.json's vocab_size", config.vocab_size),
                 ("context_length", model.get("context_length"), "config.json's max_target_positions",
                  config.max_target_positions)]
        for part, layers, heads in (("encoder", "encoder_layers", "encoder_attention_heads"),
                                    ("decoder", "decoder_layers", "decoder_attention_heads")):
            section = model.get(part) if isinstance(model.get(part), dict) else {}
            pairs += [(f"{part}.num_hidden_layers", section.get("num_hidden_layers"), f"config.json's {layers}",
                       export.get(layers)),
                      (f"{part}.num_attention_heads", section.get("num_attention_heads"), f"config.json's {heads}",
                       export.get(heads)),
                      (f"{part}.hidden_size", section.get("hidden_size"), "config.json's d_model", export.get("d_model"))]
        for key, theirs, what, ours in pairs:
            if theirs != ours:
                raise BackendError(f"{own_path} ({BACKEND}): {key} {theirs}, {what} {ours}")

        audio_path = self.path / AUDIO_CONFIG
        steps = self._load(audio_path, _AudioConfig).get("feature_extraction", {}).get("sequence", [])
        attrs = {step.get("operation", {}).get("type"): step.get("operation", {}).get("attrs", {})
                 for step in steps if isinstance(step, dict)}
        mel = attrs.get("LogMelSpectrum")
        if mel is None:
            raise BackendError(f"{audio_path} ({BACKEND}): no LogMelSpectrum step: not Whisper's features")
        features = config.features
        for key, theirs, what, ours in (("n_mel", mel.get("n_mel"), "config.json's num_mel_bins", config.num_mel_bins),
                                        ("n_fft", mel.get("n_fft"), "preprocessor_config.json's n_fft", features.n_fft),
                                        ("hop_length", mel.get("hop_length"), "preprocessor_config.json's hop_length",
                                         features.hop_length),
                                        ("chunk_size", mel.get("chunk_size"), "preprocessor_config.json's chunk_length",
                                         features.chunk_length)):
            if theirs != ours:
                raise BackendError(f"{audio_path} ({BACKEND}): log_mel_spectrogram's {key} {theirs}, {what} {ours}")

    def _check_tokenizer(self) -> str:
        """The forced prompt as GenAI's processor takes it, text its tokenizer encodes: the
        configuration's ids decoded, which must encode back to the same ids, with the start and end
        tokens at the ids the export says."""
        config = self.config
        encode = self.tokenizer.encode
        for text, token, what in ((START, config.decoder_start_token_id, "decoder_start_token_id"),
                                  (END, config.eos_token_id, "eos_token_id")):
            found = [int(t) for t in encode(text)]
            if found != [token]:
                raise BackendError(f"{self.path / 'tokenizer.json'} ({BACKEND}): encodes {text} as {found}, the export's "
                                   f"{what} is {token}")
        text = self.tokenizer.decode(np.asarray(config.prompt, np.int32))
        found = [int(t) for t in encode(text)]
        if found != config.prompt:
            raise BackendError(f"{self.path / 'tokenizer.json'} ({BACKEND}): the forced prompt {config.prompt} decodes "
                               f"to {text!r}, which encodes as {found}")
        return text

    def _features(self, wav: bytes) -> Any:
        """GenAI's processor on the audio file's bytes: its log-mel features and the prompt's ids."""
        inputs = self.processor(self.prompt_text, audios=self.og.Audios.open_bytes(wav))
        shape = tuple(inputs["audio_features"].shape())
        if shape[1:] != (self.config.num_mel_bins, self.config.features.frames):
            raise BackendError(f"{self.path / AUDIO_CONFIG} ({BACKEND}): GenAI's features are {list(shape)}, the export "
                               f"takes {self.config.num_mel_bins} mel bins x {self.config.features.frames} frames")
        return inputs

    def _generator(self) -> Any:
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.config.max_target_positions, do_sample=False)
        return self.og.Generator(self.model, params)

    def _logits(self, generator: Any, step: int) -> np.ndarray:
        logits = np.asarray(generator.get_logits(), np.float32).reshape(-1)
        if step == 0 and logits.size != self.config.vocab_size:
            raise BackendError(f"{self.path / 'decoder.onnx'} ({BACKEND}): logits over {logits.size} ids, config.json's "
                               f"vocab_size is {self.config.vocab_size}")
        return logits

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        config = self.config
        audio_s = one_window(audio, config, BACKEND)
        wav = wav_bytes(audio, config.features.sampling_rate)  # before the clock: an app hands GenAI a file
        clock = Stopwatch()
        try:
            inputs = self._features(wav)
            features_ms = clock.lap()
            generator = self._generator()
            generator.set_inputs(inputs)  # the encoder, then the decoder over the prompt: one call
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.path} ({BACKEND}): the processor or the encoder failed: {exc}") from None

        def next_logits(step: int, tokens: list[int]) -> np.ndarray | None:
            if step > 0:  # the prompt's logits came with set_inputs; then one token a step, cached
                if len(config.prompt) + len(tokens) >= config.max_target_positions:  # as onnxruntime-cpu
                    return None
                try:
                    generator.append_tokens([tokens[-1]])
                except Exception as exc:  # noqa: BLE001
                    raise BackendError(f"{self.path} ({BACKEND}): the decoder failed at step {step}: {exc}") from None
            return self._logits(generator, step)

        tokens, ended, first_token_ms, decode_s = greedy_decode(next_logits, config, new_tokens, clock)
        return Transcription(tokens, ended, audio_s, features_ms, None, first_token_ms, decode_s, clock.total())

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray:
        """Logits [len(tokens), vocab]: the prompt's last position, then one append of ``tokens``
        (but the last), every position of which ``get_output("logits")`` holds."""
        config = self.config
        if len(config.prompt) + len(tokens) - 1 > config.max_target_positions:
            raise BackendError(f"{self.path} ({BACKEND}): {len(tokens)} tokens after the forced start exceed the "
                               f"decoder's context of {config.max_target_positions}")
        try:
            generator = self._generator()
            generator.set_inputs(self._features(wav_bytes(audio, config.features.sampling_rate)))
            rows = [np.asarray(generator.get_output("logits"), np.float32).reshape(-1, config.vocab_size)[-1:]]
            if len(tokens) > 1:
                generator.append_tokens(list(tokens[:-1]))
                rows.append(np.asarray(generator.get_output("logits"), np.float32).reshape(-1, config.vocab_size))
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.path} ({BACKEND}): the decoder failed teacher-forced: {exc}") from None
        logits = np.concatenate(rows)
        if len(logits) != len(tokens):
            raise BackendError(f"{self.path} ({BACKEND}): get_output('logits') gave {len(logits)} positions for "
                               f"{len(tokens)} forced tokens")
        return logits
