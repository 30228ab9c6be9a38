"""``reference=``: an artifact checked against another model's golden (an int8 export against the
float model's), and ``max_drift=`` end to end (session.py, plan.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

from edge_helpers import FIXTURES, LIGHT, calibrated_chain

from pytest_edge.accuracy.compare import Tolerance
from pytest_edge.golden.alignment import quantized_io_hint, reference_problems
from pytest_edge.backends import TensorSpec
from pytest_edge.errors import EdgeUsageError
from pytest_edge.golden import Golden, GoldenMeta, GoldenReference, GoldenSignature
from pytest_edge.golden.sets import judged_artifacts
from pytest_edge.core.marker import parse_marker
from pytest_edge.core.plan import plan_for
from pytest_edge.run.session import EdgeSession
from pytest_edge.core.settings import Settings
from pytest_edge.measurement.timing import DRIFT_MIN_WINDOW_S
from pytest_edge.triage import quant

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")



@pytest.fixture
def session(tmp_path: Path):
    edge = EdgeSession(Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, model_dirs=[FIXTURES]))
    yield edge
    edge.close()


def _plan(edge: EdgeSession, backend: str = "litert", **keywords: object):
    marker = parse_marker((), {"model": "tiny_cnn_int8", **keywords})
    return edge.plan(edge.resolve(marker.model), backend, marker)


# ---------------------------------------------------------------- plans, without a runtime


def test_reference_is_resolved_like_model_and_owns_the_golden(session: EdgeSession) -> None:
    plan = _plan(session, reference="tiny_cnn", min_cosine=0.99)
    assert plan.model.name == "tiny_cnn_int8" and plan.reference is not None
    assert plan.golden_model.name == "tiny_cnn" and set(plan.reference.artifacts) == {
        ".onnx", ".tflite", ".pte", ".ncnn.param", ".mnn"}  # every artifact fixtures/ has of it
    assert plan.golden_plan.model.name == "tiny_cnn" and plan.golden_plan.reference is None
    assert plan.artifact is not None and plan.artifact.name == "tiny_cnn_int8.tflite"  # the tested one
    assert session.golden.used(plan) == {("tiny_cnn", "default")}
    assert session.golden.model_name(plan.marker) == "tiny_cnn"
    assert session.golden.model_name(parse_marker(("tiny_cnn_int8",), {})) == "tiny_cnn_int8"
    # An artifact path names one artifact of the reference model.
    by_path = _plan(session, reference=str(FIXTURES / "tiny_cnn.onnx"))
    assert by_path.golden_model.name == "tiny_cnn" and list(by_path.golden_model.artifacts) == [".onnx"]
    # inputs= pick that input set of the reference model.
    case = {"x": np.zeros((1, 3, 32, 32), np.float32)}
    with_inputs = _plan(session, reference="tiny_cnn", inputs=case)
    assert session.golden.used(with_inputs) == {("tiny_cnn", session.golden.input_set(with_inputs))} != {
        ("tiny_cnn", "default")}


def test_unknown_or_self_reference_is_a_usage_error(session: EdgeSession) -> None:
    with pytest.raises(EdgeUsageError, match=r"reference='tiny_cnn_fp32' of model 'tiny_cnn_int8': model "
                                             r"'tiny_cnn_fp32' not found: no .* artifact at .*fixtures/tiny_cnn_fp32"):
        _plan(session, reference="tiny_cnn_fp32")
    with pytest.raises(EdgeUsageError, match="names the tested model 'tiny_cnn_int8' itself"):
        _plan(session, reference="tiny_cnn_int8.tflite")


def test_reference_tolerances_are_the_markers_own(session: EdgeSession) -> None:
    # Statistical checks only: the ini's atol/rtol (1e-4) would fail any quantized artifact.
    assert _plan(session, reference="tiny_cnn", min_cosine=0.99).tolerance("y") == Tolerance(min_cosine=0.99)
    assert _plan(session, reference="tiny_cnn", atol=0.1).tolerance("y") == Tolerance(atol=0.1)
    assert _plan(session, reference="tiny_cnn", tolerances={"y": {"min_snr_db": 20}}).tolerance("y") == Tolerance(
        min_snr_db=20.0)
    # Naming none keeps the defaults; without reference=, the same: statistical checks alone are the
    # marker's own, element-wise ones keep the ini's other tolerance.
    assert _plan(session, reference="tiny_cnn").tolerance("y") == Tolerance(atol=1e-4, rtol=1e-4)
    assert _plan(session, min_cosine=0.99).tolerance("y") == Tolerance(min_cosine=0.99)
    assert _plan(session, min_cosine=0.99, atol=0.1).tolerance("y") == Tolerance(atol=0.1, rtol=1e-4, min_cosine=0.99)
    settings = Settings(golden_dir=Path("g"), rootdir=Path("."))
    plain = plan_for(settings, parse_marker(("m",), {"atol": 0.5}), session.resolve("tiny_cnn"), "litert",
                     Path("."))
    assert plain.reference is None and plain.golden_plan is plain and plain.tolerance("y").rtol == 1e-4


def _golden(model: str, producer: str, outputs: list[TensorSpec]) -> Golden:
    meta = GoldenMeta(reference=GoldenReference("onnxruntime-cpu", producer),
                      signature=GoldenSignature((TensorSpec("x", (1, 3, 32, 32), "float32"),), tuple(outputs)))
    return Golden(model, Path("golden") / model, meta)


def test_staleness_is_judged_on_the_artifact_the_reference_golden_came_from(session: EdgeSession) -> None:
    plan = _plan(session, reference="tiny_cnn")
    golden = _golden("tiny_cnn", "tiny_cnn.onnx", [])
    assert [p.name for p in judged_artifacts(plan, golden)] == ["tiny_cnn.onnx"]
    # Recorded from an artifact the reference model does not have here: each of its own is judged.
    elsewhere = _golden("tiny_cnn", "tiny_cnn.mlmodel", [])
    assert sorted(p.name for p in judged_artifacts(plan, elsewhere)) == [
        "tiny_cnn.mnn", "tiny_cnn.ncnn.param", "tiny_cnn.onnx", "tiny_cnn.pte", "tiny_cnn.tflite"]
    own = _plan(session)
    assert [p.name for p in judged_artifacts(own, golden)] == ["tiny_cnn_int8.tflite"]


def test_signature_problems_name_both_models_and_the_tensor(session: EdgeSession) -> None:
    plan = _plan(session, reference="tiny_cnn")
    golden = _golden("tiny_cnn", "tiny_cnn.onnx", [TensorSpec("y", (1, 10), "float32")])
    fine = [TensorSpec("Identity", (1, 10), "float32")]
    assert reference_problems(golden.outputs_spec, fine, plan, golden, "output") == ([0], [])
    dynamic = [TensorSpec("Identity", ("batch", 10), "float32")]
    assert reference_problems(golden.outputs_spec, dynamic, plan, golden, "output")[1] == []
    _, problems = reference_problems(golden.outputs_spec, [TensorSpec("Identity", (1, 5), "int8")], plan,
                                      golden, "output")
    assert problems == [
        "output 'Identity' of tiny_cnn_int8 (matched to 'y' of tiny_cnn): dtype int8, tiny_cnn has float32",
        "output 'Identity' of tiny_cnn_int8 (matched to 'y' of tiny_cnn): shape [1, 5], tiny_cnn has [1, 10]"]
    assert "pytest-edge triage quant" in quantized_io_hint(problems)  # int8 I/O: say what to do instead
    _, problems = reference_problems(golden.outputs_spec, fine * 2, plan, golden, "output")
    assert problems == ["tiny_cnn_int8 has 2 outputs (Identity, Identity), tiny_cnn has 1 (y)"]
    assert quantized_io_hint(problems) == ""


# ---------------------------------------------------------------- pytester runs

INT8_TESTS = """
import pytest

