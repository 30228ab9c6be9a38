"""Regressions found by probing ``pytest-edge triage quant`` with float/int8 pairs built outside the
project (TensorFlow's converter, per-tensor and per-channel; onnxruntime's quantize_static): the
input quantization inside a float-I/O int8 .tflite, and the cause of flattened activation channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES

from pytest_edge.triage import quant
from pytest_edge.triage.quant_channels import ChannelLoss, activation_clue, weight_loss, why_below

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


class _Calibration:
    """onnxruntime.quantization's CalibrationDataReader protocol over a few arrays."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self._cases = iter([{"x": a} for a in arrays])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._cases, None)


def _gemm_relu_pair(folder: Path, per_channel: bool, seed: int = 3) -> tuple[Path, Path]:
    """A float Gemm+Relu → Gemm model whose first weight has one value 400x the median |w| (output
    channel 17), and its QDQ model from quantize_static: the quantizer folds each Relu into the
    Gemm before it, which then writes the Relu's tensor."""
    onnx = pytest.importorskip("onnx")
    quantization = pytest.importorskip("onnxruntime.quantization")
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = rng.uniform(-0.3, 0.3, (64, 24)).astype(np.float32)
    w1[17, 5] = 400 * np.median(np.abs(w1))
    w2 = rng.uniform(-0.3, 0.3, (10, 64)).astype(np.float32)
    inits = {"w1": w1, "b1": np.zeros(64, np.float32), "w2": w2, "b2": np.zeros(10, np.float32)}
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
         helper.make_node("Relu", ["h"], ["hr"], name="relu"),
         helper.make_node("Gemm", ["hr", "w2", "b2"], ["y"], name="fc2", transB=1)],
        "gemm_relu", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 24])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    float_path, quant_path = folder / "gemm_relu.onnx", folder / f"gemm_relu_qdq_{per_channel}.onnx"
    onnx.save(model, str(float_path))
    calibration = [rng.standard_normal((1, 24)).astype(np.float32) for _ in range(16)]
    quantization.quantize_static(str(float_path), str(quant_path), _Calibration(calibration),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=per_channel,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8)
    return float_path, quant_path


def test_onnx_gemm_fused_with_its_relu_keeps_its_weight_figures(tmp_path: Path) -> None:
    report = quant.compare_models(*_gemm_relu_pair(tmp_path, per_channel=False))
    first = report.first_below
    # the Relu's tensor is written by the Gemm in the QDQ model: the row carries the Gemm's weights
    assert first is not None and first.tensor == "hr" and first.op == "Gemm+Relu"
    w = first.weight
    assert w is not None and w.name == "w1" and w.scales == 1 and w.per_channel.below >= 60
    assert "weight scale set by one value 400x the median |w| (per-tensor scale)" in first.why
    # The Gemm's own output has no counterpart by design: said as folded, not as unmatched.
    assert report.folded_float == {"fused with the Relu after it (Gemm+Relu)": ["h"]} and "h" not in report.unmatched_float


