"""whisper.cpp's speech capability: a GGML Whisper file (``ggml-model.bin``, as whisper.cpp's own
converters write it) beside the export's configuration files, run by whisper.cpp's own pipeline
(``whisper_full``: its log-mel features, its encoder, its greedy decoder with its own token
suppression) through pywhispercpp, as apps run it.

The configuration whisper.cpp uses is read from the file's own header (vocabulary, mel bins, text
context) and checked against the export's ``config.json``; whisper.cpp fixes its special tokens by
the vocabulary's size, so the export's start, language, task and no-timestamps tokens are checked
against whisper.cpp's own ids: a contradiction is an error naming the file and the backend.

Teacher-forced logits: pywhispercpp's ``whisper_get_logits`` returns a float where whisper.h
returns a pointer (one value, not the vocabulary), so they are read through whisper.h's C API
(``whisper_decode`` then ``whisper_get_logits``) with ctypes, on the same libwhisper pywhispercpp
loads: its decoder fed the forced start then the golden's tokens one at a time (its KV cache)."""

from __future__ import annotations

import ctypes
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendError
from ..speech import RuntimeTimers, SpeechConfig, Transcription, one_window
from . import MODEL_FILE

BACKEND = "whisper-cpp"
GGML_MAGIC = 0x67676D6C
# whisper.cpp's special tokens for a multilingual vocabulary of 51865 ids or more (whisper_vocab:
# end-of-text 50257, start-of-transcript 50258, the languages from 50259, the rest after them).
FIELDS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer", "n_text_ctx",
          "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")


@dataclass(frozen=True)
class GgmlHeader:
    """The hyperparameters a GGML Whisper file begins with (whisper.cpp's whisper_model_load)."""
    n_vocab: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_mels: int
    ftype: int

    @classmethod
    def read(cls, path: Path) -> "GgmlHeader":
        try:
            with path.open("rb") as file:
                head = file.read(4 * (1 + len(FIELDS)))
        except FileNotFoundError:
            raise BackendError(f"{path} ({BACKEND}): missing (a whisper.cpp export holds {MODEL_FILE} beside "
                               "config.json)") from None
        except OSError as exc:
            raise BackendError(f"{path} ({BACKEND}): not readable: {exc}") from None
        if len(head) < 4 * (1 + len(FIELDS)):
            raise BackendError(f"{path} ({BACKEND}): {len(head)} bytes, shorter than a GGML Whisper header")
        magic, *values = struct.unpack(f"<{1 + len(FIELDS)}i", head)
        if magic != GGML_MAGIC:
            raise BackendError(f"{path} ({BACKEND}): magic {magic:#x}, not a GGML Whisper file ({GGML_MAGIC:#x})")
        return cls(*values)


def _whisper_ids(n_vocab: int) -> dict[str, int]:
    """whisper.cpp's special-token ids for a vocabulary of ``n_vocab`` (whisper_model_load)."""
    multilingual = n_vocab >= 51865
    eot = 50257 if multilingual else 50256
    languages = n_vocab - 51765 - int(multilingual)
    return {"multilingual": multilingual, "eot": eot, "sot": eot + 1, "first_language": eot + 2, "languages": languages,
            "translate": eot + 2 + languages, "transcribe": eot + 3 + languages,
            "no_timestamps": eot + 7 + languages}


