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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_helpers import write_mlp

from pytest_edge.core.acceptance import Acceptance, read_acceptances, render, write_acceptance
from pytest_edge.core.baseline_check import BaselineCheck
from pytest_edge.core.verdicts import GateVerdict
from pytest_edge.errors import EdgeUsageError
from pytest_edge.judging.gate import GateResult
from pytest_edge.judging.regressions import Regression

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

SHA = "ab" * 32
OTHER_SHA = "cd" * 32


def _accept(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_edge.cli", "accept", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _gate(pytester: pytest.Pytester) -> pytest.RunResult:
    # Artifact size is exact: a 4x wider model fails it whatever the machine's load (no timing here).
    return pytester.runpytest_inprocess("--edge-baseline-models=main", "--edge-processes=1", "--edge-min-time=0s",
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
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
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
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "kws").assert_outcomes(passed=1)
    again = _gate(pytester)
    again.assert_outcomes(passed=1, failed=1)  # other: unchanged since the merge; kws: 4x again
    again.stdout.fnmatch_lines(["*onnxruntime-cpu: artifact pr/kws.onnx is * (edge-accept.toml accepts a change of "
                                "kws for other artifacts, sha256 *; this one is *: `pytest-edge accept` records this one)"])


def test_accepting_only_a_figure_leaves_the_others_gated() -> None:
    result = GateResult(summary=BaselineCheck(mode="ab", verdict=GateVerdict.FAILED))
    for figure in ("P50 latency", "artifact size"):
        result.fail(Regression(figure, f"m: {figure} worse", old=1.0, new=2.0, threshold=0.1), "rule")
    result.accept([Acceptance("m", (SHA,), ("artifact size",), "bigger on purpose")], "m", SHA, "edge-accept.toml")
    assert result.failures == ["m: P50 latency worse"] and result.summary.verdict == "failed"
    assert [f.verdict for f in result.findings] == ["failed", "accepted"]
    assert result.notes == ["m: artifact size worse; accepted in edge-accept.toml: bigger on purpose"]
    # Another model's acceptance, or this model's for another artifact, accepts nothing.
    for model, sha in (("other", SHA), ("m", OTHER_SHA)):
        untouched = GateResult(summary=BaselineCheck(mode="ab", verdict=GateVerdict.FAILED))
        untouched.fail(Regression("P50 latency", "m: P50 latency worse"), "rule")
        untouched.accept([Acceptance(model, (sha,), (), "why")], "m", SHA, "edge-accept.toml")
        assert len(untouched.failures) == 1 and untouched.summary.verdict == "failed"


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


# ---------------------------------------------------------------- accept writes only its own file

PYPROJECT = """\
[project]
name = "app"
version = "1.0"

[tool.pytest.ini_options]
edge_model_dirs = ["models"]
edge_accept_file = "{accept_file}"
"""


def _project(pytester: pytest.Pytester, accept_file: str) -> Path:
    (pytester.path / "models").mkdir()
    write_mlp(pytester.path / "models" / "kws.onnx", 64)
    pyproject = pytester.path / "pyproject.toml"
    pyproject.write_text(PYPROJECT.format(accept_file=accept_file))
    return pyproject


@pytest.mark.parametrize("accept_file", ["pyproject.toml", "../outside/x.toml", "ABSOLUTE", "pytest.ini", "linked"])
def test_accept_refuses_a_file_not_its_own_and_leaves_it_intact(pytester: pytest.Pytester, accept_file: str) -> None:
    outside = pytester.path.parent / "outside"
    outside.mkdir(exist_ok=True)
    if accept_file == "ABSOLUTE":
        accept_file = str(outside / "abs.toml")
    if accept_file == "linked":  # a link inside the project to a file outside it
        (pytester.path / "linked.toml").symlink_to(outside / "linked.toml")
        accept_file = "linked.toml"
    pyproject = _project(pytester, accept_file)
    before = pyproject.read_text()
    done = _accept(pytester.path, "kws", "--reason", "wider")
    assert done.returncode == 2, done.stdout
    named = Path(accept_file).name
    assert f"{named} (edge_accept_file)" in done.stderr and "refused, nothing written" in done.stderr, done.stderr
    assert pyproject.read_text() == before  # [project] and [tool.pytest.ini_options] intact
    assert not any(outside.iterdir()) and not (pytester.path / "pytest.ini").exists()


def test_an_existing_file_that_holds_anything_else_is_not_an_acceptance_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text('[tool.other]\nkey = 1\n')
    with pytest.raises(EdgeUsageError, match=r"settings\.toml: holds 'tool', not only \[\[accept\]\] tables"):
        write_acceptance(path, "kws", [SHA], "why", rootdir=tmp_path)
    assert path.read_text() == '[tool.other]\nkey = 1\n'


@pytest.mark.parametrize("reason", ["wider 😀 for accuracy", "café: naïve", 'tab\there, "quoted" \\ and \x07',
                                    "\u2028line separator", "ünïcödé " * 50])
def test_any_reason_round_trips_through_the_reader(tmp_path: Path, reason: str) -> None:
    path = tmp_path / "edge-accept.toml"
    write_acceptance(path, "kws", [SHA], reason, rootdir=tmp_path)
    assert read_acceptances(path) == [Acceptance("kws", (SHA,), (), reason.strip())]
    assert path.read_bytes().isascii()  # escaped, whatever the terminal's encoding


@given(reason=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).filter(str.strip),
       model=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_what_is_written_reads_back_as_written(tmp_path: Path, reason: str, model: str) -> None:
    path = tmp_path / "edge-accept.toml"
    write_acceptance(path, model, [SHA], reason, ["peak memory"], rootdir=tmp_path)
    assert read_acceptances(path)[-1] == Acceptance(model, (SHA,), ("peak memory",), reason.strip())


def test_a_reason_of_latin1_bytes_or_emoji_from_the_command_line_is_kept(pytester: pytest.Pytester) -> None:
    _project(pytester, "edge-accept.toml")
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "accept", "kws", "--reason",
                           b"caf\xe9 (latin-1) \xf0\x9f\x98\x80".decode("utf-8", "surrogateescape")],
                          cwd=pytester.path, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (accepted,) = read_acceptances(pytester.path / "edge-accept.toml")
    assert accepted.reason == "café (latin-1) 😀"
    # Written again over its own file: accept reads what it wrote.
    assert _accept(pytester.path, "kws", "--reason", "again 😀").returncode == 0
    assert read_acceptances(pytester.path / "edge-accept.toml")[0].reason == "again 😀"


