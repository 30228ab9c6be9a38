"""A speech model's golden per audio file (docs/speech.md): ``<model>/speech/<audio stem>.json`` under
the golden folder, the reference's greedy tokens of each window the export reads (and, where kept,
its teacher-forced distributions there), read as what a speech check compares against. The file
is untrusted JSON: what does not fit is a GoldenError naming it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import GoldenError
from ..files import sha256_file
from ..golden.tokens import TopLogprobs

WORD_PER_ID = "one word per token id (w<id>): the export has no tokenizer"


def transcript(tokens: Sequence[int]) -> str:
    """The words of ``tokens`` (:data:`WORD_PER_ID`)."""
    return " ".join(f"w{int(t)}" for t in tokens)


def golden_path(golden_dir: Path, model_key: str, audio: Path) -> Path:
    return Path(golden_dir) / model_key / "speech" / f"{audio.stem}.json"


@dataclass(frozen=True)
class GoldenWindow:
    """One window's golden: the reference's tokens (up to the test's new tokens) and its next-token
    distributions at each of them (None: a golden recorded without them)."""

    tokens: list[int]
    distributions: TopLogprobs | None


@dataclass(frozen=True)
class SpeechGolden:
    """One audio file's golden: each window's, in order, and the backend that recorded it."""

    windows: list[GoldenWindow]
    reference: str | None

    @property
    def tokens(self) -> list[int]:
        """Every window's tokens, in order."""
        return [t for window in self.windows for t in window.tokens]

    @property
    def transcript(self) -> str:
        return transcript(self.tokens)


def read_speech_golden(path: Path, audio: Path, owner: str, new_tokens: int) -> SpeechGolden:
    """The golden at ``path`` of ``audio`` (of the model ``owner``; one window's flat format, or
    ``windows``), each window's tokens cut to ``new_tokens``; a file that is no speech golden, holds
    fewer tokens than asked without having ended, or was recorded from other audio is a GoldenError
    naming it."""
    if not path.is_file():
        raise GoldenError(f"no speech golden {path} for {audio.name} of {owner}: record it with "
                          "--edge-update-golden")
    try:
        data = json.loads(path.read_text())
        meta = dict(data["meta"])
        stored = data["windows"] if "windows" in data else [data]
        if not isinstance(stored, list) or not stored:
            raise ValueError("'windows' is not a list of windows")
        kept = []
        for part in stored:
            tokens = [int(t) for t in part["tokens"]]
            n = min(len(tokens), new_tokens)
            distributions = TopLogprobs(np.asarray(part["top_ids"], np.int64)[:n].reshape(n, -1),
                                        np.asarray(part["top_logprobs"], np.float32)[:n].reshape(n, -1),
                                        np.asarray([-np.inf if r is None else r for r in part["rest_logprob"]],
                                                   np.float32)[:n]) if part.get("top_ids") else None
            if len(tokens) < new_tokens and not bool(part["ended"]):
                raise GoldenError(f"{path}: holds {len(tokens)} tokens, the test asks for new_tokens={new_tokens}: "
                                  "re-record it with --edge-update-golden")
            kept.append(GoldenWindow(tokens[:new_tokens], distributions))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise GoldenError(f"{path}: not a speech golden ({type(exc).__name__}: {exc}); re-record it with "
                          "--edge-update-golden") from None
    if meta.get("audio_sha256") != sha256_file(audio):
        raise GoldenError(f"{path}: recorded from another {audio.name} than {audio} holds now: re-record it with "
                          "--edge-update-golden")
    return SpeechGolden(kept, meta.get("reference_backend"))
