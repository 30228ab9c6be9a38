"""The figures of a typed :class:`~pytest_edge.core.record.Record` that the reports over time read
(OpenMetrics, the run history's table, trend charts and creep alert) and no budget row keeps: a
budgeted figure is read by its row's :attr:`pytest_edge.checks.Kept.readers`. Each is None where the
record did not measure it."""

from __future__ import annotations

from ..core.record import Record
from ..core.record_accuracy import DecoderAccuracy, SpeechAccuracy, TensorAccuracy


def instructions(record: Record) -> float | None:
    """Instructions per inference (counted mode's)."""
    return record.counted.instructions if record.counted is not None else None


def max_abs_err(record: Record) -> float | None:
    accuracy = record.accuracy
    return accuracy.max_abs_err if isinstance(accuracy, (TensorAccuracy, DecoderAccuracy)) else None


def cosine(record: Record) -> float | None:
    accuracy = record.accuracy
    return accuracy.cosine if isinstance(accuracy, (TensorAccuracy, DecoderAccuracy)) else None


def snr_db(record: Record) -> float | None:
    return record.accuracy.snr_db if isinstance(record.accuracy, TensorAccuracy) else None


def token_agreement(record: Record) -> float | None:
    accuracy = record.accuracy
    return accuracy.token_agreement if isinstance(accuracy, (DecoderAccuracy, SpeechAccuracy)) else None
