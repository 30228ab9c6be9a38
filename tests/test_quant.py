"""Per-layer quantization loss, float vs int8 .tflite (quant.py), on real LiteRT."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_edge.errors import EdgeError
from pytest_edge.accuracy.metrics import cosine, snr_db
from pytest_edge.backends.litert import quant_pair as litert_pair
from pytest_edge.backends.litert.quant_pair import quant_params
from pytest_edge.backends.quant_pair import QuantParams, dequantize, quantize
from pytest_edge.triage import quant

# quant.py falls back to tflite-runtime too, but its 2.14 kernels are not what these numbers were checked on,
# and it has no flatbuffer verifier: the truncated-file case crashes the process (docs/design.md, "Known limits").
pytest.importorskip("ai_edge_litert.interpreter")

PROBE, PROBE_INT8 = FIXTURES / "quant_probe.tflite", FIXTURES / "quant_probe_int8.tflite"
CNN, CNN_INT8 = FIXTURES / "tiny_cnn.tflite", FIXTURES / "tiny_cnn_int8.tflite"
CNN_CASE = next((FIXTURES.parent / "golden/tiny_cnn_int8").glob("case_*.npz"), None)


# ---------------------------------------------------------------- real models


def test_badly_quantized_layer_is_named_first() -> None:
    report = quant.compare_models(PROBE, PROBE_INT8)
    names = [row.tensor for row in report.rows]
    assert names == ["x", "stem/MatMul;stem/Relu;stem/add", "outlier/MatMul;outlier/Relu;outlier/add", "Identity"]
    assert report.unmatched_float == [] and report.unmatched_quant == []
    first = report.first_below
    assert first is not None and first.tensor.startswith("outlier/") and first.op == "FULLY_CONNECTED"
    assert first.snr_db < 10 and first.quant_dtype == "int8"
    # everything before it is fine: the input (int8 I/O, quantized by quant.py) and the stem
    # (on the worst of the 8 random inputs)
    assert all(row.snr_db > 25 and row.cosine > 0.999 and not row.below for row in report.rows[:2])
    table = report.format_table().splitlines()
    marked = [line for line in table if line.endswith("<")]
    assert "outlier/" in marked[0] and len(marked) == 2  # the outlier layer, then the head it feeds
    assert report.verdict().startswith("first layer below 20 dB: outlier/MatMul;outlier/Relu;outlier/add "
                                       "(FULLY_CONNECTED): 27 of 32 channels below 20 dB")


def test_threshold_moves_the_verdict() -> None:
    report = quant.compare_models(PROBE, PROBE_INT8, min_snr_db=-20)
    assert report.first_below is None and report.verdict().startswith("every matched layer at or above -20 dB")


@pytest.mark.parametrize("model", [PROBE, CNN])
def test_float_against_itself_is_lossless(model: Path) -> None:
    report = quant.compare_models(model, model)
    assert report.matched >= 4 and not report.unmatched_float and not report.unmatched_quant
    assert all(row.snr_db == math.inf and row.cosine == pytest.approx(1.0, abs=1e-12) and row.max_abs_diff == 0.0
               for row in report.rows)
    assert report.first_below is None


def test_tiny_cnn_int8_float_io_matches_every_layer() -> None:
    report = quant.compare_models(CNN, CNN_INT8)
    ops = [row.op for row in report.rows]
    assert ops == ["(input)", "TRANSPOSE", "CONV_2D", "CONV_2D", "MEAN", "FULLY_CONNECTED", "CUMSUM"]
    assert report.unmatched_float == []
    # float I/O: the int8 model quantizes and dequantizes inside; the input row is its QUANTIZE (what
    # the int8 layers read), the output's int8 tensor before the DEQUANTIZE has no float counterpart
    assert report.unmatched_quant == ["tfl.dequantize"]
    assert [row.quant_dtype for row in report.rows[:6]] == ["int8"] * 6
    assert all(25 < row.snr_db < 60 for row in report.rows[1:]), report.format_table()
    assert "matched 7 of 7 float tensors" in report.matching_line()


def test_inputs_are_those_given_not_random() -> None:
    case = quant.random_inputs(PROBE, seed=7)
    given_case = quant.compare_models(PROBE, PROBE_INT8, inputs=case)
    assert given_case.rows == quant.compare_models(PROBE, PROBE_INT8, seed=7, cases=1).rows
    assert given_case.rows != quant.compare_models(PROBE, PROBE_INT8, seed=8, cases=1).rows
    assert [i.label for i in quant.compare_models(PROBE, PROBE_INT8, seed=7, cases=3).inputs] == \
        ["seed 7", "seed 8", "seed 9"]


# ---------------------------------------------------------------- bad input


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.tflite"
    with pytest.raises(EdgeError, match=f"{missing}: no such"):
        quant.compare_models(PROBE, missing)


@pytest.mark.parametrize("make", [lambda: (FIXTURES / "tiny_cnn.onnx").read_bytes(),
                                  lambda: PROBE.read_bytes()[:3000]], ids=["onnx", "truncated"])
def test_not_a_tflite_is_named(tmp_path: Path, make) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(make())
    with pytest.raises(EdgeError, match=str(bad)):
        quant.compare_models(bad, PROBE_INT8)


def test_two_different_networks_are_refused_naming_both() -> None:
    # same input "x" [1, 16], nothing else in common
    with pytest.raises(EdgeError, match="share no layer") as info:
        quant.compare_models(FIXTURES / "tiny_mlp.tflite", PROBE_INT8)
    assert "tiny_mlp.tflite" in str(info.value) and "quant_probe_int8.tflite" in str(info.value)
    with pytest.raises(EdgeError, match=r"tiny_mlp\.tflite has shape \[1, 16\].*tiny_cnn\.tflite"):
        quant.compare_models(CNN, FIXTURES / "tiny_mlp.tflite")
    with pytest.raises(EdgeError, match=r"quant_probe\.tflite has shape \[1, 16\]; tiny_cnn's case gives \[1, 3"):
        quant.compare_models(PROBE, PROBE_INT8, inputs=quant.random_inputs(CNN), inputs_origin="tiny_cnn's case")


# ---------------------------------------------------------------- the command


def test_main_prints_table_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert quant.main([str(PROBE), str(PROBE_INT8)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split()[:8] == ["#", "tensor", "op", "dtype", "SNR", "dB", "input", "cosine"]
    assert sum("FULLY_CONNECTED" in line for line in out[4:-3]) == 3  # the table's rows
    assert out[-3].startswith("inputs: 8 (random from the signature of ")
    assert out[-2] == "matched 4 of 4 float tensors by name"
    assert out[-1].startswith("first layer below 20 dB: outlier/MatMul;outlier/Relu;outlier/add (FULLY_CONNECTED)")
    assert quant.main([str(PROBE), str(PROBE_INT8), "--min-snr-db", "-30"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("every matched layer at or above -30 dB")


@pytest.mark.skipif(CNN_CASE is None, reason="no golden case for tiny_cnn_int8")
def test_main_reads_a_golden_case_as_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert quant.main([str(CNN), str(CNN_INT8), "--inputs", str(CNN_CASE)]) == 0
    assert "CUMSUM" in capsys.readouterr().out
    assert quant.main([str(CNN), str(CNN_INT8), "--inputs", str(FIXTURES / "tiny_cnn.tflite")]) == 2
    assert "tiny_cnn.tflite is not a readable .npz" in capsys.readouterr().err


def test_main_reports_bad_file_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert quant.main([str(PROBE), str(tmp_path / "gone.tflite")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "gone.tflite: no such .tflite file" in captured.err


# ---------------------------------------------------------------- matching by name


def _t(index: int, name: str, shape: tuple[int, ...] = (1, 4)) -> litert_pair.GraphTensor:
    return litert_pair.GraphTensor(index, name, np.dtype(np.float32), shape, None, "OP")


def test_names_match_exactly_then_by_fused_parts() -> None:
    floats = [_t(0, "x"), _t(1, "Relu;add;MatMul"), _t(2, "conv:0"), _t(3, "y", (1, 2)), _t(4, "only_float")]
    quants = [_t(10, "x"), _t(11, "MatMul;Relu;add"), _t(12, "conv_requantized"), _t(13, "y", (1, 3)),
              _t(14, "tfl.quantize")]
    pairs = {f.name: (q.index if q else None) for f, q in litert_pair.match_tensors(floats, quants)}
    assert pairs == {"x": 10, "Relu;add;MatMul": 11, "conv:0": 12, "y": None, "only_float": None}


def test_ambiguous_normalised_names_stay_unmatched() -> None:
    floats = [_t(0, "a;b")]
    quants = [_t(10, "b;a"), _t(11, "a_int8;b")]
    assert litert_pair.match_tensors(floats, quants)[0][1] is None


# ---------------------------------------------------------------- the numbers

finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)
arrays = hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6), elements=finite)


@given(arrays)
@example(np.array([1.64822184e-161]))  # found in CI: its square underflowed, the cosine read 0.99973
def test_snr_of_identical_tensors_is_infinite(x: np.ndarray) -> None:
    assert snr_db(x, x.copy()) == math.inf
    assert cosine(x, x) == pytest.approx(1.0) or not np.any(x)


@given(arrays.filter(lambda a: np.sum(a ** 2) > 1e-6), st.integers(0, 2 ** 32 - 1),
       st.floats(1e-3, 10), st.floats(1.01, 100))
def test_snr_falls_as_noise_grows(x: np.ndarray, seed: int, small: float, factor: float) -> None:
    noise = np.random.default_rng(seed).standard_normal(x.shape) + 1.0  # never all zeros
    quiet, loud = snr_db(x, x + small * noise), snr_db(x, x + small * factor * noise)
    assert loud < quiet
    assert quiet - loud == pytest.approx(20 * math.log10(factor), abs=1e-6)  # noise power grows as factor²


@given(arrays.filter(lambda a: np.linalg.norm(a) > 1e-6), st.floats(1e-3, 1e3))
def test_cosine_ignores_positive_scale_and_flips_with_sign(x: np.ndarray, c: float) -> None:
    assert cosine(x, c * x) == pytest.approx(1.0)
    assert cosine(x, -c * x) == pytest.approx(-1.0)


@settings(max_examples=200)
@given(st.sampled_from([np.int8, np.uint8, np.int16]), st.floats(1e-4, 10), st.data())
def test_dequantize_of_quantize_is_within_half_a_step(dtype, scale: float, data: st.DataObject) -> None:
    info = np.iinfo(dtype)
    zero_point = data.draw(st.integers(int(info.min), int(info.max)))
    params = QuantParams(np.array([scale]), np.array([zero_point]))
    low, high = (info.min - zero_point) * scale, (info.max - zero_point) * scale  # representable range
    x = data.draw(hnp.arrays(np.float64, (7,), elements=st.floats(low, high, allow_nan=False)))
    q = quantize(x, params, dtype)
    assert q.dtype == np.dtype(dtype)
    assert np.all(np.abs(dequantize(q, params) - x) <= scale / 2 * (1 + 1e-9))


@given(st.integers(0, 2), st.integers(1, 4), st.data())
def test_per_axis_dequantize_uses_each_channels_scale(axis: int, channels: int, data: st.DataObject) -> None:
    shape = [2, 3, 2]
    shape[axis] = channels
    scales = np.array(data.draw(st.lists(st.floats(1e-3, 5), min_size=channels, max_size=channels)))
    zero_points = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=channels, max_size=channels)))
    q = data.draw(hnp.arrays(np.int8, tuple(shape)))
    real = dequantize(q, QuantParams(scales, zero_points, axis))
    for c in range(channels):
        channel = np.take(q, c, axis=axis).astype(np.float64)
        assert np.allclose(np.take(real, c, axis=axis), (channel - zero_points[c]) * scales[c])
    assert np.array_equal(quantize(real, QuantParams(scales, zero_points, axis)), q)


def test_quant_params_from_litert_details() -> None:
    assert quant_params({"quantization_parameters": {"scales": np.array([], np.float32)}}) is None
    params = quant_params({"quantization_parameters": {
        "scales": np.array([0.5, 0.25], np.float32), "zero_points": np.array([0, 1], np.int32),
        "quantized_dimension": 1}})
    assert params is not None and params.axis == 1
    assert dequantize(np.array([[2, 5]], np.int8), params).tolist() == [[1.0, 1.0]]


def test_a_format_without_a_quantization_pair_is_refused_by_name(tmp_path: Path) -> None:
    """An OpenVINO .xml (no backend names a pair for it) is not tried as a .tflite."""
    from pytest_edge.errors import EdgeUsageError
    from pytest_edge.triage.quant import compare_models

    for name in ("a.xml", "b.xml"):
        (tmp_path / name).write_text("<net/>")
    with pytest.raises(EdgeUsageError, match=r"a\.xml: triage quant compares a float and a quantized model of "
                                             r".*, not \.xml"):
        compare_models(tmp_path / "a.xml", tmp_path / "b.xml")


def test_a_matched_pair_not_comparable_on_every_input_is_said_apart_from_the_unmatched() -> None:
    """A tensor matched with its counterpart whose values could not be compared on every input is
    neither a row nor "no counterpart": the matching line says which it is."""
    from pytest_edge.triage.quant_report import QuantReport

    report = QuantReport(Path("f.tflite"), Path("q.tflite"), [], unmatched_float=["a"], incomparable=["b", "c"])
    line = report.matching_line()
    assert line.startswith("matched 0 of 3 float tensors by name; no counterpart for 1: a; ")
    assert "2 matched but not comparable on every input (a value missing, or of another shape on one side): b, c" in line