@pytest.mark.parametrize("reason", ["", "   "])
def test_an_empty_reason_is_refused_at_the_command(pytester: pytest.Pytester, reason: str) -> None:
    _project(pytester, "edge-accept.toml")
    done = _accept(pytester.path, "kws", "--reason", reason)
    assert done.returncode == 2 and "--reason is empty" in done.stderr
    assert not (pytester.path / "edge-accept.toml").exists()
    with pytest.raises(EdgeUsageError, match="needs a reason"):
        write_acceptance(pytester.path / "edge-accept.toml", "kws", [SHA], reason)


def test_a_deeply_nested_acceptance_file_is_an_error_naming_it(pytester: pytest.Pytester) -> None:
    path = pytester.path / "edge-accept.toml"
    path.write_text("accept = " + "[" * 100_000)
    with pytest.raises(EdgeUsageError, match=r"edge-accept\.toml: not valid TOML \(nested deeper"):
        read_acceptances(path)
    # Where the gate reads it: a usage error naming the file, not an INTERNALERROR.
    (pytester.path / "main").mkdir()
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("--edge-baseline-models=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["*edge-accept.toml: not valid TOML (nested deeper than the parser's recursion limit)*"])


# ---------------------------------------------------------------- an acceptance follows every file

def _write_mlp_with_data(path: Path, hidden: int) -> None:
    """write_mlp's network with its weights in ``<name>.data`` beside it (ONNX external data)."""
    import onnx

    write_mlp(path, hidden)
    onnx.save(onnx.load(str(path)), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".data", size_threshold=0)


def test_an_accepted_external_data_model_whose_data_changes_fails_the_gate(pytester: pytest.Pytester) -> None:
    import numpy as np

    for side, hidden in (("main", 64), ("pr", 256)):
        (pytester.path / side).mkdir()
        _write_mlp_with_data(pytester.path / side / "kws.onnx", hidden)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="kws", backends="onnxruntime-cpu")
        def test_kws(edge_model):
            pass
    """)
    pytester.makeini("[pytest]\nedge_model_dirs = pr\n")
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    _gate(pytester).assert_outcomes(failed=1)  # 4x the size of main's
    done = _accept(pytester.path, "kws", "--reason", "4x wider")
    assert done.returncode == 0, done.stderr
    assert "pr/kws.onnx.data (" in done.stdout  # the data file is accepted by its own sha256
    (accepted,) = read_acceptances(pytester.path / "edge-accept.toml")
    assert len(accepted.sha256) == 2
    _gate(pytester).assert_outcomes(passed=1)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert set(records[0]["model"]["files"]) == {"kws.onnx", "kws.onnx.data"}

    # The weights change, the .onnx does not: another artifact, gated again.
    data = pytester.path / "pr" / "kws.onnx.data"
    before = (pytester.path / "pr" / "kws.onnx").read_bytes()
    weights = np.fromfile(data, np.float32)
    (weights * 0.5).astype(np.float32).tofile(data)
    assert (pytester.path / "pr" / "kws.onnx").read_bytes() == before
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    again = _gate(pytester)
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*edge-accept.toml accepts a change of kws for other artifacts*"])


def test_an_acceptance_holds_only_where_every_file_is_one_it_lists() -> None:
    accepted = Acceptance("m", (SHA, OTHER_SHA), (), "why")
    assert accepted.covers("m", (SHA, OTHER_SHA), "P50 latency") and accepted.covers("m", SHA, "P50 latency")
    assert not accepted.covers("m", (SHA, "ef" * 32), "P50 latency")  # the data changed
    assert not accepted.covers("m", (), "P50 latency") and not accepted.covers("m", None, "P50 latency")


def test_a_records_identity_is_every_file_of_the_artifact(tmp_path: Path) -> None:
    from pytest_edge.core.record import artifact_identity, model_json
    from pytest_edge.files import file_digest

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    ext = model_json("tiny_ext", fixtures / "tiny_ext.onnx", fixtures)
    assert ext["files"] == {"tiny_ext.onnx": file_digest(fixtures / "tiny_ext.onnx"),
                            "tiny_ext.onnx.data": file_digest(fixtures / "tiny_ext.onnx.data")}
    assert artifact_identity(ext) == tuple(ext["files"].values())
    genai = model_json("genai_llama", fixtures / "llm" / "genai_llama" / "model.onnx", fixtures)
    assert set(genai["files"]) == {"model.onnx", "model.onnx.data", "genai_config.json"}
    single = model_json("tiny_mlp", fixtures / "tiny_mlp.onnx", fixtures)
    assert "files" not in single and artifact_identity(single) == (single["sha256"],)


def test_a_decoder_is_accepted_by_the_name_its_records_carry(pytester: pytest.Pytester) -> None:
    from pytest_edge.files import file_digest

    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "llm"
    shutil.copytree(fixtures / "genai_llama", pytester.path / "models" / "genai_llama")
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    done = _accept(pytester.path, "genai_llama", "--reason", "re-exported")
    assert done.returncode == 0, done.stderr
    (accepted,) = read_acceptances(pytester.path / "edge-accept.toml")
    folder = pytester.path / "models" / "genai_llama"
    assert accepted.model == "genai_llama"  # edge_llm(model="genai_llama")'s records' name
    assert set(accepted.sha256) == {file_digest(folder / name) for name in
                                    ("model.onnx", "model.onnx.data", "genai_config.json")}
