"""rknn-toolkit2's per-layer accuracy analysis file as pytest-edge reads it (backends/rknn/analysis.py)
and as triage tells it (triage/layers.py), without the toolkit: fixtures/rknn/error_analysis_rk3588.txt
is the file rknn-toolkit2 2.5.0's ``accuracy_analysis(target=None)`` wrote for an rk3588 int8 build of
a first version of fixtures/rknn/outlier_cnn.onnx (its layers then named stem, wide, head); the live
analysis of the committed model is tests/test_rknn_int8.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from edge_helpers import FIXTURES

from pytest_edge import codec
from pytest_edge.backends.rknn.analysis import AnalysisUnreadable, parse_analysis, read_analysis
from pytest_edge.triage.layers import LayerFigure, first_jump, worst_layers

REAL = FIXTURES / "rknn" / "error_analysis_rk3588.txt"


def test_the_toolkit_s_file_is_read_layer_by_layer() -> None:
    rows = read_analysis_file(REAL)
    assert [row.name for row in rows][:3] == ["x", "x_int8", "/stem/Conv_output_0"]
    assert len(rows) == 11
    fused = next(row for row in rows if row.name == "/stem/Conv_output_0")  # Conv fused with its Relu: no figures
    assert (fused.op, fused.cosine, fused.entire_cosine) == ("Conv", None, None)
    head = next(row for row in rows if row.name == "/head/Conv_output_0")
    assert (head.op, head.entire_cosine, head.entire_euclidean, head.cosine, head.euclidean) == \
        ("Conv", 0.97413, 1.77669, 0.97480, 1.75624)


def read_analysis_file(path: Path):
    return parse_analysis(path.read_text(), path)


def test_the_worst_layer_and_the_first_jump() -> None:
    layers = codec.from_json(list[LayerFigure], codec.to_json(read_analysis_file(REAL)), "x")
    worst = worst_layers(layers)
    assert [layer.name for layer in worst] == ["/head/Conv_output_0", "/Relu_1_output_0", "/Relu_output_0"]
    assert worst[0].said() == "'/head/Conv_output_0' [Conv] cosine 0.97480 (accumulated 0.97413, euclidean 1.756)"
    jump = first_jump(layers)
    assert jump is not None and jump.name == "/head/Conv_output_0"
    assert first_jump(layers, below=0.9) is None
    # A row of the worker's reply that is not one: a ValueError naming the row and field (the triage says it).
    with pytest.raises(ValueError, match=r"the per-layer analysis: \[1\]: no name"):
        codec.from_json(list[LayerFigure], [{"name": "a"}, {"op": "Conv"}], "the per-layer analysis")
    with pytest.raises(ValueError, match=r"the per-layer analysis: \[0\].cosine: expected a number, got 'x'"):
        codec.from_json(list[LayerFigure], [{"name": "a", "cosine": "x"}], "the per-layer analysis")


def test_the_colours_the_toolkit_prints_are_read_through() -> None:
    coloured = REAL.read_text().replace("0.97480", "\x1b[1;33m0.97480\x1b[0m")
    assert [row.cosine for row in parse_analysis(coloured, REAL)] == [row.cosine for row in read_analysis_file(REAL)]


@pytest.mark.parametrize("damage, said", [
    (lambda text: text.replace("0.97480 | 1.75624", "0.97480 1.75624"), "line 15, layer '/head/Conv_output_0': figures"),
    (lambda text: text.replace("[Conv] /head/Conv_output_0 ", "Conv /head/Conv_output_0 ", 1), "line 15 is not a layer"),
    (lambda text: text.replace("-" * 83, "=" * 83), "no layer table"),
    (lambda text: "\n".join(line for line in text.splitlines() if "|" not in line), "no layer with figures"),
])
def test_a_garbled_file_is_an_error_naming_the_file_and_line(damage, said: str) -> None:
    with pytest.raises(AnalysisUnreadable, match="error_analysis_rk3588.txt") as raised:
        parse_analysis(damage(REAL.read_text()), REAL)
    assert said in str(raised.value)


def test_a_missing_or_empty_file_is_said(tmp_path: Path) -> None:
    with pytest.raises(AnalysisUnreadable, match=r"error_analysis.txt: the toolkit wrote no analysis file"):
        read_analysis(tmp_path)
    (tmp_path / "error_analysis.txt").write_text("\n \n")
    with pytest.raises(AnalysisUnreadable, match="analysis file is empty"):
        read_analysis(tmp_path)
