"""sherpa-onnx's speech capability: a Whisper model exported by sherpa-onnx's own exporter
(``scripts/whisper/export-onnx.py`` of github.com/k2-fsa/sherpa-onnx) in the export folder's
``sherpa-onnx/`` (``whisper-encoder.onnx``, ``whisper-decoder.onnx``, ``whisper-tokens.txt``), beside
the export's configuration files, run as sherpa-onnx runs it: ``OfflineRecognizer.from_whisper``,
one ``OfflineStream`` per audio file, ``decode_stream``: its own log-mel features
(kaldi-native-fbank's Whisper fbank), its encoder over the speech frames and 1000 frames of zero
padding (not a 30-second window), its greedy search from ``[start, language, task, no-timestamps]``.

What sherpa-onnx does differently from the reference's decoding, said here and in docs/speech.md,
never hidden:

* its greedy search suppresses no token (the plain argmax at every step; the export's
  generation configuration suppresses the special tokens, and blank and end-of-text at the first
  step), and it decodes at most 6 tokens a second of audio (at most half the text context): a test
  asking for more tokens than that is an error, never a shorter comparison;
* its Python result gives token strings, not ids (``OfflineRecognitionResult.tokens``), each the
  bytes its tokens.txt holds for the id, made a Python ``str`` strictly (a token of partial UTF-8
  bytes raises ``UnicodeDecodeError``), a special token (not in tokens.txt) left out, a leading
  U+2581 turned into a space. Mapped back through tokens.txt that is lossy and, for some ids,
  ambiguous. So the recognizer hands sherpa-onnx a symbol table that spells each id as its decimal
  digits, for every id of the vocabulary (the export's tokens.txt checked first: one line per text
  token, ids 0 to end-of-text - 1): the strings it gives back are the ids, special ones included.
  The symbol table is only what sherpa-onnx prints for an id; the encoder, decoder and search are
  the export's and sherpa-onnx's own;
* it runs features, encoder and decoder in the one ``decode_stream`` call, which nothing times
  apart: ``features_ms`` is ``accept_waveform`` (where its fbank runs), the encoder time, time to
  first token and decoder tokens/s are not measured (None), the real-time factor is;
* its API gives no logits: teacher-forced figures are not measured (``teacher_force`` returns
  None, which the check records as not measured and which fails a budget on them)."""

from __future__ import annotations

import base64
import binascii
import mmap
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ...errors import BackendError
from .. import protobuf_wire
from ..speech import SpeechConfig, Transcription, one_window
from . import DECODER, ENCODER, FOLDER, TOKENS

BACKEND = "sherpa-onnx"
# sherpa-onnx's OfflineWhisperGreedySearchDecoder: "assume at most 6 tokens per second", over its
# fbank's frames (10 ms each), and at most n_text_ctx / 2.
TOKENS_PER_SECOND = 6
FRAMES_PER_SECOND = 100


# The encoder metadata sherpa-onnx's exporter writes and its OfflineWhisperModel reads (ints).
_INTS = ("n_mels", "n_audio_ctx", "n_vocab", "n_text_ctx", "n_text_state", "n_text_layer", "sot", "eot", "blank_id",
         "transcribe", "translate", "no_timestamps", "no_speech", "is_multilingual")


def _metadata(view: memoryview) -> dict[str, str]:
    """ModelProto.metadata_props (field 14: StringStringEntryProto, key 1, value 2)."""
    props: dict[str, str] = {}
    for number, wire, value in protobuf_wire.fields(view):
        if number == 14 and wire == 2:
            entry = {n: bytes(v).decode() for n, w, v in protobuf_wire.fields(value) if w == 2}  # type: ignore[arg-type]
            props[entry.get(1, "")] = entry.get(2, "")
    return props