@pytest.mark.edge(model="tiny_cnn_int8", reference="tiny_cnn", min_cosine=0.99, min_snr_db=20, topk_agreement=1)
def test_int8(edge_model):
    assert edge_model.golden.model == "tiny_cnn"

@pytest.mark.edge(model="tiny_cnn_int8", reference="tiny_cnn", atol=0.5)
def test_int8_atol(edge_model):
    pass

@pytest.mark.edge(model="tiny_cnn_int8", reference="tiny_cnn", min_cosine=0.99, min_snr_db=500)
def test_int8_impossible(edge_model):
    pass
"""


@pytest.mark.tflite_runtime_lane  # tflite-runtime 2.14's reference kernels lack CUMSUM: its triage line differs
def test_int8_against_the_float_golden(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_int8=INT8_TESTS)
    missing = pytester.runpytest_inprocess(LIGHT)
    missing.assert_outcomes(failed=6, skipped=3)  # no .onnx for tiny_cnn_int8: onnxruntime-cpu skips
    missing.stdout.fnmatch_lines(["*no golden outputs for model 'tiny_cnn'*(the golden of reference='tiny_cnn', "
                                  "against which 'tiny_cnn_int8' is checked)*"])

    refreshed = pytester.runpytest_inprocess(LIGHT, "--edge-update-golden", "--edge-report=report.json")
    refreshed.assert_outcomes(passed=4, failed=2, skipped=3)
    # Every test ran: the reference model's golden is used by the tests that name it.
    assert "unused golden" not in refreshed.stdout.str(), refreshed.stdout.str()[-2000:]
    # The refresh writes the reference model's golden, from its own artifacts, and nothing else.
    assert sorted(p.name for p in (pytester.path / "golden").iterdir()) == ["tiny_cnn"]
    meta = json.loads((pytester.path / "golden/tiny_cnn/meta.json").read_text())
    assert meta["reference"] == {**meta["reference"], "backend": "onnxruntime-cpu", "artifact": "tiny_cnn.onnx"}
    assert set(meta["artifacts"]) == {"tiny_cnn.onnx", "tiny_cnn.tflite", "tiny_cnn.pte"}
    refreshed.stdout.fnmatch_lines([
        "*litert: against reference tiny_cnn: output 'y': SNR * dB < min_snr_db 500*",
        "*obtained outputs of case 0 written to .edge/obtained/tiny_cnn/tiny_cnn_int8.litert-case_000.npz "
        "(compare: pytest-edge golden diff tiny_cnn)*",
        "*triage: litert-ref on the same tiny_cnn_int8.tflite also differs from the golden (y): the artifact "
        "itself disagrees with the reference onnxruntime-cpu on tiny_cnn.onnx*",
        "*triage: to see which layer loses accuracy, on this test's golden inputs: pytest-edge triage quant "
        "models/tiny_cnn.tflite models/tiny_cnn_int8.tflite --inputs golden/tiny_cnn",
    ])
    # ... and that command runs on the golden's cases, from where pytest ran (tflite-runtime 2.14's
    # reference kernels have no CUMSUM: there, LiteRT under its new name only)
    if importlib.util.find_spec("ai_edge_litert") is not None:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert quant.main(["models/tiny_cnn.tflite", "models/tiny_cnn_int8.tflite", "--inputs", "golden/tiny_cnn"]) == 0
        assert f"inputs: {len(meta['cases'])} (golden inputs of golden/tiny_cnn); worst input: case_000-" in \
            printed.getvalue()
    records = json.loads((pytester.path / "report.json").read_text())["records"]
    checked = [r for r in records if r["verdict"] != "skipped"]
    assert len(checked) == 6
    assert {r["accuracy"]["reference_model"] for r in checked} == {"tiny_cnn"}
    assert all(r["accuracy"]["cosine"] > 0.99 and r["model"]["name"] == "tiny_cnn_int8" for r in checked)

    pytester.runpytest_inprocess(LIGHT, "-k", "not impossible").assert_outcomes(passed=4, skipped=2)

    # Staleness is the reference model's: a golden recorded for another tiny_cnn.onnx is stale.
    path = pytester.path / "golden/tiny_cnn/meta.json"
    path.write_text(json.dumps({**meta, "artifacts": {**meta["artifacts"], "tiny_cnn.onnx": "0" * 64}},
                               indent=2, sort_keys=True) + "\n")
    stale = pytester.runpytest_inprocess(LIGHT, "-k", "test_int8_atol")
    stale.assert_outcomes(failed=2, skipped=1)
    stale.stdout.fnmatch_lines(["*golden for 'tiny_cnn' is stale: *tiny_cnn.onnx has sha256 *(the golden of "
                                "reference='tiny_cnn', against which 'tiny_cnn_int8' is checked)*"])


def test_unknown_reference_is_an_error_of_that_test(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn_int8", reference="tiny_cnn_fp32", min_cosine=0.99)
        def test_unknown(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_unknown: reference='tiny_cnn_fp32' of model 'tiny_cnn_int8': model "
                                 "'tiny_cnn_fp32' not found: no .onnx/*/.pte/* artifact at *"])


def test_max_drift_generous_passes_and_a_drift_test_times_long_enough_whatever_runs_says(
        pytester: pytest.Pytester, models: Path) -> None:
    # No timing assertion: a generous budget passes whatever the machine does. A max_drift test
    # times each process for 0.4 s at least (two windows of 0.05 s of runs), so even runs=5 (and
    # this project's edge_min_time = 0) gives a drift figure; the unmeasured message is checked in
    # test_coverage_and_budgets.py on recorded samples. The model is the chain calibrated here (P50
    # at least 0.5 ms, a few hundred runs in 0.4 s): tiny_mlp, at 5 us a run on an AMD EPYC, fills
    # the 100 000-run buffer in 0.5 s, and on a machine twice as fast before its windows are long
    # enough, so the figure would rest on the machine's speed.
    calibrated_chain().write(models / "chain.onnx")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="chain", backends="onnxruntime-cpu", max_drift=50, runs=20)
        def test_generous(edge_model):
            pass

        @pytest.mark.edge(model="chain", backends="onnxruntime-cpu", max_drift=50, runs=5)
        def test_few_runs(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=report.json")
    result.assert_outcomes(passed=2)
    records = {r["test"].split("::")[1]: r for r in json.loads((pytester.path / "report.json").read_text())["records"]}
    for name in ("test_generous", "test_few_runs"):
        record = records[f"{name}[chain-onnxruntime-cpu]"]
        # Timed for its windows (a fifth of the runs' time is DRIFT_MIN_WINDOW_S at least), not for runs=.
        timed_s = record["measured_runs"] * record["latency_ms"]["mean"] / 1e3
        # clock bound: the runs' own time against the 0.4 s of wall a max_drift test times per process
        # (DRIFT_MIN_TIME_S): 0.25 s leaves 37 % for the timing loop's overhead, a few us a run of a
        # 0.5 ms chain on any machine.
        assert record["measured_runs"] > 20 and timed_s >= 5 * DRIFT_MIN_WINDOW_S and record["drift"] > 0, record
        assert record["processes"][0]["drift"] == pytest.approx(record["drift"])
