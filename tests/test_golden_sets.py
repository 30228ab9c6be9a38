"""Goldens per input set: two tests of one model with different inputs= keep their own goldens,
the unused-golden report, ``pytest-edge golden prune``, and the layout before input sets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import run_cli

from pytest_edge.golden import input_key

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

REPO = Path(__file__).resolve().parent.parent
ONES = {"x": np.ones((1, 16), np.float32)}
TWOS = {"x": np.full((1, 16), 2, np.float32)}
K1, K2 = input_key([ONES]), input_key([TWOS])

HEADER = """
import numpy as np, pytest
ONES = {"x": np.ones((1, 16), np.float32)}
TWOS = {"x": np.full((1, 16), 2, np.float32)}
"""
ONES_TEST = """
@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", inputs=ONES)
def test_ones(edge_model):
    assert edge_model.golden.cases[0].inputs["x"].tolist() == [[1.0] * 16]
"""
TWOS_TEST = """
@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", inputs=[TWOS])
def test_twos(edge_model):
    assert edge_model.golden.cases[0].inputs["x"].tolist() == [[2.0] * 16]
"""
GENERATED_TEST = """
@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
def test_generated(edge_model):
    pass
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _rewrite_meta(path: Path, **changes: object) -> None:
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, **changes}, indent=2, sort_keys=True) + "\n")


def test_two_input_sets_keep_their_own_goldens(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_sets=HEADER + ONES_TEST + TWOS_TEST + GENERATED_TEST)
    missing = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    missing.assert_outcomes(failed=3)
    missing.stdout.fnmatch_lines([f"*no golden outputs for model 'tiny_mlp', input set {K1} (the inputs= of the "
                                  f"test)*inputs-{K1}*meta.json*--edge-update-golden*"])
    missing.stdout.fnmatch_lines([f"*no golden outputs for model 'tiny_mlp', input set {K2}*"])

    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden").assert_outcomes(passed=3)
    golden = pytester.path / "golden/tiny_mlp"
    assert sorted(p.name for p in golden.iterdir() if p.is_dir()) == sorted([f"inputs-{K1}", f"inputs-{K2}"])
    default = json.loads((golden / "meta.json").read_text())
    assert "input_set" not in default and default["inputs_from"] == "signature"
    for key, value in ((K1, 1.0), (K2, 2.0)):
        meta = json.loads((golden / f"inputs-{key}/meta.json").read_text())
        assert meta["input_set"] == key and meta["inputs_from"] == "user"
        (case,) = meta["cases"]
        with np.load(golden / f"inputs-{key}" / case) as data:
            assert data["inputs/x"].tolist() == [[value] * 16]
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)

    # Mark every set, then refresh one test only: only its set is written again.
    for meta_path in (golden / "meta.json", golden / f"inputs-{K1}/meta.json", golden / f"inputs-{K2}/meta.json"):
        _rewrite_meta(meta_path, plugin_version="0.0.0-marked")
    before = _files(golden)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden", "-k", "test_ones")
    result.assert_outcomes(passed=1)
    after = _files(golden)
    assert {k: v for k, v in after.items() if not k.startswith(f"inputs-{K1}/")} == \
        {k: v for k, v in before.items() if not k.startswith(f"inputs-{K1}/")}, "other sets must not change"
    assert b"0.0.0-marked" not in after[f"inputs-{K1}/meta.json"], "the refreshed set must be rewritten"
    assert "unused golden" not in result.stdout.str(), "-k runs some tests only: no unused report"


