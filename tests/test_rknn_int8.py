"""rknn int8 targets calibrated on every golden case or on the marker's calibration=, the toolkit's
per-layer accuracy analysis as the triage of a failing int8 target, and a model quantized before the
toolkit (onnxruntime's quantize_static) on rk3588 (docs/npu.md, "Rockchip RKNPU"). The toolkit runs in
the environment pytest-edge makes for it (tests/test_rknn.py's fixtures: made once per machine)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES
from test_rknn import _record, made_env, pytestmark, rknn_env  # noqa: F401 - the environment's fixtures

from pytest_edge.devices import backend_env

CASES = """
import numpy as np

def cases():
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)]
"""


def _golden_of(pytester: pytest.Pytester, model: str, inputs: str = "") -> None:
    """Record ``model``'s golden on ONNX Runtime, with the test file's ``inputs=`` where given."""
    keyword = f", inputs={inputs}" if inputs else ""
    pytester.makepyfile(golden_of="import pytest\n" + (CASES if inputs else "") + f"""
@pytest.mark.edge(model="{model}", backends=["onnxruntime-cpu"]{keyword})
def test_golden(edge_model):
    pass
""")
    pytester.runpytest_inprocess("golden_of.py", "--edge-update-golden").assert_outcomes(passed=1)


@pytest.mark.slow
def test_int8_calibrated_on_every_golden_case_fails_naming_the_layer_int8_hurts(
        pytester: pytest.Pytester, models: Path, rknn_env: backend_env.Environment) -> None:
    """fixtures/rknn/outlier_cnn.onnx (an activation of wide range, read by reads_outlier): float16
    passes atol 5e-3; int8, calibrated on the golden's 8 cases, fails min_cosine 0.999 and the toolkit's
    per-layer analysis names reads_outlier as the worst layer, in the failure and in the record; with
    calibration= a folder of 3 .npz files, the record says those."""
    shutil.copy(FIXTURES / "rknn" / "outlier_cnn.onnx", models / "outlier_cnn.onnx")
    calib = pytester.path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(11)
    for index in range(3):
        np.savez(calib / f"case{index}.npz", x=rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    pytester.makepyfile(test_npu=CASES + """
import pytest

@pytest.mark.edge(model="outlier_cnn", backends=["rknn-rk3588"], inputs=cases, atol=5e-3, rtol=0)
def test_float16(edge_model):
    pass

@pytest.mark.edge(model="outlier_cnn", backends=["rknn-rk3588-int8"], inputs=cases, min_cosine=0.999)
def test_int8(edge_model):
    pass

@pytest.mark.edge(model="outlier_cnn", backends=["rknn-rk3588-int8"], inputs=cases, calibration="calib", min_cosine=0.9)
def test_int8_own_calibration(edge_model):
    pass
""")
    _golden_of(pytester, "outlier_cnn", inputs="cases")
    result = pytester.runpytest_inprocess("test_npu.py", "--edge-report=r.json")
    records = {r["test"].split("::")[-1].split("[")[0]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    print(result.stdout.str()[-6000:])
    result.assert_outcomes(passed=2, failed=1)
    float16, int8, own = records["test_float16"], records["test_int8"], records["test_int8_own_calibration"]
    assert float16["verdict"] == "passed" and int8["verdict"] == "failed"
    build = int8["runtime"]["build"]
    assert build["calibration"]["samples"] == 8 and build["calibration"]["source"].startswith("the golden's 8 case(s)")
    assert int8["runtime"]["built"] == "at load" and int8["runtime"]["rknn_bytes"] > 1000
    # The triage: the toolkit's analysis, its worst layer the one staged, in the failure and the record.
    worst = next(line for line in int8["violations"] if "worst layers by their own cosine" in line)
    assert worst.split("worst layers by their own cosine: ")[1].startswith("'/reads_outlier/Conv_output_0' [Conv] cosine ")
    assert "rknn-toolkit2 2.5.0's accuracy_analysis" in worst and worst in result.stdout.str().replace("\n", "")
    own_build = own["runtime"]["build"]["calibration"]
    assert own_build["samples"] == 3 and own_build["source"] == f"calibration='calib': {calib} (3 .npz file(s))"
    print("float16:", float16["accuracy"], "int8:", int8["accuracy"], "own:", own["accuracy"])
    print(worst)


@pytest.mark.slow
def test_a_calibration_set_that_cannot_be_used_is_an_error_naming_the_file_and_backend(
        pytester: pytest.Pytester, models: Path, rknn_env: backend_env.Environment) -> None:
    """calibration= that leaves the project, does not exist, holds no .npz, holds a garbled one, or
    cases of another input name or shape: each test fails naming the file and rknn-rk3588-int8."""
    for folder, files in {"empty": {}, "garbled": {"a.npz": b"not a zip"}}.items():
        (pytester.path / folder).mkdir()
        for name, content in files.items():
            (pytester.path / folder / name).write_bytes(content)
    (pytester.path / "named").mkdir()
    np.savez(pytester.path / "named" / "a.npz", image=np.zeros((1, 3, 32, 32), np.float32))
    (pytester.path / "shaped").mkdir()
    np.savez(pytester.path / "shaped" / "a.npz", x=np.zeros((1, 3, 16, 16), np.float32))
    _golden_of(pytester, "tiny_cnn")
    tests = "\n".join(f"""