@dataclass(frozen=True)
class SherpaMetadata:
    """The metadata sherpa-onnx's exporter writes into the encoder (``add_meta_data``), read from the
    ONNX file's ``metadata_props`` without loading the model."""
    n_mels: int
    n_audio_ctx: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_layer: int
    sot: int
    eot: int
    blank_id: int
    transcribe: int
    translate: int
    no_timestamps: int
    no_speech: int
    is_multilingual: int
    sot_sequence: tuple[int, ...]
    languages: dict[str, int]  # language code -> its token (all_language_codes/all_language_tokens, in pairs)

    @classmethod
    def read(cls, path: Path) -> "SherpaMetadata":
        try:
            with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    props, problem = _metadata(view), None
                except (ValueError, UnicodeDecodeError) as exc:  # said after the map closes: the traceback holds slices
                    props, problem = {}, str(exc)
                finally:
                    view.release()  # its slices of the map are gone by now, before the map closes
            if problem is not None:
                raise ValueError(problem)
        except FileNotFoundError:
            raise BackendError(f"{path} ({BACKEND}): missing (sherpa-onnx's Whisper exporter writes "
                               f"{Path(ENCODER).name}, {Path(DECODER).name} and {Path(TOKENS).name})") from None
        except (OSError, ValueError, UnicodeDecodeError) as exc:  # mmap of an empty file is a ValueError too
            raise BackendError(f"{path} ({BACKEND}): not an ONNX model: {exc}") from None
        missing = [key for key in (*_INTS, "sot_sequence") if key not in props]
        if missing:
            raise BackendError(f"{path} ({BACKEND}): no {', '.join(missing)} in its metadata: not an encoder written "
                               "by sherpa-onnx's Whisper exporter (scripts/whisper/export-onnx.py)")
        try:
            ints = {key: int(props[key]) for key in _INTS}
            sequence = tuple(int(t) for t in props["sot_sequence"].split(","))
            tokens = [int(t) for t in props.get("all_language_tokens", "").split(",") if t]
        except ValueError as exc:
            raise BackendError(f"{path} ({BACKEND}): metadata not integers: {exc}") from None
        codes = [c for c in props.get("all_language_codes", "").split(",") if c]
        if len(codes) != len(tokens):
            raise BackendError(f"{path} ({BACKEND}): {len(tokens)} language tokens for {len(codes)} language codes")
        return cls(**ints, sot_sequence=sequence, languages=dict(zip(codes, tokens)))

    def figures(self) -> tuple[tuple[str, int], ...]:
        return tuple((f.name, getattr(self, f.name)) for f in fields(self) if f.name in _INTS)