def test_unused_report_and_prune(pytester: pytest.Pytester, models: Path) -> None:
    test_file = pytester.makepyfile(test_sets=HEADER + ONES_TEST + TWOS_TEST + GENERATED_TEST)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden").assert_outcomes(passed=3)
    full = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    full.assert_outcomes(passed=3)
    assert "unused golden" not in full.stdout.str(), "every set is used"

    # A golden of a model no test uses, and test_twos removed.
    ghost = pytester.path / "golden/ghost"
    shutil.copytree(pytester.path / "golden/tiny_mlp", ghost, ignore=shutil.ignore_patterns("inputs-*"))
    test_file.write_text(HEADER + ONES_TEST + GENERATED_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"pytest-edge: 2 unused golden sets: ghost/default (no test uses this model), "
                                 f"tiny_mlp/{K2}; remove them with pytest-edge golden prune"])
    for partial in (["-k", "ones"], [f"{test_file.name}::test_ones"], ["--deselect", f"{test_file.name}::test_generated"],
                    ["-m", "edge and not slow", "--ignore", "nothing.py"]):
        partial_run = pytester.runpytest_inprocess("-p", "no:cacheprovider", *partial)
        assert "unused golden" not in partial_run.stdout.str(), partial

    refused = run_cli("golden", "prune", "-k", "ones", cwd=pytester.path)
    assert refused.returncode == 2 and "deselected" in refused.stderr

    before = _files(pytester.path / "golden")
    dry = run_cli("golden", "prune", "--dry-run", cwd=pytester.path)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert dry.stdout.splitlines() == [f"would remove ghost/default ({ghost})",
                                       f"would remove tiny_mlp/{K2} ({pytester.path}/golden/tiny_mlp/inputs-{K2})"]
    assert _files(pytester.path / "golden") == before, "--dry-run removes nothing"

    done = run_cli("golden", "prune", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split(" (")[0] for line in done.stdout.splitlines()] == ["removed ghost/default",
                                                                       f"removed tiny_mlp/{K2}"]
    assert not ghost.exists() and not (pytester.path / f"golden/tiny_mlp/inputs-{K2}").exists()
    assert _files(pytester.path / "golden") == {k: v for k, v in before.items()
                                                if not k.startswith(("ghost/", f"tiny_mlp/inputs-{K2}/"))}
    clean = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    clean.assert_outcomes(passed=2)
    assert "unused golden" not in clean.stdout.str()
    again = run_cli("golden", "prune", cwd=pytester.path)
    assert again.returncode == 0 and again.stdout.startswith("no unused golden sets")


def test_unused_report_with_xdist(pytester: pytest.Pytester, models: Path) -> None:
    pytest.importorskip("xdist")
    test_file = pytester.makepyfile(test_sets=HEADER + ONES_TEST + TWOS_TEST)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden").assert_outcomes(passed=2)
    test_file.write_text(HEADER + ONES_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"pytest-edge: 1 unused golden set: tiny_mlp/{K2}; remove it with "
                                 "pytest-edge golden prune"])


def test_golden_list_shows_each_set(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_sets=HEADER + ONES_TEST + GENERATED_TEST)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden").assert_outcomes(passed=2)
    (models / "tiny_mlp.onnx").write_bytes((models / "tiny_mlp.onnx").read_bytes() + b"\0")
    done = run_cli("golden", "list", cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [row[:3] for row in rows] == [["tiny_mlp", "default", "1"], ["tiny_mlp", K1, "1"]]
    for row in rows:
        assert "onnxruntime-cpu" in row and "tiny_mlp.onnx: stale" in " ".join(row)


def test_committed_layout_still_reads(pytester: pytest.Pytester, models: Path) -> None:
    """The golden/ folders committed before input sets existed pass as they are."""
    shutil.copytree(REPO / "golden/tiny_mlp", pytester.path / "golden/tiny_mlp")
    before = _files(pytester.path / "golden")
    pytester.makepyfile(test_old=HEADER + GENERATED_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "unused golden" not in result.stdout.str()
    assert _files(pytester.path / "golden") == before


def test_legacy_user_inputs_golden_reads_until_refreshed(pytester: pytest.Pytester, models: Path) -> None:
    """Before input sets, a test's inputs= were recorded in the model's folder: still read, and
    after a refresh that old golden is reported unused."""
    pytester.makepyfile(test_sets=HEADER + ONES_TEST)
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden").assert_outcomes(passed=1)
    golden = pytester.path / "golden/tiny_mlp"
    for path in (golden / f"inputs-{K1}").iterdir():  # back to the layout before input sets
        path.rename(golden / path.name)
    (golden / f"inputs-{K1}").rmdir()
    meta = json.loads((golden / "meta.json").read_text())
    del meta["input_set"]
    (golden / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    legacy = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    legacy.assert_outcomes(passed=1)
    assert "unused golden" not in legacy.stdout.str(), "the legacy golden is in use"

    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden").assert_outcomes(passed=1)
    assert (golden / f"inputs-{K1}/meta.json").is_file()
    migrated = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    migrated.assert_outcomes(passed=1)
    migrated.stdout.fnmatch_lines(["pytest-edge: 1 unused golden set: tiny_mlp/default; remove it with "
                                   "pytest-edge golden prune"])
