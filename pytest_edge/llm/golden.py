"""Goldens of generation: per prompt, the greedy token ids and the first step's logits, under
``<golden dir>/<model>/llm/prompt-<hash>.npz``, named by the prompt's ids (so adding a prompt
never renames another's golden). Written atomically by the reference backend only with
``--edge-update-golden``."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import GoldenError
from ..files import atomic_write


@dataclass
class TokenGolden:
    prompt: list[int]
    tokens: list[int]
    first_logits: np.ndarray
    meta: dict[str, Any]  # reference backend, artifact and its sha256, new_tokens


def prompt_key(prompt: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(prompt, np.int64).tobytes()).hexdigest()[:16]


def golden_path(golden_dir: Path, model: str, prompt: Sequence[int]) -> Path:
    return Path(golden_dir) / model / "llm" / f"prompt-{prompt_key(prompt)}.npz"


def write_golden(path: Path, golden: TokenGolden) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, prompt=np.asarray(golden.prompt, np.int64), tokens=np.asarray(golden.tokens, np.int64),
             first_logits=np.asarray(golden.first_logits, np.float32),
             meta=np.frombuffer(json.dumps(golden.meta, sort_keys=True).encode(), np.uint8))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getvalue())


def read_golden(path: Path, prompt: Sequence[int]) -> TokenGolden:
    """The golden at ``path``; missing, unreadable or for another prompt is a GoldenError naming it."""
    if not path.is_file():
        raise GoldenError(f"no LLM golden {path} for prompt {list(prompt)}: record it with --edge-update-golden")
    try:
        with np.load(path, allow_pickle=False) as data:
            golden = TokenGolden(data["prompt"].tolist(), data["tokens"].tolist(),
                                 data["first_logits"].astype(np.float32),
                                 json.loads(data["meta"].tobytes().decode()))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise GoldenError(f"{path}: unreadable LLM golden ({type(exc).__name__}: {exc}); "
                          "re-record it with --edge-update-golden") from None
    if golden.prompt != list(prompt):
        raise GoldenError(f"{path}: recorded for prompt {golden.prompt}, not {list(prompt)}")
    return golden