def read_tokens(path: Path, expected: int) -> int:
    """The number of lines of sherpa-onnx's tokens.txt (``<base64 bytes> <id>``, ids 0, 1, ... in
    order, as its exporter writes openai-whisper's tiktoken file); a BackendError naming the file
    where it is not that or does not hold ``expected`` (end-of-text's id) text tokens."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except FileNotFoundError:
        raise BackendError(f"{path} ({BACKEND}): missing (sherpa-onnx's Whisper exporter writes it beside the "
                           "encoder and decoder)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BackendError(f"{path} ({BACKEND}): not readable as sherpa-onnx's tokens.txt: {exc}") from None
    for index, line in enumerate(lines):
        parts = line.split()
        try:
            if len(parts) != 2 or int(parts[1]) != index:
                raise ValueError(f"not '<base64> {index}'")
            # not validate=True: openai-whisper's multilingual.tiktoken itself ends with "= 50256"
            base64.b64decode(parts[0])
        except (ValueError, binascii.Error) as exc:
            raise BackendError(f"{path} ({BACKEND}): line {index + 1} {line[:40]!r}: {exc}") from None
    if len(lines) != expected:
        raise BackendError(f"{path} ({BACKEND}): {len(lines)} tokens, the export's end-of-text is {expected} "
                           "(tokens.txt holds the text tokens before it)")
    return len(lines)


class SherpaRecognizer:
    def __init__(self, folder: Path, threads: int) -> None:
        import sherpa_onnx

        self.sherpa_onnx = sherpa_onnx
        self.config = SpeechConfig.opened_by(folder, BACKEND)
        self.path = folder / FOLDER
        self.meta = SherpaMetadata.read(folder / ENCODER)
        self.language, self.task = self._check_config(folder / ENCODER)
        read_tokens(folder / TOKENS, self.config.eos_token_id)
        decoder = folder / DECODER
        if not decoder.is_file():
            raise BackendError(f"{decoder} ({BACKEND}): missing (sherpa-onnx's Whisper exporter writes it beside the "
                               "encoder)")
        with tempfile.TemporaryDirectory() as tmp:
            # sherpa-onnx reads the symbol table as the recognizer is made: each id spelled as itself
            # (why: the module's docstring), base64 as its tokens.txt is.
            spelled = Path(tmp) / "ids.txt"
            spelled.write_text("".join(f"{base64.b64encode(str(i).encode()).decode()} {i}\n"
                                       for i in range(self.config.vocab_size)))
            try:
                self.recognizer = sherpa_onnx.OfflineRecognizer.from_whisper(
                    encoder=str(folder / ENCODER), decoder=str(decoder), tokens=str(spelled),
                    language=self.language, task=self.task, num_threads=threads, decoding_method="greedy_search")
            except Exception as exc:  # noqa: BLE001 - sherpa-onnx raises RuntimeError/ValueError for any load failure
                raise BackendError(f"{self.path} ({BACKEND}): cannot load {Path(ENCODER).name} and "
                                   f"{Path(DECODER).name}: {exc}") from None

    def _check_config(self, encoder: Path) -> tuple[str, str]:
        """sherpa-onnx's own configuration (the encoder's metadata) against the export's: mel bins,
        vocabulary, text context, start and end tokens, and the forced start it decodes from
        (``[start, language, task, no-timestamps]``): the language code and task to ask it for."""
        meta, config = self.meta, self.config
        for ours, theirs, what in ((meta.n_mels, config.num_mel_bins, "n_mels/num_mel_bins"),
                                   (meta.n_vocab, config.vocab_size, "n_vocab/vocab_size"),
                                   (meta.n_text_ctx, config.max_target_positions, "n_text_ctx/max_target_positions"),
                                   (meta.sot, config.decoder_start_token_id, "sot/decoder_start_token_id"),
                                   (meta.eot, config.eos_token_id, "eot/eos_token_id")):
            if ours != theirs:
                raise BackendError(f"{encoder} ({BACKEND}): its metadata's {what.split('/')[0]} is {ours}, the export's "
                                   f"config says {what.split('/')[1]} {theirs}")
        if config.features.sampling_rate != 16000:
            raise BackendError(f"{encoder} ({BACKEND}): sherpa-onnx's Whisper features take 16000 Hz audio, the "
                               f"export's preprocessor_config.json says {config.features.sampling_rate}")
        forced = list(config.forced)
        if not meta.is_multilingual:
            if forced != [meta.no_timestamps]:
                raise BackendError(f"{encoder} ({BACKEND}): an English-only model decodes from [start, "
                                   f"no-timestamps {meta.no_timestamps}]; the export's generation_config.json forces "
                                   f"{forced}")
            return "en", "transcribe"
        by_token = {token: code for code, token in meta.languages.items()}
        tasks = {meta.transcribe: "transcribe", meta.translate: "translate"}
        if (len(forced) != 3 or forced[0] not in by_token or forced[1] not in tasks
                or forced[2] != meta.no_timestamps or meta.sot_sequence[:1] != (meta.sot,)):
            raise BackendError(f"{encoder} ({BACKEND}): sherpa-onnx decodes from [start {meta.sot}, a language of its "
                               f"metadata, transcribe {meta.transcribe} or translate {meta.translate}, no-timestamps "
                               f"{meta.no_timestamps}]; the export's generation_config.json forces {forced} after "
                               f"{config.decoder_start_token_id}")
        return by_token[forced[0]], tasks[forced[1]]

    def cap(self, audio_s: float) -> int:
        """The fewest tokens sherpa-onnx's greedy search may stop at for ``audio_s`` seconds of audio
        (its fbank's frame count, within a frame of the audio's 10 ms count)."""
        frames = int(audio_s * FRAMES_PER_SECOND) - 1
        return min(int(frames / FRAMES_PER_SECOND * TOKENS_PER_SECOND), self.meta.n_text_ctx // 2)

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        config = self.config
        audio_s = one_window(audio, config, BACKEND)
        samples = np.ascontiguousarray(audio, np.float32)
        start = time.perf_counter()
        stream = self.recognizer.create_stream()
        stream.accept_waveform(config.features.sampling_rate, samples)
        features_done = time.perf_counter()
        self.recognizer.decode_stream(stream)
        end = time.perf_counter()
        spelled = stream.result.tokens
        try:
            found = [int(token) for token in spelled]
        except ValueError:
            raise BackendError(f"{self.path} ({BACKEND}): a token string is not an id of the symbol table it was given: "
                               f"{spelled}") from None
        cap = self.cap(audio_s)
        if len(found) < new_tokens and len(found) >= cap:
            raise BackendError(f"{self.path} ({BACKEND}): stopped after {len(found)} tokens, its greedy search's limit "
                               f"for {audio_s:.2f} s of audio ({TOKENS_PER_SECOND} tokens a second, at most "
                               f"{self.meta.n_text_ctx // 2}): new_tokens={new_tokens} asks for more than it decodes")
        # Fewer tokens than its limit: end-of-text ended them (sherpa-onnx leaves it out).
        ended = len(found) <= new_tokens and len(found) < cap
        # One call decodes: its encoder, first token and decoder steps cannot be timed apart (None, 0).
        return Transcription(found[:new_tokens], ended, audio_s, (features_done - start) * 1e3, None, None, 0.0,
                             (end - start) * 1e3)

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> None:
        """sherpa-onnx's API gives tokens, no logits: not measured (said by the check, never invented)."""
        return None