@pytest.mark.edge(model="tiny_cnn", backends=["rknn-rk3588-int8"], calibration={spec!r}, min_cosine=0.9)
def test_{name}(edge_model):
    pass
""" for name, spec in (("outside", "../elsewhere"), ("missing", "nowhere"), ("empty", "empty"),
                       ("garbled", "garbled"), ("named", "named"), ("shaped", "shaped/a.npz")))
    pytester.makepyfile(test_calibration="import pytest\n" + tests)
    result = pytester.runpytest_inprocess("test_calibration.py")
    result.assert_outcomes(failed=6)
    root = pytester.path.resolve()
    result.stdout.fnmatch_lines_random([
        f"*rknn-rk3588-int8: calibration='../elsewhere' leads to {root.parent}/elsewhere, outside the project's root*",
        f"*rknn-rk3588-int8: calibration='nowhere': {pytester.path}/nowhere does not exist*",
        f"*rknn-rk3588-int8: calibration='empty': no .npz file in {pytester.path}/empty*",
        f"*rknn-rk3588-int8: cannot read calibration file {pytester.path}/garbled/a.npz:*",
        f"*rknn-rk3588-int8: calibration case {pytester.path}/named/a.npz has no input 'x' of *tiny_cnn.onnx (it has [[]'image'[]])*",
        f"*rknn-rk3588-int8: calibration case {pytester.path}/shaped/a.npz: input 'x' has shape [[]1, 3, 16, 16[]], *tiny_cnn.onnx "
        "is built for [[]1, 3, 32, 32[]]*",
    ])


@pytest.mark.slow
def test_a_model_quantized_by_onnxruntime_runs_on_rk3588_within_the_tolerance(
        pytester: pytest.Pytester, models: Path, rknn_env: backend_env.Environment) -> None:
    """fixtures/clean_mlp_qdq.onnx (onnxruntime's quantize_static, QDQ int8: a third party's int8 model):
    the toolkit imports its quantization (do_quantization=False) and the simulator's outputs are within
    one output step (0.0345) of ONNX Runtime's on the same file; the record says int8, the model's own."""
    _golden_of(pytester, "clean_mlp_qdq")
    pytester.makepyfile(test_qdq="""
        import pytest
        @pytest.mark.edge(model="clean_mlp_qdq", backends=["rknn-rk3588"], atol=0.04, rtol=0, min_cosine=0.999)
        def test_npu(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("test_qdq.py", "--edge-report=r.json")
    result.assert_outcomes(passed=1)
    record = _record(pytester, "rknn-rk3588")
    assert record["precision"] == "int8"
    assert record["runtime"]["build"] == {"do_quantization": False,
                                          "quantization": "the model's own (its quantization operators imported)"}
    print("clean_mlp_qdq on rk3588:", record["accuracy"])