def test_a_torch_export_with_batchnorm_names_what_the_quantizer_folded(tmp_path: Path) -> None:
    """Conv + BatchNorm + ReLU exported by torch.onnx (which folds each BatchNorm into its Conv; the
    Conv's output keeps the name ``getitem``), quantized with docs/export.md's recipe
    (quant_pre_process, quantize_static QDQ): the quantizer fuses each Conv with its Relu, so the
    Conv outputs have no counterpart. They are named as folded, not as tensors the matching missed."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript", reason="torch.onnx.export needs onnxscript (the export extra)")
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
            self.c2, self.b2 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            x = torch.relu(self.b1(self.c1(x)))
            return self.fc(torch.relu(self.b2(self.c2(x))).mean((2, 3)))

    torch.manual_seed(0)
    net = Net().eval()
    for norm in (net.b1, net.b2):
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
    float_path, pre, quant_path = tmp_path / "kws.onnx", tmp_path / "kws_pre.onnx", tmp_path / "kws_int8.onnx"
    torch.onnx.export(net, (torch.randn(1, 1, 16, 16),), str(float_path), input_names=["x"], output_names=["y"],
                      dynamo=True)
    rng = np.random.default_rng(0)
    quantization.quant_pre_process(str(float_path), str(pre))
    quantization.quantize_static(str(pre), str(quant_path),
                                 _Calibration([rng.standard_normal((1, 1, 16, 16)).astype(np.float32)
                                               for _ in range(8)]),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QInt8, weight_type=quantization.QuantType.QInt8)
    report = quant.compare_models(float_path, quant_path, cases=2)
    assert report.unmatched_float == [] and report.first_below is None
    (how, names), = report.folded_float.items()
    assert how == "fused with the Relu after it (Conv+Relu)" and len(names) == 2
    line = report.matching_line()
    assert "no counterpart" not in line and "2 folded away by the quantizer" in line


def test_a_per_channel_outlier_names_the_true_issue_not_the_weights(tmp_path: Path) -> None:
    report = quant.compare_models(*_gemm_relu_pair(tmp_path, per_channel=True))
    hr = next(row for row in report.rows if row.tensor == "hr")
    w = hr.weight
    # per-channel scales: every weight channel keeps its resolution (channel 17's outlier is its own)...
    assert w is not None and w.scales == 64 and w.per_channel.below == 0 and w.outlier_channel == 17
    assert w.channel_outlier_ratio > 300
    # ...but channel 17's output is ~100x the others' and the activation has one scale: that is named
    assert report.first_below is hr and hr.channels.below > 30
    assert "activation scale set by channel 17: its range is " in hr.why
    assert "weight scale set by one value" not in hr.why and "weights " not in hr.why


def test_a_per_channel_weight_outlier_is_named_when_its_channel_is_the_worst() -> None:
    rng = np.random.default_rng(4)
    w = rng.uniform(-0.3, 0.3, (16, 72))
    w[9, 3] = 300 * np.median(np.abs(w))
    scales = np.abs(w).max(axis=1, keepdims=True) / 127  # per output channel
    loss = weight_loss("w", w, np.round(w / scales) * scales, 0, 16, 20.0)
    assert loss.outlier_channel == 9 and loss.channel_outlier_ratio > 250 and loss.per_channel.below == 0
    on_nine, on_two = ChannelLoss(16, 1, 9, 7.0), ChannelLoss(16, 1, 2, 7.0)
    assert "weight channel 9's scale set by one value" in why_below(25.0, on_nine, loss, 20.0)
    assert "weight channel" not in why_below(25.0, on_two, loss, 20.0)  # another channel's trouble


def test_a_float_model_against_another_networks_int8_model_is_refused(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # same graph and names, other weights: int8 rounding cannot put weights below 0 dB
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    float_a, _ = _gemm_relu_pair(tmp_path / "a", per_channel=False, seed=3)
    _, quant_b = _gemm_relu_pair(tmp_path / "b", per_channel=False, seed=9)
    report = quant.compare_models(float_a, quant_b)
    # the outlier both share keeps the whole tensor's SNR up; its other channels are below 0 dB
    assert report.foreign_weights is not None and report.foreign_weights.weight.per_channel.worst_snr_db < 0
    assert report.verdict().startswith("not the same network's weights: hr (Gemm+Relu) has int8 weights at ")
    assert quant.main([str(float_a), str(quant_b)]) == 2
    captured = capsys.readouterr()
    assert "different networks or checkpoints" in captured.err and "#  tensor" in captured.out
    # its own int8 model is not
    assert quant.compare_models(*_gemm_relu_pair(tmp_path / "a", per_channel=False, seed=3)).foreign_weights is None


@pytest.mark.parametrize("pair", [pytest.param(CLEAN, marks=LITERT),
                                  (FIXTURES / "clean_mlp.onnx", FIXTURES / "clean_mlp_qdq.onnx")],
                         ids=["tflite", "onnx"])
def test_a_swapped_pair_is_refused(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert quant.main([str(pair[1]), str(pair[0])]) == 2
    err = capsys.readouterr().err
    assert f"{pair[1]} (FLOAT) has " in err and "the two are swapped (triage quant FLOAT INT8)" in err


def test_flattened_weights_are_not_blamed_on_the_activation_scale() -> None:
    # weights that round to zero leave the activation on one level too: that is not its scale's doing
    act = np.abs(np.random.default_rng(5).standard_normal((4, 32)))
    assert activation_clue(act, np.zeros_like(act), 1, weights_fine=False) is None
    assert activation_clue(act, np.zeros_like(act), 1).startswith("every value rounds to one int8 level")
    # a coarse step with errors larger than rounding to it: something else moved the values
    assert activation_clue(act, _flattened_by(act, 2.0) + 1.5, 1) is None


@pytest.mark.parametrize("pair", [pytest.param(CLEAN, marks=LITERT),
                                  (FIXTURES / "clean_mlp.onnx", FIXTURES / "clean_mlp_qdq.onnx")],
                         ids=["tflite", "onnx"])
def test_an_npz_of_stacked_inputs_is_several_cases_and_the_worst_decides(pair: tuple[Path, Path],
                                                                          tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    stack = rng.standard_normal((3, 16)).astype(np.float32)
    case = tmp_path / "three.npz"
    np.savez(case, x=stack)
    inputs, origin = quant.choose_inputs(str(case), None, pair[0])
    report = quant.compare_models(*pair, inputs, inputs_origin=origin)
    assert [i.label for i in report.inputs] == ["three.npz[0]", "three.npz[1]", "three.npz[2]"]
    alone = [quant.compare_models(*pair, {"x": stack[i:i + 1]}).inputs[0].output_snr_db for i in range(3)]
    assert [i.output_snr_db for i in report.inputs] == pytest.approx(alone)
    worst = int(np.argmin(alone))
    assert report.worst_input.label == f"three.npz[{worst}]" and report.worst_input.output_snr_db == min(alone)
    assert f"worst input: three.npz[{worst}], end-to-end output SNR " in report.inputs_line()


def test_layers_match_across_keras_model_scopes() -> None:
    # TF names a Keras model per trace: the float and int8 models converted apart differ in scope only
    from pytest_edge.backends.litert.quant_pair import GraphTensor, match_tensors

    def tensors(scope: str) -> list[GraphTensor]:
        names = ["serving_default_x:0", f"{scope}/h1_1/MatMul;{scope}/h1_1/Relu",
                 f"{scope}/h2_1/MatMul;{scope}/h2_1/Relu", "StatefulPartitionedCall_1:0"]
        return [GraphTensor(i, n, np.dtype(np.float32), (1, 8), None, "FULLY_CONNECTED") for i, n in enumerate(names)]

    pairs = match_tensors(tensors("functional_2_1"), tensors("functional_1"))
    assert [(f.index, q.index if q else None) for f, q in pairs] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # a layer of another name is still not matched
    other = tensors("functional_1")
    other[2] = GraphTensor(2, "functional_1/h9_1/MatMul;functional_1/h9_1/Relu", np.dtype(np.float32), (1, 8),
                           None, "X")
    assert match_tensors(tensors("functional_2_1"), other)[2][1] is None


def test_all_fine_is_not_said_of_a_network_mostly_unmatched() -> None:
    import dataclasses

    report = quant.compare_models(FIXTURES / "clean_mlp.onnx", FIXTURES / "clean_mlp_qdq.onnx", cases=2)
    assert report.verdict() == "every matched layer at or above 20 dB (worst input, every channel, and the weights)"
    few = dataclasses.replace(report, rows=report.rows[:2], unmatched_float=[f"t{i}" for i in range(5)])
    assert few.verdict().endswith("; but 5 of the float model's tensors found no counterpart and were not "
                                  "measured, more than the 1 layers that were")


def test_a_qoperator_model_is_refused_not_blamed_on_its_last_layer(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    quantization = pytest.importorskip("onnxruntime.quantization")
    float_path, _ = _gemm_relu_pair(tmp_path, per_channel=False)
    qop = tmp_path / "gemm_relu_qop.onnx"
    calibration = [np.random.default_rng(7).standard_normal((1, 24)).astype(np.float32) for _ in range(4)]
    quantization.quantize_static(str(float_path), str(qop), _Calibration(calibration),
                                 quant_format=quantization.QuantFormat.QOperator)
    assert quant.main([str(float_path), str(qop)]) == 2
    err = capsys.readouterr().err
    assert f"{qop} is not a QDQ model: it computes with " in err and "quant_format=QuantFormat.QDQ" in err


def test_shape_arithmetic_is_not_a_layer() -> None:
    # A Keras Flatten converts to SHAPE → STRIDED_SLICE → PACK → RESHAPE: int32 tensors without a
    # scale, exact in both models; they are left out of the table (TF-made pairs only: no fixture has one)
    from pytest_edge.backends.litert.quant_pair import _shape_arithmetic
    from pytest_edge.backends.quant_pair import QuantParams
    from pytest_edge.backends.litert.quant_pair import GraphTensor

    shape = GraphTensor(3, "flat/Shape", np.dtype(np.int32), (4,), None, "SHAPE")
    int8 = GraphTensor(4, "flat/Reshape", np.dtype(np.int8), (1, 576),
                       QuantParams(np.array([0.1]), np.array([0]), 0), "RESHAPE")
    token_ids = GraphTensor(0, "ids", np.dtype(np.int32), (1, 8), None, "(input)")
    assert _shape_arithmetic(shape) and not _shape_arithmetic(int8) and not _shape_arithmetic(token_ids)


@LITERT
@pytest.mark.parametrize("bad, message", [
    ("strings", "input 'x' is <U1, not numbers"),
    ("nan", "input 'x' has NaN or Inf values"),
    ("truncated", "is not a readable .npz of inputs"),
])
def test_bad_inputs_files_are_named_not_crashed_on(bad: str, message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    case = tmp_path / f"{bad}.npz"
    if bad == "strings":
        np.savez(case, x=np.array([["a"] * 16]))
    elif bad == "nan":  # NaN figures are neither below nor above the threshold: all would look fine
        np.savez(case, x=np.full((1, 16), np.nan, np.float32))
    else:
        np.savez(case, x=np.zeros((1, 16), np.float32))
        case.write_bytes(case.read_bytes()[:100])
    assert quant.main([*map(str, CLEAN), "--inputs", str(case)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pytest-edge triage quant: error: ") and str(case) in err and message in err


@LITERT
def test_a_threshold_that_is_not_a_number_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert quant.main([*map(str, CLEAN), "--min-snr-db", "nan"]) == 2
    assert "--min-snr-db must be a finite number of dB, got nan" in capsys.readouterr().err


def test_a_network_rebuilt_under_new_names_is_matched_in_graph_order() -> None:
    # Keras names the layers of a rebuilt model anew (dense_1 → dense_4) and its input too: no name
    # but the output's matches; the rest pair in graph order by op and shape, all or nothing
    from pytest_edge.backends.litert.quant_pair import GraphTensor, match_in_order

    def t(index: int, name: str, op: str, shape: tuple[int, ...]) -> GraphTensor:
        return GraphTensor(index, name, np.dtype(np.float32), shape, None, op)

    floats = [t(0, "x", "(input)", (1, 24)), t(1, "d1", "FULLY_CONNECTED", (1, 48)),
              t(2, "d2", "FULLY_CONNECTED", (1, 96))]
    free = [t(0, "x_4", "(input)", (1, 24)), t(5, "d4", "FULLY_CONNECTED", (1, 48)),
            t(6, "d5", "FULLY_CONNECTED", (1, 96)), t(7, "out:01", "FULLY_CONNECTED", (1, 5))]
    assert {f: q.name for f, q in match_in_order(floats, free).items()} == {0: "x_4", 1: "d4", 2: "d5"}
    # another layer width: not a renaming of this network
    assert match_in_order(floats, [*free[:2], t(6, "d5", "FULLY_CONNECTED", (1, 64))]) == {}
    from pytest_edge.triage.quant_channels import number
    assert number(-0.02) == "0" and number(-0.2) == "-0.2"


def test_onnx_channels_of_a_sequence_matmul_are_its_last_axis(tmp_path: Path) -> None:
    """[batch, seq, hidden] below a MatMul: the 64 hidden units are the channels (axis 1 would pool
    them and judge the 6 sequence positions instead); below the Relu after it too."""
    onnx = pytest.importorskip("onnx")
    quantization = pytest.importorskip("onnxruntime.quantization")
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(5)
    w = rng.uniform(-0.3, 0.3, (24, 64)).astype(np.float32)
    w[5, 17] = 400 * np.median(np.abs(w))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
         helper.make_node("Relu", ["h"], ["hr"], name="relu")],
        "seq_matmul", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 6, 24])],
        [helper.make_tensor_value_info("hr", onnx.TensorProto.FLOAT, [1, 6, 64])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    float_path, quant_path = tmp_path / "seq.onnx", tmp_path / "seq_qdq.onnx"
    onnx.save(model, str(float_path))
    calibration = [rng.standard_normal((1, 6, 24)).astype(np.float32) for _ in range(16)]
    quantization.quantize_static(str(float_path), str(quant_path), _Calibration(calibration),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=False,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8)
    report = quant.compare_models(float_path, quant_path)
    rows = {row.tensor: row for row in report.rows}
    matmul = next(row for row in report.rows if row.op.startswith("MatMul"))
    assert matmul.channels.channels == 64 and matmul.channels.below > 40
    assert rows["hr"].channels.channels == 64
    assert report.first_below is not None and report.first_below.channels.channels == 64