class _Timings:
    """whisper.cpp's own timers, as whisper_print_timings writes them to its log."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, level: int, text: str) -> None:
        self.lines.append(text)

    def parse(self) -> RuntimeTimers:
        found: dict[str, float] = {}
        for line in "".join(self.lines).splitlines():
            if "whisper_print_timings:" not in line or "=" not in line:
                continue
            name, _, value = line.split("whisper_print_timings:", 1)[1].partition("=")
            try:
                found[name.strip()] = float(value.split("ms")[0])
            except ValueError:
                continue
        needed = ("mel time", "encode time", "decode time", "batchd time", "prompt time", "sample time", "total time")
        missing = [n for n in needed if n not in found]
        if missing:
            raise BackendError(f"{BACKEND}: whisper_print_timings wrote no {', '.join(missing)} "
                               f"({''.join(self.lines)[-300:]!r})")
        return RuntimeTimers("whisper_print_timings", mel_ms=found["mel time"], encode_ms=found["encode time"],
                             decode_ms=found["decode time"] + found["batchd time"] + found["prompt time"],
                             sample_ms=found["sample time"], total_ms=found["total time"])


class WhisperCppRecognizer:
    def __init__(self, folder: Path, threads: int) -> None:
        import _pywhispercpp as pw

        self.pw, self.threads = pw, threads
        self.config = SpeechConfig.opened_by(folder, BACKEND)
        self.path = folder / MODEL_FILE
        self.header = GgmlHeader.read(self.path)
        self._check_config()
        self._log = _Timings()
        pw.whisper_log_set(self._log)
        try:
            # whisper.h's C API first (ctypes): a file whisper.cpp refuses gives NULL and its reason in
            # its log, where pywhispercpp's wrapper would hand on a null context.
            self.lib = _library(pw)
            self._log.lines.clear()
            self._ctx = self.lib.whisper_init_from_file(str(self.path).encode())
            if not self._ctx:
                reason = " ".join(line.strip() for line in self._log.lines if "failed" in line or "wrong" in line
                                  or "error" in line.lower())
                raise BackendError(f"{self.path} ({BACKEND}): whisper.cpp cannot load it: "
                                   f"{reason or ''.join(self._log.lines)[-300:]}")
            self.context = pw.whisper_init_from_file_with_params(str(self.path), pw.whisper_context_default_params())
        finally:
            pw.whisper_log_set(None)

    def _check_config(self) -> None:
        """The file's own hyperparameters and whisper.cpp's fixed token ids against the export's configuration."""
        header, config = self.header, self.config
        for ours, theirs, what in ((header.n_vocab, config.vocab_size, "vocab_size"),
                                   (header.n_mels, config.num_mel_bins, "num_mel_bins"),
                                   (header.n_text_ctx, config.max_target_positions, "max_target_positions")):
            if ours != theirs:
                raise BackendError(f"{self.path} ({BACKEND}): the file says {what} {ours}, config.json {theirs}")
        if header.n_audio_ctx * 2 != config.features.frames:
            raise BackendError(f"{self.path} ({BACKEND}): an audio context of {header.n_audio_ctx} takes "
                               f"{header.n_audio_ctx * 2} frames, preprocessor_config.json makes {config.features.frames}")
        ids = _whisper_ids(header.n_vocab)
        if (config.decoder_start_token_id, config.eos_token_id) != (ids["sot"], ids["eot"]):
            raise BackendError(f"{self.path} ({BACKEND}): whisper.cpp's start and end tokens for {header.n_vocab} ids "
                               f"are {ids['sot']} and {ids['eot']}; the export's configuration says "
                               f"{config.decoder_start_token_id} and {config.eos_token_id}")
        forced = list(config.forced)
        if not ids["multilingual"]:  # an English-only vocabulary: whisper.cpp forces no language, no task
            if forced != [ids["no_timestamps"]]:
                raise BackendError(f"{self.path} ({BACKEND}): the forced tokens {forced} are not no-timestamps "
                                   f"({ids['no_timestamps']}), as whisper.cpp's English-only decoding begins")
            self.language, self.translate = 0, False
            return
        if not forced or not ids["first_language"] <= forced[0] < ids["first_language"] + ids["languages"]:
            raise BackendError(f"{self.path} ({BACKEND}): the forced tokens {forced} do not begin with a language "
                               f"token ({ids['first_language']}..{ids['first_language'] + ids['languages'] - 1}); "
                               "whisper.cpp decodes from start, language, task")
        if forced[1:] not in ([ids["transcribe"], ids["no_timestamps"]], [ids["translate"], ids["no_timestamps"]]):
            raise BackendError(f"{self.path} ({BACKEND}): the forced tokens {forced} after the language are not "
                               f"transcribe/translate then no-timestamps ({ids['transcribe']}/{ids['translate']}, "
                               f"{ids['no_timestamps']}) as whisper.cpp's no_timestamps decoding begins")
        self.language = forced[0] - ids["first_language"]
        self.translate = forced[1] == ids["translate"]

    def _params(self, new_tokens: int) -> Any:
        pw = self.pw
        params = pw.whisper_full_default_params(pw.WHISPER_SAMPLING_GREEDY)
        params.n_threads = self.threads
        params.no_timestamps = True
        params.single_segment = True
        params.no_context = True
        params.language = pw.whisper_lang_str(self.language)
        params.translate = self.translate
        params.temperature = 0.0
        params.temperature_inc = 0.0  # greedy only: no fallback to sampling at higher temperatures
        params.no_speech_thold = 2.0  # never drop the window as silence (a probability is at most 1)
        params.max_tokens = new_tokens
        params.suppress_blank = True
        params.print_progress = params.print_realtime = params.print_timestamps = params.print_special = False
        return params

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        pw, config = self.pw, self.config
        audio_s = one_window(audio, config, BACKEND)
        samples = np.ascontiguousarray(audio, np.float32)
        params = self._params(new_tokens)
        marks: dict[str, float] = {}
        # whisper.cpp's callbacks mark its stages: the encoder begins (encoder-begin); it ends where
        # whisper_encode_internal asks the abort callback, its first call, just after whisper.cpp's own
        # encode timer stops (each decoder pass asks it again at its end); the first token's logits
        # (the first logits-filter call).
        pw.assign_encoder_begin_callback(params, lambda *_: marks.setdefault("encoder", time.perf_counter()) and True)
        pw.assign_abort_callback(params, lambda *_: marks.setdefault("encoded", time.perf_counter()) and False)
        pw.assign_logits_filter_callback(params, lambda *_: marks.setdefault("logits", time.perf_counter()))
        self._log.lines.clear()
        pw.whisper_log_set(self._log)
        try:
            pw.whisper_reset_timings(self.context)
            start = time.perf_counter()
            code = pw.whisper_full(self.context, params, samples, len(samples))
            end = time.perf_counter()
            self._log.lines.clear()
            pw.whisper_print_timings(self.context)
            timers = self._log.parse()
        finally:
            pw.whisper_log_set(None)
        if code != 0:
            raise BackendError(f"{self.path} ({BACKEND}): whisper_full returned {code}")
        found = [pw.whisper_full_get_token_id(self.context, segment, index)
                 for segment in range(pw.whisper_full_n_segments(self.context))
                 for index in range(pw.whisper_full_n_tokens(self.context, segment))]
        eot = config.eos_token_id
        ended = eot in found[:new_tokens]
        tokens = found[:found.index(eot)] if eot in found else found
        tokens = tokens[:new_tokens]
        missing = [name for name in ("encoder", "encoded", "logits") if name not in marks]
        if missing:  # nothing silent: a stage whisper.cpp never marked is no figure
            raise BackendError(f"{self.path} ({BACKEND}): whisper_full ran without its {', '.join(missing)} callback")
        encoder, encoded, logits = marks["encoder"], marks["encoded"], marks["logits"]
        return Transcription(tokens, ended, audio_s, features_ms=(encoder - start) * 1e3,
                             encoder_ms=(encoded - encoder) * 1e3, first_token_ms=(logits - start) * 1e3,
                             decode_s=end - logits if new_tokens > 1 else 0.0, total_ms=(end - start) * 1e3,
                             runtime_timers=timers)

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray:
        """Logits [len(tokens), vocab] from whisper.h's whisper_decode: the forced start in one batch
        (its last position predicts tokens[0]), then each token but the last after it."""
        lib, ctx, threads = self.lib, self._ctx, self.threads
        samples = np.ascontiguousarray(audio, np.float32)
        if lib.whisper_pcm_to_mel(ctx, samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(samples), threads):
            raise BackendError(f"{self.path} ({BACKEND}): whisper_pcm_to_mel failed")
        if lib.whisper_encode(ctx, 0, threads):
            raise BackendError(f"{self.path} ({BACKEND}): whisper_encode failed")
        vocab = self.header.n_vocab
        rows = []
        fed = list(self.config.prompt)
        batch = (ctypes.c_int32 * len(fed))(*fed)
        if lib.whisper_decode(ctx, batch, len(fed), 0, threads):
            raise BackendError(f"{self.path} ({BACKEND}): whisper_decode failed on the forced start")
        last = len(fed) - 1  # whisper_decode keeps a batch's logits by position: the last one's at its row
        for index, token in enumerate(tokens):
            rows.append(np.ctypeslib.as_array(lib.whisper_get_logits(ctx), shape=((last + 1) * vocab,))[last * vocab:].copy())
            last = 0
            if index == len(tokens) - 1:
                break
            one = (ctypes.c_int32 * 1)(token)
            if lib.whisper_decode(ctx, one, 1, len(fed) + index, threads):
                raise BackendError(f"{self.path} ({BACKEND}): whisper_decode failed at token {index}")
        return np.asarray(rows, np.float32).reshape(len(tokens), vocab)

    def __del__(self) -> None:
        ctx, lib = getattr(self, "_ctx", None), getattr(self, "lib", None)
        if ctx and lib is not None:
            lib.whisper_free(ctx)
            self._ctx = None
        if getattr(self, "context", None) is not None:
            self.pw.whisper_free(self.context)
            self.context = None


def _library(pw: Any) -> ctypes.CDLL:
    """libwhisper as pywhispercpp ships it, beside its module, with whisper.h's signatures."""
    folder = Path(pw.__file__).resolve().parent
    # The file pywhispercpp's module links (its soname, libwhisper.so.1): a copy under another name
    # would load a second libwhisper, with a log of its own.
    found = sorted(folder.glob("libwhisper.so.[0-9]"), key=lambda p: len(p.name)) or \
        sorted(folder.glob("libwhisper.so*"), key=lambda p: len(p.name)) or sorted(folder.glob("libwhisper*.dylib"))
    if not found:
        raise BackendError(f"{BACKEND}: no libwhisper beside {pw.__file__}")
    lib = ctypes.CDLL(str(found[0]))
    lib.whisper_init_from_file.restype = ctypes.c_void_p
    lib.whisper_init_from_file.argtypes = [ctypes.c_char_p]
    lib.whisper_free.argtypes = [ctypes.c_void_p]
    lib.whisper_pcm_to_mel.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_int]
    lib.whisper_encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.whisper_decode.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int]
    lib.whisper_get_logits.restype = ctypes.POINTER(ctypes.c_float)
    lib.whisper_get_logits.argtypes = [ctypes.c_void_p]
    return lib
