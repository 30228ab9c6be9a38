"""CTranslate2's speech capability: a Whisper model converted by CTranslate2's own converter
(``ct2-transformers-converter`` / ``TransformersConverter``, float32 or ``quantization="int8"``)
in the export folder's ``ctranslate2/`` (``model.bin``, ``config.json``, ``vocabulary.json``),
beside the export's configuration files, run as faster-whisper runs it: log-mel features in NumPy
(backends/speech_features.py, as faster-whisper computes its own), ``Whisper.encode`` once, then
``Whisper.generate`` greedy (beam 1) from the configuration's forced start tokens, with the
suppression CTranslate2's converter wrote into its ``config.json`` (checked against the export's
generation configuration).

Teacher-forced logits: one ``generate(..., return_logits_vocab=True)`` with the forced start and
the golden's tokens (but the last) as the prompt: CTranslate2 forces the tokens after the start
sequence as a prefix and returns the logits of every step, the forced ones included (checked: a
prefix of ids 100, 200, 300 comes back as the sequence's first three tokens, with four rows of
logits), so row j predicts token j having seen the start and the tokens before it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BackendError
from ..speech import SpeechConfig, Transcription, one_window
from ..speech_features import log_mel
from . import FOLDER

BACKEND = "ctranslate2"


class Ct2Recognizer:
    def __init__(self, folder: Path, threads: int) -> None:
        import ctranslate2

        self.ctranslate2 = ctranslate2
        self.config = SpeechConfig.opened_by(folder, BACKEND)
        self.path = folder / FOLDER
        self._check_config()
        try:
            self.model = ctranslate2.models.Whisper(str(self.path), device="cpu", compute_type="default",
                                                    intra_threads=threads, inter_threads=1)
        except Exception as exc:  # noqa: BLE001 - CTranslate2 raises RuntimeError/ValueError for any load failure
            raise BackendError(f"{self.path} ({BACKEND}): cannot load: {exc}") from None
        if self.model.n_mels != self.config.num_mel_bins:
            raise BackendError(f"{self.path} ({BACKEND}): the model takes {self.model.n_mels} mel bins, config.json "
                               f"says {self.config.num_mel_bins}")

    def _check_config(self) -> None:
        """CTranslate2's own configuration (its converter's ``config.json`` and ``vocabulary.json``)
        against the export's: vocabulary size and the suppressed tokens."""
        def load(name: str) -> Any:
            path = self.path / name
            try:
                return json.loads(path.read_text())
            except FileNotFoundError:
                raise BackendError(f"{path} ({BACKEND}): missing (CTranslate2's converter writes model.bin, "
                                   "config.json and vocabulary.json)") from None
            except (OSError, ValueError) as exc:
                raise BackendError(f"{path} ({BACKEND}): not readable JSON: {exc}") from None

        own, vocabulary = load("config.json"), load("vocabulary.json")
        if not isinstance(own, dict) or not isinstance(vocabulary, list):
            raise BackendError(f"{self.path} ({BACKEND}): config.json is not an object or vocabulary.json not a list")
        if len(vocabulary) != self.config.vocab_size:
            raise BackendError(f"{self.path / 'vocabulary.json'} ({BACKEND}): {len(vocabulary)} tokens, the export's "
                               f"config.json says vocab_size {self.config.vocab_size}")
        for theirs, ours, what in ((own.get("suppress_ids"), self.config.suppress_tokens, "suppress_tokens"),
                                   (own.get("suppress_ids_begin"), self.config.begin_suppress_tokens,
                                    "begin_suppress_tokens")):
            if sorted(theirs or []) != sorted(ours):
                raise BackendError(f"{self.path / 'config.json'} ({BACKEND}): suppresses {len(theirs or [])} tokens "
                                   f"where the export's generation_config.json {what} has {len(ours)}")

    def _features(self, audio: np.ndarray) -> Any:
        return self.ctranslate2.StorageView.from_array(np.ascontiguousarray(log_mel(audio, self.config.features)))

    def _generate(self, encoded: Any, prompt: list[int], new_tokens: int, logits: bool = False) -> Any:
        """Greedy generation of at most ``new_tokens`` after ``prompt``; with ``logits``, raw (no
        suppression: every position of a teacher-forced prompt would be CTranslate2's "beginning")."""
        try:
            # CTranslate2 4.8's Whisper returns at most max_length // 2 tokens past 4, a forced prefix
            # included (measured here: max_length 4, 5, 6, 8, 12 and 30 gave 1, 2, 3, 4, 6 and 15).
            return self.model.generate(encoded, [prompt], beam_size=1, max_length=max(4, 2 * new_tokens),
                                       return_logits_vocab=logits, suppress_blank=not logits,
                                       suppress_tokens=[] if logits else [-1])[0]
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.path} ({BACKEND}): generate failed: {exc}") from None

    def transcribe(self, audio: np.ndarray, new_tokens: int) -> Transcription:
        config = self.config
        audio_s = one_window(audio, config, BACKEND)
        start = time.perf_counter()
        features = self._features(audio)
        features_done = time.perf_counter()
        try:
            encoded = self.model.encode(features, to_cpu=False)
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.path} ({BACKEND}): the encoder failed: {exc}") from None
        encoded_done = time.perf_counter()
        result = self._generate(encoded, config.prompt, new_tokens + 1)
        end = time.perf_counter()
        found = list(result.sequences_ids[0])
        # generate leaves end-of-text out: fewer tokens than asked for means it was generated
        ended = len(found) < new_tokens + 1
        return Transcription(found[:new_tokens], ended, audio_s, (features_done - start) * 1e3,
                             (encoded_done - features_done) * 1e3, None, end - encoded_done, (end - start) * 1e3)

    def teacher_force(self, audio: np.ndarray, tokens: list[int]) -> np.ndarray:
        encoded = self.model.encode(self._features(audio), to_cpu=False)
        result = self._generate(encoded, [*self.config.prompt, *tokens[:-1]], len(tokens), logits=True)
        forced = list(result.sequences_ids[0][:len(tokens) - 1])
        if forced != list(tokens[:-1]) or len(result.logits[0]) < len(tokens):
            raise BackendError(f"{self.path} ({BACKEND}): generate did not keep the forced tokens "
                               f"({forced} for {tokens[:-1]}) or gave {len(result.logits[0])} rows of logits for "
                               f"{len(tokens)} positions")
        return np.asarray([np.asarray(row, np.float32).reshape(-1) for row in result.logits[0][:len(tokens)]])
