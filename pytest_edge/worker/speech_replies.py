"""The replies of a speech export's requests (OpenSpeech, ForceSpeech), typed as worker/protocol.py's
replies are and read with its ``reply_as``. Apart from protocol.py because OpenSpeech's names
backends.speech's SpeechConfig, whose import (7 ms: the features' module) a worker pays only where it
opens a speech export, never at its start."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends.speech import SpeechConfig


@dataclass
class SpeechOpened:
    """OpenSpeech's reply: the configuration of the recognizer the worker opened."""

    config: SpeechConfig


@dataclass
class ForcedSpeechLogits:
    """ForceSpeech's reply: the decoder's logits [len(tokens), vocab] at each forced position, None
    where the runtime gives none."""

    logits: np.ndarray | None


__all__ = ["ForcedSpeechLogits", "SpeechOpened"]
