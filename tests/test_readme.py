"""Every code block of the README runs: the "Use it in your project" walkthrough in a new project
with a new virtual environment, the other Python examples on their own, the first commands by
what runs them (CI)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WALKTHROUGH = "## Use it in your project"
_BLOCK = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)


def blocks() -> list[tuple[str, str, str]]:
    """(section heading, language, code) of every fenced block, in order."""
    text = README.read_text()
    found = []
    for match in _BLOCK.finditer(text):
        headings = re.findall(r"^## .*$", text[:match.start()], re.M)
        indent = len(match.group(1))
        code = "\n".join(line[indent:] for line in match.group(3).splitlines())
        found.append((headings[-1] if headings else "", match.group(2), code))
    return found


def test_every_block_has_a_language_and_the_first_commands_are_what_ci_runs() -> None:
    assert all(lang for _, lang, _ in blocks()), "a block without a language cannot be run"
    first = blocks()[0][2]
    assert "bash scripts/demo.sh" in first and "bash scripts/test.sh" in first
    assert "bash scripts/test.sh" in (ROOT / ".ci/run").read_text()
    assert "scripts/demo.sh" in (ROOT / "scripts/test.sh").read_text()
    assert "../shared" not in README.read_text(), "the README must stand alone"


def test_command_examples_outside_the_walkthrough_run() -> None:
    """A bash block outside the walkthrough (and the first commands) runs from the repository root
    with this environment's Python; a ``text`` block right after it shows its output, whose last
    line (the verdict) must be in what the command printed."""
    found = blocks()
    commands = [(index, code) for index, (section, lang, code) in enumerate(found)
                if lang == "bash" and index > 0 and section != WALKTHROUGH]
    assert commands
    for index, code in commands:
        code = code.replace(".venv/bin/python", shlex.quote(sys.executable))
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"README block failed:\n{code}\n{done.stdout}{done.stderr}"
        if index + 1 < len(found) and found[index + 1][1] == "text":
            verdict = found[index + 1][2].strip().splitlines()[-1]
            assert verdict in done.stdout, f"README shows {verdict!r}; the command printed:\n{done.stdout}"


def test_python_examples_outside_the_walkthrough_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # examples name files from the repository root
    examples = [code for section, lang, code in blocks() if lang == "python" and section != WALKTHROUGH
                and "@pytest.mark.edge" not in code]
    assert examples
    for code in examples:
        namespace: dict = {"__name__": "readme_example"}
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
        if "backends" in namespace:  # an entry-point callable returns Backend objects
            from pytest_edge.backends import Backend

            assert all(isinstance(b, Backend) for b in namespace["backends"]())


@pytest.mark.timing
def test_test_examples_pass_on_the_shipped_models(pytester: pytest.Pytester, models: Path) -> None:
    """README blocks that are tests run as tests, against the real runtimes."""
    examples = [code for section, lang, code in blocks() if lang == "python" and section != WALKTHROUGH
                and "@pytest.mark.edge" in code]
    assert examples
    for index, code in enumerate(examples):
        pytester.makepyfile(**{f"test_readme_example_{index}": code})
    result = pytester.runpytest_subprocess("--edge-update-golden", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-3000:]


def test_json_examples_are_reports_pytest_edge_reads(tmp_path: Path) -> None:
    from pytest_edge.report import load_report

    examples = [code for _, lang, code in blocks() if lang == "json"]
    assert examples
    for index, code in enumerate(examples):
        path = tmp_path / f"example{index}.json"
        path.write_text(code)
        assert load_report(path)["records"]


def test_toml_examples_are_configurations_pytest_edge_reads() -> None:
    import tomllib

    from pytest_edge.settings import OPTIONS, parse_devices

    examples = [code for section, lang, code in blocks() if lang == "toml"]
    assert examples
    known = {o.ini for o in OPTIONS}
    for code in examples:
        options = tomllib.loads(code)["tool"]["pytest"]["ini_options"]
        assert set(options) <= known, set(options) - known
        if "edge_devices" in options:
            lines = [line for line in options["edge_devices"].splitlines() if line.strip()]
            assert parse_devices(lines)


def _dependency_view(target: Path) -> Path:
    """This environment's site-packages minus pytest-edge itself, for a new venv to see through a
    .pth file: the walkthrough then installs pytest-edge for real without downloading runtimes."""
    view = target / "deps"
    view.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(("pytest_edge", "__editable__", "_pytest_edge", "pytest-edge")):
            continue
        # pytest itself is installed for real: pip writes the .venv/bin/pytest script only then.
        if entry.name in ("pytest", "_pytest", "py.py") or re.match(r"pytest-\d", entry.name):
            continue
        if entry.suffix == ".pth":
            continue
        (view / entry.name).symlink_to(entry)
    return view


def _clone(target: Path) -> Path:
    """The repository's files as a clone has them (and those not committed yet, not ignored)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.mark.timing
@pytest.mark.skipif(shutil.which("git") is None, reason="the walkthrough's merge gate uses git worktree")
def test_walkthrough_from_an_empty_project(tmp_path: Path) -> None:
    from pytest_edge.backends import get_backend

    if get_backend("executorch").unavailable_reason():
        pytest.skip("the walkthrough installs [all], which includes ExecuTorch (not in this environment)")
    clone = _clone(tmp_path / "pytest-edge")
    project = tmp_path / "project"
    project.mkdir()
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    env = {**os.environ, "PYTEST_EDGE": str(clone), "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID"):
        env.pop(key, None)
    # The venv the first block creates, made beforehand only to give it the dependency view.
    subprocess.run([str(shims / "python3"), "-m", "venv", str(project / ".venv")], check=True)
    site = next((project / ".venv/lib").glob("python3*/site-packages"))
    (site / "edge-deps.pth").write_text(str(_dependency_view(tmp_path)) + "\n")

    outputs = []
    for section, lang, code in blocks():
        if section != WALKTHROUGH:
            continue
        first = code.splitlines()[0]
        if lang in ("toml", "python") and first.startswith("# "):
            path = project / first[2:].strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code + "\n")
            continue
        assert lang == "bash", f"a walkthrough block of {lang!r} must name its file on its first line"
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=project, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"README block failed:\n{code}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        outputs.append(done.stdout)
    text = "\n".join(outputs)
    assert (project / "golden/tiny_cnn/meta.json").is_file()
    assert "tiny_cnn-executorch" not in text or "failed" not in text
    assert re.search(r"onnxruntime-cpu\s+\S+ delegated", text), "inspect printed no coverage"
    assert "pytest-edge conformance" in text and "passed" in text
    assert re.search(r"merge gate \(A/B against \.\./main-models/models\): 4 compared, 0 regressed", text), text
    assert re.search(r"merge gate \(against stored numbers\): 4 compared, 0 regressed", text)
    installed = subprocess.run([str(project / ".venv/bin/python"), "-c",
                                "import pytest_edge, xdist, pytest_benchmark; print(pytest_edge.__file__)"],
                               capture_output=True, text=True, env=env, cwd=project)
    assert str(project / ".venv") in installed.stdout, installed.stdout + installed.stderr
