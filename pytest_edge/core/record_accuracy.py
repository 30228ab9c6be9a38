"""A record's ``accuracy``, one type per kind of check (issue #48: a common header plus one result
type per kind): a tensor model's worst figures over its outputs, a decoder's token and logits
agreement, a speech export's error rates. Each is the report's block as it has always been written
(docs/reports.md; a figure not measured is null), read ``lenient`` as every stored block (a value
that does not fit is null; another version's keys are kept and written back after the others).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import codec


@dataclass(frozen=True)
class TensorAccuracy(codec.StoredBlock):
    """A tensor model's outputs against its golden: the backend (or, with ``reference=``, the model:
    ``reference_model``) that made the golden, its cases, and the worst figures over every output of
    every case (accuracy.compare.summarize); ``renamed``: the golden's tensor names -> the
    artifact's, where they were matched by position."""

    reference: str | None = None
    cases: int | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    cosine: float | None = None
    snr_db: float | None = None
    renamed: dict[str, dict[str, str]] | None = codec.optional()
    reference_model: str | None = codec.optional()


@dataclass(frozen=True)
class DecoderAccuracy(codec.StoredBlock):
    """A decoder against its golden over every prompt: the least token agreement, top-1 agreement
    and mean KL divergence teacher-forced, and the first step's logits at their worst."""

    reference: str | None = None
    token_agreement: float | None = None
    top1_agreement: float | None = None
    kld_mean: float | None = None
    max_abs_err: float | None = None
    cosine: float | None = None


@dataclass(frozen=True)
class SpeechAccuracy(codec.StoredBlock):
    """A speech export against the reference's transcripts: the worst word and character error
    rates, the files whose tokens all agree, and the teacher-forced figures where measured."""

    reference: str | None = None
    wer: float | None = None
    cer: float | None = None
    token_agreement: float | None = None
    top1_agreement: float | None = None
    kld_mean: float | None = None


Accuracy = TensorAccuracy | DecoderAccuracy | SpeechAccuracy


def read_accuracy(data: Any, kind: type[Accuracy]) -> Accuracy | None:
    """A record's ``accuracy`` as JSON (a stored record, a test's literal) read as ``kind``, the
    type of the record's check; a typed one as it is; None as None."""
    if data is None or isinstance(data, (TensorAccuracy, DecoderAccuracy, SpeechAccuracy)):
        return data
    return codec.from_json(kind, data if isinstance(data, Mapping) else {}, "a record's accuracy")


__all__ = ["Accuracy", "DecoderAccuracy", "SpeechAccuracy", "TensorAccuracy", "read_accuracy"]
