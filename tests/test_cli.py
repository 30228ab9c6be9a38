"""The ``pytest-edge`` command: inspect agrees with the report; report merge and compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_helpers import installed, needs_executorch, run_cli

from pytest_edge.backends import tensor_backends
from pytest_edge.cli import main

# Also run by tox -e tflite-runtime: the command and the report it reads, on that environment.
pytestmark = [pytest.mark.tflite_runtime_lane,
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]


@needs_executorch
def test_inspect_prints_the_numbers_of_the_report(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn")
        def test_cnn(edge_model):
            pass
    """)
    # Every installed backend that reads tiny_cnn's .onnx, .tflite or .pte (OpenVINO, TFLM too where installed).
    passed = sum(map(installed, ("onnxruntime-cpu", "litert", "litert-ref", "executorch", "openvino", "tflite-micro")))
    pytester.runpytest_subprocess("--edge-update-golden", "--edge-report=r.json").assert_outcomes(
        passed=passed, skipped=len(tensor_backends()) - passed)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    # No --model-dir: inspect reads edge_model_dirs from the project's ini file, as pytest does,
    # also from a subfolder (the rootdir is found the way pytest finds it).
    (pytester.path / "sub").mkdir()
    done = run_cli("inspect", "tiny_cnn", cwd=pytester.path / "sub")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:]}
    for record in (r for r in records if r["verdict"] == "passed"):  # skipped ones (ncnn, mnn: no file) have none
        cov = record["coverage"]
        row = rows[record["backend"]]
        assert f"{cov['delegated_ops']}/{cov['total_ops']} delegated" in row
        assert f"{cov['fallback']:.1%}" in row
    assert "CUMSUM x1" in rows["litert"] and "aten::cumsum x1" in rows["executorch"]


def test_inspect_predicts_mobile_targets(tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    done = run_cli("inspect", "tiny_cnn", "--target", "nnapi", "--target", "coreml", "--model-dir", str(fixtures),
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {" ".join(line.split()[:2]): line for line in done.stdout.splitlines()[2:]}
    assert "7/8 delegated" in rows["predicted nnapi"] and "CumSum x1" in rows["predicted nnapi"]
    assert "6/8 delegated" in rows["predicted coreml"] and "Flatten x1" in rows["predicted coreml"]


def test_inspect_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    done = run_cli("inspect", "nothing_here", cwd=tmp_path)
    assert done.returncode == 2 and "model 'nothing_here' not found" in done.stderr
    assert "edge_model_dirs" in done.stderr and str(tmp_path / "nothing_here") in done.stderr


def _report(tmp_path: Path, name: str, cpu: str, p50: float) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({
        "schema": "pytest-edge/report/1", "created": "2026-11-29T00:00:00Z", "machine": {"cpu": cpu},
        "records": [{"test": "t.py::t[m-litert]", "model": {"name": "m"}, "backend": "litert", "verdict": "passed",
                     "latency_ms": {"p50": p50, "p99": p50}, "peak_memory_mb": 1.0,
                     "coverage": {"fallback": 0.0}}]}))
    return path


def test_report_merge_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _report(tmp_path, "a.json", "pixel", 1.0), _report(tmp_path, "b.json", "rpi", 3.0)
    assert main(["report", "merge", str(a), str(b), "-o", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "model m" in out and "pixel [0]" in out and "rpi [1]" in out and "passed 3.000ms" in out
    merged = json.loads((tmp_path / "m.json").read_text())
    assert len(merged["records"]) == 2 and set(merged["matrix"]["m"]) == {"pixel [0]", "rpi [1]"}
    assert main(["report", "compare", str(a), str(b), "--max-regression", "10%"]) == 1
    assert "P50 latency 3.000 ms (one process) is +200.0%" in capsys.readouterr().out
    assert main(["report", "compare", str(b), str(a)]) == 0
    (tmp_path / "bad.json").write_text("{}")
    assert main(["report", "merge", str(tmp_path / "bad.json")]) == 2
    capsys.readouterr()
    # A stored report is untrusted: a verdict of no version is refused naming the file, not counted.
    odd = json.loads(b.read_text())
    odd["records"][0]["verdict"] = "mostly passed"
    (tmp_path / "odd.json").write_text(json.dumps(odd))
    assert main(["report", "merge", str(a), str(tmp_path / "odd.json")]) == 2
    assert f"{tmp_path / 'odd.json'} is not a valid pytest-edge report" in capsys.readouterr().err
    assert main(["report", "compare", str(tmp_path / "odd.json"), str(a)]) == 2
    assert "unknown verdict 'mostly passed'" in capsys.readouterr().err


def test_golden_refresh_command_writes_golden(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
        def test_mlp(edge_model):
            pass
    """)
    done = run_cli("golden", "refresh", "-q", "-p", "no:cacheprovider", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (pytester.path / "golden/tiny_mlp/meta.json").is_file()


def test_golden_prune_refuses_without_edge_tests_or_with_broken_collection(pytester: pytest.Pytester,
                                                                          models: Path) -> None:
    (pytester.path / "golden/tiny_mlp").mkdir(parents=True)
    (pytester.path / "golden/tiny_mlp/meta.json").write_text("{}")
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    done = run_cli("golden", "prune", cwd=pytester.path)
    assert done.returncode == 2 and "no test with @pytest.mark.edge was collected" in done.stderr
    pytester.makepyfile(test_broken="import not_a_module_anywhere\n")
    done = run_cli("golden", "prune", cwd=pytester.path)
    assert done.returncode == 2 and "collecting the tests failed" in done.stderr and "not_a_module_anywhere" in done.stderr
    done = run_cli("golden", "prune", "test_plain.py::test_nothing", cwd=pytester.path)
    assert done.returncode == 2 and "node ids" in done.stderr
    assert (pytester.path / "golden/tiny_mlp/meta.json").read_text() == "{}", "nothing may be removed"
