"""triage quant per channel, per weight and over inputs (quant_channels.py, quant_layers.py,
backends/onnxruntime/quant_pair.py, quant_inputs.py): the outlier pairs of fixtures/make_quant_pairs.py on real LiteRT and
ONNX Runtime, and the numbers with hypothesis."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES, ROOT
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_edge.errors import EdgeError
from pytest_edge.accuracy.metrics import snr_db
from pytest_edge.triage import quant
from pytest_edge.triage.quant_channels import ChannelLoss, channel_loss, channel_snrs, weight_loss, why_below

# The LiteRT figures are ai-edge-litert's (tflite-runtime 2.14's reference kernels round a few values apart).
LITERT = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("ai_edge_litert"),
                            reason="needs ai-edge-litert")

OUTLIER = (FIXTURES / "outlier_mlp.tflite", FIXTURES / "outlier_mlp_int8.tflite")
CLEAN = (FIXTURES / "clean_mlp.tflite", FIXTURES / "clean_mlp_int8.tflite")
OUTLIER_ONNX = (FIXTURES / "outlier_mlp.onnx", FIXTURES / "outlier_mlp_qdq.onnx")
CLEAN_ONNX = (FIXTURES / "clean_mlp.onnx", FIXTURES / "clean_mlp_qdq.onnx")
OUTLIER_PTE = (FIXTURES / "outlier_mlp.pte", FIXTURES / "outlier_mlp_int8.pte")
CLEAN_PTE = (FIXTURES / "clean_mlp.pte", FIXTURES / "clean_mlp_int8.pte")
# ExecuTorch's ETDump re-runs take seconds each (8 inputs, 2 programs): slow, and only where it is installed.
PTE = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("executorch"), reason="needs executorch")


@pytest.mark.parametrize("pair, layer", [
    pytest.param(OUTLIER, "mid/MatMul;mid/Relu;mid/add", marks=LITERT), (OUTLIER_ONNX, "mid/matmul"),
    pytest.param(OUTLIER_PTE, "v19 (instruction 4)", marks=[pytest.mark.slow, PTE])], ids=["tflite", "onnx", "pte"])
def test_flattened_layer_is_named_first_with_channel_and_weight_figures(pair: tuple[Path, Path], layer: str) -> None:
    report = quant.compare_models(*pair)
    first = report.first_below
    assert first is not None and first.tensor == layer
    assert all(not row.below for row in report.rows[:report.rows.index(first)])  # input and stem are fine
    # most of its 64 output channels are lost (a few faint ones are not counted)...
    assert first.channels.below >= 50 and first.channels.share_below > 0.85 and first.channels.worst_snr_db < 5
    # ...because 63 of 64 weight channels are flattened by one per-tensor scale, set by one value
    w = first.weight
    assert w is not None and w.scales == 1 and w.per_channel.below == 63 and w.per_channel.channels == 64
    assert w.per_channel.worst_snr_db < 6 and 200 < w.outlier_ratio < 400
    assert "63 of 64 weight channels below 20 dB" in first.why
    assert "weight scale set by one value 307x the median |w| (per-tensor scale)" in first.why
    verdict = report.verdict()
    assert verdict.startswith(f"first layer below 20 dB: {layer} (") and "channels below 20 dB" in verdict
    # the worst input decides: the output is destroyed on one input and fine on another
    worst = report.worst_input
    assert worst is not None and worst.output_snr_db < 10
    assert max(i.output_snr_db for i in report.inputs) > 20
    assert f"worst input: {worst.label}, end-to-end output SNR " in report.inputs_line()
    assert first.snr_db < 10 and report.inputs[first.worst_input].label.startswith("seed ")


@LITERT
def test_one_input_and_one_tensor_snr_would_hide_it() -> None:
    # What the table said before: seed 0 alone, one SNR per tensor; the layer still looks fine there.
    report = quant.compare_models(*OUTLIER, cases=1)
    mid = next(row for row in report.rows if row.tensor.startswith("mid/"))
    assert mid.snr_db > 20 and mid.below and mid.channels.below >= 30
    # one value per channel is too few to decide on: the weights decide
    assert not mid.channels.decides and mid.why.startswith("weights 19.9 dB, 63 of 64 weight channels below 20 dB")
    assert report.first_below is mid


@pytest.mark.parametrize("pair", [pytest.param(CLEAN, marks=LITERT), CLEAN_ONNX,
                                  pytest.param(CLEAN_PTE, marks=[pytest.mark.slow, PTE])],
                         ids=["tflite", "onnx", "pte"])
def test_pair_whose_layers_are_all_fine_says_so(pair: tuple[Path, Path]) -> None:
    report = quant.compare_models(*pair)
    assert report.first_below is None and report.matched >= 4
    assert report.verdict() == "every matched layer at or above 20 dB (worst input, every channel, and the weights)"
    weighted = [row for row in report.rows if row.weight is not None]
    assert len(weighted) == 3 and all(row.weight.per_channel.below == 0 for row in weighted)
    assert report.worst_input is not None and report.worst_input.output_snr_db > 20


@LITERT
def test_golden_inputs_are_used_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    cnn, cnn_int8 = FIXTURES / "tiny_cnn.tflite", FIXTURES / "tiny_cnn_int8.tflite"
    case = next((ROOT / "golden/tiny_cnn").glob("case_*.npz")).name
    # the float model's golden folder (what a test with reference="tiny_cnn" reads), found by default
    assert quant.main([str(cnn), str(cnn_int8), "--golden-dir", str(ROOT / "golden")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith(f"inputs: 1 (golden inputs of {ROOT / 'golden/tiny_cnn'} (the float model's golden)); "
                              f"worst input: {case}, end-to-end output SNR ")
    # or named on the command line
    assert quant.main([str(cnn), str(cnn_int8), "--inputs", str(ROOT / "golden/tiny_cnn")]) == 0
    assert f"worst input: {case}" in capsys.readouterr().out
    # without a golden: random cases, said so
    assert quant.main([str(cnn), str(cnn_int8), "--golden-dir", str(FIXTURES), "--cases", "2"]) == 0
    assert "inputs: 2 (random from the signature of " in capsys.readouterr().out


@LITERT
def test_a_folder_that_is_not_a_golden_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert quant.main([*map(str, CLEAN), "--inputs", str(tmp_path)]) == 2
    assert f"{tmp_path}: not a usable golden folder" in capsys.readouterr().err


@PTE
def test_delegated_pte_and_mixed_pairs_are_refused_with_the_reason() -> None:
    with pytest.raises(EdgeError, match=r"tiny_mlp\.pte is delegated \(XNNPACK partition at instruction 0.*"
                                        r"ETDump logs a partition's outputs per delegate call, not per layer"):
        quant.compare_models(FIXTURES / "tiny_mlp.pte", FIXTURES / "tiny_mlp.pte", cases=1)
    with pytest.raises(EdgeError, match="not the same format"):
        quant.compare_models(OUTLIER[0], OUTLIER_ONNX[1])


def test_onnx_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(EdgeError, match=f"{tmp_path / 'nope.onnx'}: no such .onnx file"):
        quant.compare_models(OUTLIER_ONNX[0], tmp_path / "nope.onnx")


# ---------------------------------------------------------------- the numbers

finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)
tensors = hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), elements=finite)


@given(tensors, st.integers(0, 2 ** 32 - 1), st.floats(1e-4, 10), st.data())
@settings(suppress_health_check=[HealthCheck.filter_too_much])
def test_worst_channel_is_no_better_than_the_tensor(ref: np.ndarray, seed: int, noise: float,
                                                     data: st.DataObject) -> None:
    axis = data.draw(st.integers(0, ref.ndim - 1))
    test = ref + noise * np.random.default_rng(seed).standard_normal(ref.shape)
    snrs = channel_snrs(ref, test, axis)
    assert snrs.shape == (ref.shape[axis],) and not np.isnan(snrs).any()
    loss = channel_loss(ref, test, axis, 20.0)
    assert 0.0 <= loss.share_below <= 1.0 and loss.below <= loss.channels == ref.shape[axis]
    assert 0 <= loss.faint <= loss.channels and loss.values * ref.shape[axis] == ref.size
    assume(loss.faint == 0)  # each against its own signal: the tensor's SNR is a mean of theirs, weighted by energy
    assert loss.worst_snr_db <= snr_db(ref, test) + 1e-9


@given(st.integers(8, 64), st.integers(2, 16), st.floats(300, 1000), st.integers(0, 2 ** 32 - 1))
def test_one_outlier_with_a_per_tensor_scale_flattens_the_other_channels(out: int, inputs: int, ratio: float,
                                                                        seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 1.0, (out, inputs)) * rng.choice([-1, 1], (out, inputs))
    w[0, 0] = ratio
    scale = np.abs(w).max() / 127
    dequantized = np.round(w / scale) * scale  # per-tensor int8, as a converter does it
    loss = weight_loss("w", w, dequantized, 0, 1, 20.0)
    assert loss.outlier_ratio == pytest.approx(ratio / np.median(np.abs(w)))
    assert loss.per_channel.below == out - 1  # every channel but the outlier's rounds to 0: 0 dB
    assert loss.per_channel.worst_snr_db == pytest.approx(0.0)
    why = why_below(math.inf, ChannelLoss(out, 0, 0, math.inf), loss, 20.0)
    assert why is not None and f"{out - 1} of {out} weight channels below 20 dB" in why
    assert "weight scale set by one value" in why
    assert why_below(math.inf, ChannelLoss(out, 0, 0, math.inf), weight_loss("w", w, w, 0, 1, 20.0), 20.0) is None


@given(st.integers(3, 12), st.floats(1e-3, 0.2), st.integers(0, 2 ** 32 - 1))
def test_a_faint_channel_is_judged_by_its_noise_against_the_median_channel(channels: int, share: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ref = rng.uniform(1.0, 2.0, (16, channels))
    ref[:, 0] *= share  # faint: far under the median channel's RMS
    small = ref + 1e-4 * rng.standard_normal(ref.shape)  # noise tiny next to the layer's signal
    assert channel_loss(ref, small, 1, 20.0).below == 0 and channel_loss(ref, small, 1, 20.0).faint >= 1
    loud = ref.copy()
    loud[:, 0] += 1.0  # the faint channel's noise is as large as a typical channel: still caught
    assert channel_loss(ref, loud, 1, 20.0).below == 1 and channel_loss(ref, loud, 1, 20.0).worst_channel == 0


def test_truncated_onnx_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "qdq.onnx"
    bad.write_bytes(OUTLIER_ONNX[1].read_bytes()[:2000])
    assert quant.main([str(OUTLIER_ONNX[0]), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"{bad} is not a readable ONNX model" in captured.err
