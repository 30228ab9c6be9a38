"""Bad input met through pytest, as users meet it: each case a clear failure naming the file, the
backend and the test, the control test in the same session passing, the session alive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

CONTROL = """
@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
def test_control(edge_model):
    pass
"""


def test_bad_marker_and_feed_cases_fail_alone(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_runs="import numpy as np, pytest\n" + CONTROL + """
@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert", "litert-ref"])
def test_wrong_feed_shape(edge_model):
    edge_model(np.zeros((1, 17), np.float32))

@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", shapes={"nope": (1, 16)})
def test_unknown_shapes_name(edge_model):
    pass

@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", inputs=lambda: 42)
def test_inputs_callable_returns_junk(edge_model):
    pass
""", test_both="""
import pytest
@pytest.mark.edge(model="tiny_mlp", backends="litert", skip_backends="litert")
def test_backend_both_wanted_and_skipped(edge_model):
    pass
""", test_stacked="""
import pytest
pytestmark = pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")

@pytest.mark.edge(model="tiny_cnn", backends="onnxruntime-cpu")
def test_stacked_markers(edge_model):
    pass
""")
    result = pytester.runpytest_inprocess("--edge-update-golden", "-p", "no:cacheprovider")
    # The two bad markers are one error each, naming the test; every other test runs.
    result.assert_outcomes(passed=1, failed=5, errors=2)
    result.stdout.fnmatch_lines(["*test_backend_both_wanted_and_skipped: both backends= and skip_backends= "
                                 "name 'litert'*"])
    result.stdout.fnmatch_lines(["*test_stacked_markers: 2 @pytest.mark.edge markers apply*"])
    # Each bad case fails with its reason, the control passes.
    result = pytester.runpytest_inprocess("--edge-update-golden", "-p", "no:cacheprovider", "test_runs.py")
    result.assert_outcomes(passed=1, failed=5)
    text = result.stdout.str()
    for backend in ("onnxruntime-cpu", "litert", "litert-ref"):
        assert (f"{backend}: input 'x' of " in text and "tiny_mlp" in text
                and "has shape [1, 16], got an array of shape [1, 17]" in text), backend
    assert "shapes= names 'nope', which the model does not have" in text
    assert "inputs=" in text and "42" in text
    assert "Traceback" not in text and "INTERNALERROR" not in text


def test_tests_that_error_before_their_check_are_in_the_report(pytester: pytest.Pytester, models: Path) -> None:
    """#29: a test whose marker cannot be resolved (a NaN budget, both backends= and skip_backends=)
    errors at setup: its record is in the report with the reason, beside the tests that ran; a
    session of only such tests still writes its report; one with no edge test says why none is."""
    pytester.makepyfile(test_runs="import pytest\n" + CONTROL + """
@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", p50_ms=float("nan"))
def test_nan_budget(edge_model):
    pass
