"""The speech section of the reports (edge_asr records, docs/speech.md): one row per audio file of
each speech check, the figures the conformance table has no column for: whether the tokens equal
the golden's (or where they part), WER and CER against the reference's transcript, the real-time
factor and each stage's time, and for audio longer than one window each window's latency ("window ms", in order).
Read from the record's speech block only (``Record.speech``): :func:`speech_of`."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..core.record import Record, SpeechRecord, SpeechWindow
from .table import figure

HEADERS = ["test", "model", "backend", "audio", "audio s", "tokens", "WER", "CER", "real-time factor", "encoder ms",
           "first token ms", "decode tokens/s", "window ms", "verdict"]


def speech_of(record: Record) -> SpeechRecord | None:
    """The speech block of a record; None for another kind's record."""
    return record.speech


def _shown(value: Any, fmt: str) -> str:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return figure(value if number else None, fmt)


def speech_rows(records: Sequence[Record]) -> list[list[str]]:
    """Cells (text, not escaped) per audio file of every speech record, by model, backend, test."""
    rows = []
    for record in records:
        block = speech_of(record)
        if block is None:
            continue
        for found in block.files:
            first = found.first_difference
            tokens = "equal" if first is None else f"differ at {first}"
            rows.append([record.test, record.model.name, record.backend, found.audio,
                         _shown(found.audio_s, ".2f"), tokens, _shown(found.wer, ".3f"),
                         _shown(found.cer, ".3f"), _shown(found.real_time_factor, ".4f"),
                         _shown(found.encoder_ms, ".2f"), _shown(found.first_token_ms, ".2f"),
                         _shown(found.decode_tokens_per_s, ".0f"), _windows(found.windows), str(record.verdict)])
    return sorted(rows, key=lambda row: (row[1], row[2], row[0], row[3]))


def _windows(windows: Sequence[SpeechWindow]) -> str:
    """Each window's latency, in order ("412.10 / 388.02"); one window: "—"."""
    if len(windows) < 2:
        return figure(None, ".2f")
    return " / ".join(_shown(w.total_ms, ".2f") for w in windows)
