"""Regressions found by probing ``pytest-edge triage quant`` with float/int8 pairs built outside the
project (TensorFlow's converter, per-tensor and per-channel; onnxruntime's quantize_static): the
input quantization inside a float-I/O int8 .tflite, and the cause of flattened activation channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES

from pytest_edge.triage import quant
from pytest_edge.triage.quant_channels import ChannelLoss, activation_clue, why_below

LITERT = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("ai_edge_litert"),
                            reason="needs ai-edge-litert")
CLEAN = (FIXTURES / "clean_mlp.tflite", FIXTURES / "clean_mlp_int8.tflite")


@LITERT
def test_float_input_of_an_int8_tflite_is_compared_as_its_layers_read_it() -> None:
    # clean_mlp_int8.tflite takes float inputs and quantizes them inside (tfl.quantize): the input row
    # measures that QUANTIZE, as the ONNX QDQ input row does, not the float tensor against itself.
    report = quant.compare_models(*CLEAN, cases=2)
    first = report.rows[0]
    assert first.op == "(input)" and first.quant_dtype == "int8" and first.quant_tensor == "tfl.quantize"
    assert 25 < first.snr_db < 60 and first.max_abs_diff > 0
    assert "tfl.quantize" not in report.unmatched_quant


@LITERT
def test_inputs_the_input_scale_cannot_resolve_name_the_input_and_why(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Inputs 1000x smaller than the calibration data: every value rounds to the input's zero point.
    # The first layer below is the input's quantization, not the first FULLY_CONNECTED after it.
    case = tmp_path / "tiny.npz"
    np.savez(case, x=np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32) * 1e-3)
    assert quant.main([*map(str, CLEAN), "--inputs", str(case)]) == 0
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert verdict.startswith("first layer below 20 dB: x ((input)): ") or verdict.startswith(
        "first layer below 20 dB: serving_default_x:0 ((input)): "), verdict
    assert "every value rounds to one int8 level" in verdict


def _flattened_by(tensor: np.ndarray, scale: float) -> np.ndarray:
    return np.clip(np.round(tensor / scale), -128, 127) * scale


def test_activation_clue_names_the_channel_whose_range_sets_the_scale() -> None:
    rng = np.random.default_rng(1)
    act = rng.standard_normal((8, 6, 6, 16))
    act[..., 9] *= 300  # one channel's range sets a per-tensor scale
    deq = _flattened_by(act, np.abs(act).max() / 127)
    clue = activation_clue(act, deq, 3)
    assert clue is not None and clue.startswith("activation scale set by channel 9: its range is ")
    # the same tensor without the outlier channel, quantized with its own scale: no clue
    act[..., 9] /= 300
    assert activation_clue(act, _flattened_by(act, np.abs(act).max() / 127), 3) is None


def test_activation_clue_names_a_scale_wider_than_the_values() -> None:
    act = np.random.default_rng(2).standard_normal((8, 32))
    clue = activation_clue(act, _flattened_by(act, 2.0), 1)  # values up to ~3 with a step of 2
    assert clue is not None and clue.startswith("int8 step 2 is coarse for values up to ")


def test_the_clue_is_a_cause_only_when_the_activation_is_below() -> None:
    fine = ChannelLoss(16, 0, 0, 35.0)
    assert why_below(35.0, fine, None, 20.0, "activation scale set by channel 9: ...") is None
    flat = ChannelLoss(16, 14, 3, 5.0)
    assert why_below(30.0, flat, None, 20.0, "activation scale set by channel 9: x").endswith(
        "; activation scale set by channel 9: x")
