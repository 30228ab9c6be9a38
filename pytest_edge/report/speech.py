"""The speech section of the reports (edge_asr records, docs/speech.md): one row per audio file of
each speech check, the figures the conformance table has no column for: whether the tokens equal
the golden's (or where they part), WER and CER against the reference's transcript, the real-time
factor and each stage's time, and for audio longer than one window each window's latency ("window ms", in order).
Read from the report's ``speech`` block only: :func:`speech_of`."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .table import figure

HEADERS = ["test", "model", "backend", "audio", "audio s", "tokens", "WER", "CER", "real-time factor", "encoder ms",
           "first token ms", "decode tokens/s", "window ms", "verdict"]


def speech_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The speech block of a record; None for another kind's record or a block that is no mapping."""
    block = record.get("speech")
    return block if isinstance(block, Mapping) else None


def _shown(value: Any, fmt: str) -> str:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return figure(value if number else None, fmt)


def speech_rows(records: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Cells (text, not escaped) per audio file of every speech record, by model, backend, test."""
    rows = []
    for record in records:
        block = speech_of(record)
        if block is None:
            continue
        for found in block.get("files") or []:
            if not isinstance(found, Mapping):
                continue
            first = found.get("first_difference")
            tokens = "equal" if first is None else f"differ at {first}"
            rows.append([str(record.get("test", "")), str((record.get("model") or {}).get("name", "")),
                         str(record.get("backend", "")), str(found.get("audio", "")),
                         _shown(found.get("audio_s"), ".2f"), tokens, _shown(found.get("wer"), ".3f"),
                         _shown(found.get("cer"), ".3f"), _shown(found.get("real_time_factor"), ".4f"),
                         _shown(found.get("encoder_ms"), ".2f"), _shown(found.get("first_token_ms"), ".2f"),
                         _shown(found.get("decode_tokens_per_s"), ".0f"), _windows(found.get("windows")),
                         str(record.get("verdict", ""))])
    return sorted(rows, key=lambda row: (row[1], row[2], row[0], row[3]))


def _windows(windows: Any) -> str:
    """Each window's latency, in order ("412.10 / 388.02"); one window: "—"."""
    if not isinstance(windows, list) or len(windows) < 2:
        return figure(None, ".2f")
    return " / ".join(_shown(w.get("total_ms") if isinstance(w, Mapping) else None, ".2f") for w in windows)