""", test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=r.json", "--edge-html=r.html")
    result.assert_outcomes(passed=2, errors=1)
    records = {r["test"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    bad = records["test_nan_budget[error]"]
    assert bad["verdict"] == "error" and bad["model"]["name"] == "tiny_mlp" and "p50_ms" in bad["violations"][0]
    assert records["test_control[tiny_mlp-onnxruntime-cpu]"]["verdict"] == "passed"
    assert "test_nan_budget" in (pytester.path / "r.html").read_text()
    (pytester.path / "r.json").unlink()
    pytester.runpytest_inprocess("test_runs.py::test_nan_budget", "--edge-report=r.json").assert_outcomes(errors=1)
    assert [r["verdict"] for r in json.loads((pytester.path / "r.json").read_text())["records"]] == ["error"]
    result = pytester.runpytest_inprocess("test_plain.py", "--edge-report=none.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*pytest-edge: no edge test ran, so nothing was written (report */none.json)*"])


def test_report_that_cannot_be_written_keeps_the_summary(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("import pytest\n" + CONTROL)
    (pytester.path / "afile").write_text("not a folder")
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=afile/r.json")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*pytest-edge conformance*", "*tiny_mlp*onnxruntime-cpu*passed*",
                                 "*pytest-edge: cannot write the report */afile/r.json: *",
                                 "*1 passed*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected a JSON object"),
    ('{"schema": "pytest-edge/report/1", "records": [1]}', "record"),
    ("{broken", "cannot read report"),
])
def test_baseline_of_the_wrong_shape_is_a_usage_error(pytester: pytest.Pytester, models: Path,
                                                      content: str, message: str) -> None:
    pytester.makepyfile("import pytest\n" + CONTROL)
    (pytester.path / "b.json").write_text(content)
    result = pytester.runpytest_inprocess("--edge-baseline=b.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "b.json" in result.stderr.str() and message in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_worker_killed_between_tests_is_restarted_quietly(pytester: pytest.Pytester, models: Path) -> None:
    """The next, innocent test passes: a new worker loads the model again."""
    pytester.makepyfile("""
        import os, signal, pytest

        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
        def test_first(edge_model):
            edge_model.loaded  # loaded in the shared worker

        def test_kill_it(request):
            from pytest_edge.plugin import SESSION_KEY
            worker = request.config.stash[SESSION_KEY].pool.workers["onnxruntime-cpu"]
            pid = worker.call("ping")
            os.kill(pid, signal.SIGKILL)
            worker._process.wait(timeout=30)

        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
        def test_after(edge_model):
            assert edge_model(__import__("numpy").ones((1, 16), "float32")).shape == (1, 4)
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_golden_naming_a_file_outside_its_folder_fails_the_test(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("import pytest\n" + CONTROL + """
@pytest.mark.edge(model="tiny_cnn", backends="onnxruntime-cpu")
def test_cnn(edge_model):
    pass
""")
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    meta_path = pytester.path / "golden/tiny_cnn/meta.json"
    meta = json.loads(meta_path.read_text())
    meta["cases"] = ["../../../../etc/passwd"]
    meta_path.write_text(json.dumps(meta))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*corrupt golden file *meta.json*etc/passwd*"])


def test_an_inputs_callable_of_the_wrong_type_names_the_model_and_many_cases_warn(
        pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import numpy as np, pytest

        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", inputs=lambda: 42)
        def test_wrong(edge_model):
            pass

        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu",
                          inputs=lambda: [{"x": np.full((1, 16), i, np.float32)} for i in range(101)])
        def test_many(edge_model):
            pass

        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu",
                          inputs=lambda: {"x": np.ones((1, 16), np.complex64)})
        def test_complex(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "-W", "default")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*model tiny_mlp: inputs=: the callable *<lambda> returned int 42*"])
    result.stdout.fnmatch_lines(["*EdgeManyCases: model tiny_mlp: inputs= gave 101 cases; each is a golden file*"])
    complex_message = "*model tiny_mlp: inputs=: input 'x' holds complex numbers (dtype complex64); a golden holds*"
    result.stdout.fnmatch_lines([complex_message])
    # A check says the same, never "no golden outputs" for a set that could not be recorded.
    checked = pytester.runpytest_inprocess("-k", "complex")
    checked.assert_outcomes(failed=1)
    checked.stdout.fnmatch_lines([complex_message])
    checked.stdout.no_fnmatch_line("*no golden outputs*")


def test_the_edge_markers_model_never_resolves_outside_the_projects_folders(pytester: pytest.Pytester,
                                                                           models: Path) -> None:
    """model= and reference= name a model inside the test's folder, the rootdir or edge_model_dirs:
    '..' once found the parent folder's '<project>.onnx' and '../stranger/x' a stranger's model,
    tested and given a golden. Each is its test's error naming the keyword and the path."""
    import shutil

    stranger = pytester.path.parent / "stranger"
    stranger.mkdir(exist_ok=True)
    shutil.copy(models / "tiny_mlp.onnx", stranger / "net.onnx")
    shutil.copy(models / "tiny_mlp.onnx", pytester.path.parent / f"{pytester.path.name}.onnx")  # what '.' named
    pytester.makepyfile(test_outside="import pytest\n" + CONTROL + f"""
@pytest.mark.edge(model="..", backends="onnxruntime-cpu")
def test_parent(edge_model):
    pass

@pytest.mark.edge(model=".", backends="onnxruntime-cpu")
def test_here(edge_model):
    pass

@pytest.mark.edge(model="../stranger/net", backends="onnxruntime-cpu")
def test_stranger(edge_model):
    pass

@pytest.mark.edge(model={str(stranger / "net.onnx")!r}, backends="onnxruntime-cpu")
def test_absolute(edge_model):
    pass

@pytest.mark.edge(model="tiny_mlp", reference="../stranger/net", backends="onnxruntime-cpu")
def test_reference(edge_model):
    pass
""")
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, errors=5)
    result.stdout.fnmatch_lines(["*test_parent*: model='..' names a folder by '.' or '..', not a model*",
                                 "*test_here*: model='.' names a folder by '.' or '..', not a model*",
                                 f"*test_stranger*: model='../stranger/net' is {stranger / 'net'}, outside the "
                                 "folders models are looked for in*",
                                 f"*test_absolute*: model='{stranger / 'net.onnx'}' is {stranger / 'net.onnx'}, "
                                 "outside the folders*",
                                 "*test_reference*: reference='../stranger/net' is *, outside the folders*"])
    assert sorted(p.name for p in (pytester.path / "golden").iterdir()) == ["tiny_mlp"]
