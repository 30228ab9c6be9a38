"""The CI files of examples/ci/ run: each `run:` step of the GitHub Actions workflow and each `script:`
line of the GitLab CI job, in order, in a fresh project (a git repository with a shipped model, a test
and its golden, a pull-request branch and an `origin` holding main), with this environment's Python.

Not run, by design: `pip install` lines (they need the network; this environment already has
pytest-edge and the runtimes) and `uses:` actions (checkout, caches, artifact upload: GitHub's own
code). What the actions would upload must exist afterwards."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from edge_helpers import UNUSED_PLUGINS

yaml = pytest.importorskip("yaml", reason="pyyaml (the test extra) parses the CI files")

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "examples/ci"
# tiny_mlp.onnx on ONNX Runtime, and on OpenVINO where it is installed.
GATE_LINE = re.compile(r"merge gate \(A/B against \.\./base/models\): [12] compared, 0 regressed")

TEST = '''\
import pytest


@pytest.mark.edge(model="tiny_mlp")
def test_tiny_mlp(edge_model):
    pass
'''


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)


def _project(tmp_path: Path, env: dict[str, str], kind: str) -> Path:
    """A project as a pull request's CI job checks it out: main has the model, its golden and a test;
    origin (a bare repository beside it) has main; HEAD is a branch off main. ``kind``: configured in
    a pyproject.toml by hand, or made by ``pytest-edge init`` (a pytest.ini, its own test file)."""
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    shutil.copy(ROOT / "fixtures/tiny_mlp.onnx", project / "models")
    (project / ".gitignore").write_text(".edge/\n.cache/\n")
    if kind == "init":
        done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "init"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)
        assert (project / "pytest.ini").is_file() and not (project / "pyproject.toml").exists()
    else:
        (project / "tests").mkdir()
        (project / "tests/test_models.py").write_text(TEST)
        (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\nedge_model_dirs = ["models"]\n'
                                                'edge_golden_dir = "golden"\n')
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--edge-update-golden"],
                              cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (project / ".github/workflows").mkdir(parents=True)  # where the workflow's comment says to copy it
    shutil.copy(CI / "github-actions.yml", project / ".github/workflows/edge.yml")
    _git(project, "init", "--quiet", "--initial-branch=main")
    _git(project, "add", "-A")
    _git(project, "commit", "--quiet", "-m", "model, golden, test")
    _git(tmp_path, "clone", "--quiet", "--bare", str(project), "origin.git")
    _git(project, "remote", "add", "origin", str(tmp_path / "origin.git"))
    _git(project, "fetch", "--quiet", "origin")
    _git(project, "checkout", "--quiet", "-b", "my-change")
    return project


def _environment(tmp_path: Path) -> dict[str, str]:
    """This environment's Python first on PATH (`python -m pytest` is ours), git identity, nothing of
    the outer pytest run."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(tmp_path / "home")}
    for key in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "VIRTUAL_ENV"):
        env.pop(key, None)
    # 200 timed runs per process instead of 0.25 s of them keep this test short (the gate's own
    # reliability is benchmarks/bench_gate.py's and tests/test_stats_and_gate.py's to show).
    # The third-party plugins no CI step uses are not loaded (edge_helpers.UNUSED_PLUGINS: 2 s a pytest).
    env["PYTEST_ADDOPTS"] = f"-o edge_runs=200 -o edge_min_time=0s {UNUSED_PLUGINS}"
    return env


def _without_pip(script: str) -> str:
    return "\n".join(line for line in script.splitlines() if "pip install" not in line)


def _run(script: str, project: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", _without_pip(script)], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"CI step failed:\n{script}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


KINDS = pytest.mark.parametrize("kind", ["pyproject", "init"])
NEEDS_GIT = pytest.mark.skipif(shutil.which("git") is None, reason="the CI files' A/B gate uses git worktree")


@NEEDS_GIT
@KINDS
def test_github_actions_workflow_runs_on_a_pull_request(tmp_path: Path, kind: str) -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    job = workflow["jobs"]["conformance"]
    steps = job["steps"]
    assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in steps)
    assert job["timeout-minutes"] <= 120 and "@$PYTEST_EDGE_REF" in next(
        line for step in steps for line in step.get("run", "").splitlines() if "pytest-edge[all]" in line)
    checkout = next(step for step in steps if step.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["lfs"] is True  # docs/export.md suggests Git LFS for models
    env = {**_environment(tmp_path), **workflow["env"]}
    project = _project(tmp_path, env, kind)
    # setup-python fails where its cache key's file does not exist (pyproject.toml in an init project).
    setup = next(step for step in steps if step.get("uses", "").startswith("actions/setup-python"))
    for path in setup["with"]["cache-dependency-path"].split():
        assert (project / path).is_file(), f"cache-dependency-path {path} does not exist in a {kind} project"
    summary = tmp_path / "step-summary.md"
    env.update(GITHUB_EVENT_NAME="pull_request", GITHUB_BASE_REF="main", GITHUB_STEP_SUMMARY=str(summary))
    printed = "".join(_run(step["run"], project, env) for step in steps if "run" in step)
    assert GATE_LINE.search(printed), printed
    assert re.search(r"pytest-edge conformance: [12] passed", summary.read_text())
    uploaded = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact"))
    for path in uploaded["with"]["path"].split():
        assert (project / path).is_file(), f"{path} is uploaded but was not written"


@NEEDS_GIT
@KINDS
def test_gitlab_ci_job_runs_on_a_merge_request(tmp_path: Path, kind: str) -> None:
    job = yaml.safe_load((CI / "gitlab-ci.yml").read_text())["edge"]
    assert job["timeout"] == "1h"
    env = _environment(tmp_path)
    project = _project(tmp_path, env, kind)
    env.update(CI_PROJECT_DIR=str(project), CI_PIPELINE_SOURCE="merge_request_event",
               CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main")
    for name, value in job["variables"].items():
        env[name] = os.path.expandvars(value.replace("$CI_PROJECT_DIR", str(project)))
    printed = "".join(_run(line, project, env) for line in job["script"])
    assert GATE_LINE.search(printed), printed
    assert re.search(r"pytest-edge conformance: [12] passed", (project / ".edge/summary.md").read_text())
    for path in [*job["artifacts"]["paths"], job["artifacts"]["reports"]["junit"]]:
        assert (project / path).is_file(), f"{path} is kept as an artifact but was not written"
