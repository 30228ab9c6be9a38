"""Accepting an intended regression: ``pytest-edge accept MODEL --reason`` writes edge-accept.toml;
the A/B gate then passes that model's change (for exactly those artifacts) and still fails
another model's; after the merge the next change is gated against the accepted figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edge_helpers import write_mlp

from pytest_edge.core.acceptance import Acceptance, read_acceptances, render, write_acceptance
from pytest_edge.errors import EdgeUsageError
from pytest_edge.measurement.gate import GateResult
from pytest_edge.measurement.regressions import Regression

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

SHA = "ab" * 32
OTHER_SHA = "cd" * 32


def _accept(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_edge.cli", "accept", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _gate(pytester: pytest.Pytester) -> pytest.RunResult:
    # Artifact size is exact: a 4x wider model fails it whatever the machine's load (no timing here).
    return pytester.runpytest_subprocess("--edge-baseline-models=main", "--edge-processes=1", "--edge-min-time=0s",
                                         "-o", "edge_runs=5", "--edge-report=r.json", "--edge-summary=r.md")


def test_an_accepted_change_passes_its_model_only_and_only_for_its_artifacts(pytester: pytest.Pytester) -> None:
    for side, hidden in (("main", 64), ("pr", 256)):
        (pytester.path / side).mkdir()
        write_mlp(pytester.path / side / "kws.onnx", hidden)
        write_mlp(pytester.path / side / "other.onnx", hidden)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="kws", backends="onnxruntime-cpu")
        def test_kws(edge_model):
            pass

        @pytest.mark.edge(model="other", backends="onnxruntime-cpu")
        def test_other(edge_model):
            pass
    """)
    pytester.makeini("[pytest]\nedge_model_dirs = pr\n")
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=2)
    _gate(pytester).assert_outcomes(failed=2)  # both 4x the size of their twins

    done = _accept(pytester.path, "kws", "--reason", "4x wider for accuracy (PR #7)")
    assert done.returncode == 0, done.stderr
    assert "kws: every figure accepted for pr/kws.onnx" in done.stdout
    (accepted,) = read_acceptances(pytester.path / "edge-accept.toml")
    assert accepted.model == "kws" and accepted.reason == "4x wider for accuracy (PR #7)"

    result = _gate(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*merge gate (A/B against main): 2 compared, 1 regressed, 0 inconclusive, 1 accepted*"])
    records = {r["model"]["name"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    kws = records["kws"]["baseline_check"]
    assert kws["verdict"] == "accepted" and records["kws"]["verdict"] == "passed"
    size = next(f for f in kws["findings"] if f["figure"] == "artifact size")
    assert size["verdict"] == "accepted" and size["message"].endswith(
        "accepted in edge-accept.toml: 4x wider for accuracy (PR #7)")
    assert records["other"]["baseline_check"]["verdict"] == "failed"
    summary = (pytester.path / "r.md").read_text()
    listed = summary.split("### Accepted changes (")[1]  # one line per accepted figure (size, and what timing found)
    assert listed.startswith(f"{len([f for f in kws['findings'] if f['verdict'] == 'accepted'])}: passed by an acceptance")
    assert "artifact pr/kws.onnx is" in listed and "accepted in edge-accept.toml: 4x wider for accuracy (PR \\#7)" in listed

    # Merged: main has the accepted artifacts. The next change of kws (another sha256) is gated
    # against them, whatever the file still says, and the failure says why the acceptance does not hold.
    for name in ("kws.onnx", "other.onnx"):
        shutil.copy(pytester.path / "pr" / name, pytester.path / "main" / name)
    write_mlp(pytester.path / "pr" / "kws.onnx", 1024)
    pytester.runpytest_subprocess("--edge-update-golden", "-k", "kws").assert_outcomes(passed=1)
    again = _gate(pytester)
    again.assert_outcomes(passed=1, failed=1)  # other: unchanged since the merge; kws: 4x again
    again.stdout.fnmatch_lines(["*onnxruntime-cpu: artifact pr/kws.onnx is * (edge-accept.toml accepts a change of "
                                "kws for other artifacts, sha256 *; this one is *: `pytest-edge accept` records this one)"])


def test_accepting_only_a_figure_leaves_the_others_gated() -> None:
    result = GateResult(summary={"mode": "ab", "verdict": "failed"})
    for figure in ("P50 latency", "artifact size"):
        result.fail(Regression(figure, f"m: {figure} worse", old=1.0, new=2.0, threshold=0.1), "rule")
    result.accept([Acceptance("m", (SHA,), ("artifact size",), "bigger on purpose")], "m", SHA, "edge-accept.toml")
    assert result.failures == ["m: P50 latency worse"] and result.summary["verdict"] == "failed"
    assert [f.verdict for f in result.findings] == ["failed", "accepted"]
    assert result.notes == ["m: artifact size worse; accepted in edge-accept.toml: bigger on purpose"]
    # Another model's acceptance, or this model's for another artifact, accepts nothing.
    for model, sha in (("other", SHA), ("m", OTHER_SHA)):
        untouched = GateResult(summary={"mode": "ab", "verdict": "failed"})
        untouched.fail(Regression("P50 latency", "m: P50 latency worse"), "rule")
        untouched.accept([Acceptance(model, (sha,), (), "why")], "m", SHA, "edge-accept.toml")
        assert len(untouched.failures) == 1 and untouched.summary["verdict"] == "failed"


@pytest.mark.parametrize("text, says", [
    ("[[accept]]\nmodel = 'm'\nsha256 = ['" + SHA + "']\n", "'reason' is required"),
    ("[[accept]]\nmodel = 'm'\nsha256 = ['abc']\nreason = 'x'\n", "'sha256' must list"),
    ("[[accept]]\nmodel = 'm'\nsha256 = []\nreason = 'x'\n", "'sha256' must list"),
    ("[[accept]]\nmodel = 'm'\nsha256 = ['" + SHA + "']\nreason = 'x'\nfigure = 'P50'\n", "unknown keys ['figure']"),
    ("accept = 3\n", "'accept' must be an array of tables"),
    ("[[accept]\n", "not valid TOML"),
    ("[[accept]]\nsha256 = ['" + SHA + "']\nreason = 'x'\n", "'model' must name a model"),
])
def test_a_misread_acceptance_file_is_an_error_naming_it(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "edge-accept.toml"
    path.write_text(text)
    with pytest.raises(EdgeUsageError, match=str(path).replace(".", r"\.")) as caught:
        read_acceptances(path)
    assert says in str(caught.value)


def test_the_file_round_trips_and_one_model_has_one_acceptance(tmp_path: Path) -> None:
    path = tmp_path / "edge-accept.toml"
    write_acceptance(path, "kws", [SHA], 'wider "on purpose"\\ok', ["peak memory"])
    write_acceptance(path, "net", [OTHER_SHA], "faster kernels")
    write_acceptance(path, "kws", [OTHER_SHA], "the second try")
    assert read_acceptances(path) == [Acceptance("net", (OTHER_SHA,), (), "faster kernels"),
                                      Acceptance("kws", (OTHER_SHA,), (), "the second try")]
    assert read_acceptances(tmp_path / "none.toml") == []
    quoted = [Acceptance("kws", (SHA,), ("peak memory",), 'wider "on purpose"\\ok')]
    path.write_text(render(quoted))
    assert read_acceptances(path) == quoted
