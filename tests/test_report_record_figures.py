"""report/record_figures.py: the figures the reports over time read from a typed Record and no
budget row keeps, each None where the record's kind does not measure it."""

from __future__ import annotations

import pytest

from pytest_edge.core.record import ModelIdentity, Record
from pytest_edge.core.record_accuracy import DecoderAccuracy, SpeechAccuracy, TensorAccuracy
from pytest_edge.measurement.counts import CountedMeasurement
from pytest_edge.report import record_figures


def record(**fields: object) -> Record:
    return Record("tests/test_m.py::test_m[m-b]", ModelIdentity("m"), "b", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("accuracy", "expected"), [
    (TensorAccuracy(max_abs_err=1e-6, cosine=0.999, snr_db=80.0),
     {"max_abs_err": 1e-6, "cosine": 0.999, "snr_db": 80.0, "token_agreement": None}),
    (DecoderAccuracy(token_agreement=0.75, max_abs_err=0.5, cosine=0.98),
     {"max_abs_err": 0.5, "cosine": 0.98, "snr_db": None, "token_agreement": 0.75}),
    (SpeechAccuracy(wer=0.1, token_agreement=0.5),
     {"max_abs_err": None, "cosine": None, "snr_db": None, "token_agreement": 0.5}),
    (None, {"max_abs_err": None, "cosine": None, "snr_db": None, "token_agreement": None}),
])
def test_each_accuracy_figure_is_read_where_the_kind_has_it(accuracy: object, expected: dict[str, float | None]) -> None:
    found = record(accuracy=accuracy)
    assert {name: getattr(record_figures, name)(found) for name in expected} == expected


def test_instructions_are_counted_modes_only() -> None:
    assert record_figures.instructions(record(counted=CountedMeasurement(instructions=46_200.5))) == 46_200.5
    assert record_figures.instructions(record()) is None
