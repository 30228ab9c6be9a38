"""Every code block of README.md and docs/*.md runs. Each page runs its blocks one of three ways:

- the walkthrough (docs/index.md): in order, in a new project with a new virtual environment;
- a page that runs in a folder (docs/export.md): its Python blocks in order as one script, in a
  fresh folder, with its file blocks (first line ``# path``) written there and its bash blocks run
  there; a block right after ``<!-- needs: MODULE -->`` runs only where MODULE imports (the page is
  run once more with it, or that run is skipped with the reason);
- every other page: bash blocks from the repository root (a ``text`` block right after one shows
  its output, whose last line must be printed; one after ``<!-- needs: MODULE -->`` runs only where
  MODULE imports), Python examples on their own (the same), test examples
  (``@pytest.mark.edge``) as tests on the shipped models, JSON as reports, TOML as configurations.
The first block of the README is the commands CI runs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from edge_helpers import UNUSED_PLUGINS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
WALKTHROUGH = ROOT / "docs/index.md"
IN_A_FOLDER = [ROOT / "docs/export.md"]
# Its bash blocks start a labgrid farm: tests/test_labgrid.py runs them, against a coordinator of their own.
BOARD_FARMS = ROOT / "docs/board-farms.md"
_BLOCK = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)
_NEEDS = re.compile(r"^<!-- needs: (\w+) -->$")


class Block(NamedTuple):
    page: Path
    lang: str
    code: str
    needs: str | None  # a module the block runs only with (``<!-- needs: MODULE -->`` above it)


def blocks(page: Path | None = None) -> list[Block]:
    """Every fenced block of one page, or of every page, in order."""
    found = []
    for path in [page] if page else PAGES:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            indent = len(match.group(1))
            code = "\n".join(line[indent:] for line in match.group(3).splitlines())
            needs = _NEEDS.search(text[:match.start()].rstrip().rpartition("\n")[2])
            found.append(Block(path, match.group(2), code, needs.group(1) if needs else None))
    return found


def _elsewhere(lang: str) -> list[Block]:
    """The blocks of one language on the pages that run from the repository root."""
    return [b for b in blocks() if b.lang == lang and b.page != WALKTHROUGH and b.page not in IN_A_FOLDER]


def test_every_block_has_a_language_and_the_first_commands_are_what_ci_runs() -> None:
    assert all(b.lang for b in blocks()), [b.page.name for b in blocks() if not b.lang]
    first = blocks(README)[0].code
    assert "bash scripts/demo.sh" in first and "bash scripts/test.sh" in first
    assert "bash scripts/test.sh" in (ROOT / ".ci/run").read_text()
    assert "scripts/demo.sh" in (ROOT / "scripts/test.sh").read_text()
    for page in PAGES:
        assert "../shared" not in page.read_text(), f"{page.name}: the documentation must stand alone"


def test_command_examples_run_from_the_repository_root() -> None:
    """A bash block (but the README's first) runs from the repository root with this environment's
    Python; a ``text`` block right after it shows its output, whose last line (the verdict) must be
    in what the command printed."""
    found = blocks()
    commands = [(i, b) for i, b in enumerate(found) if b in _elsewhere("bash") and b != blocks(README)[0]
                and b.page != BOARD_FARMS
                and not (b.needs and _missing(b.needs))]  # a block after <!-- needs: MODULE --> runs with it only
    assert commands
    for index, block in commands:
        code = block.code.replace(".venv/bin/python", shlex.quote(sys.executable))
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, env=_environment())
        assert done.returncode == 0, f"{block.page.name} block failed:\n{code}\n{done.stdout}{done.stderr}"
        after = found[index + 1] if index + 1 < len(found) else None
        if after and after.page == block.page and after.lang == "text":
            verdict = after.code.strip().splitlines()[-1]
            assert verdict in done.stdout, f"{block.page.name} shows {verdict!r}; the command printed:\n{done.stdout}"


def test_python_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # examples name files from the repository root
    examples = [b for b in _elsewhere("python") if "@pytest.mark.edge" not in b.code
                and not (b.needs and _missing(b.needs))]
    assert examples
    for block in examples:
        namespace: dict = {"__name__": "readme_example"}
        exec(compile(block.code, str(block.page), "exec"), namespace)  # noqa: S102 - our own docs
        if "backends" in namespace:  # an entry-point callable returns Backend objects
            from pytest_edge.backends import Backend

            assert all(isinstance(b, Backend) for b in namespace["backends"]())


@pytest.mark.timing
def test_test_examples_pass_on_the_shipped_models(pytester: pytest.Pytester, models: Path) -> None:
    """Blocks that are tests run as tests, against the real runtimes."""
    examples = [b.code for b in _elsewhere("python") if "@pytest.mark.edge" in b.code]
    assert examples
    for path in (ROOT / "fixtures/llm").glob("tiny_llm.*"):  # the decoder of docs/llm.md's @pytest.mark.edge_llm
        shutil.copy(path, models / path.name)
    for index, code in enumerate(examples):
        pytester.makepyfile(**{f"test_readme_example_{index}": code})
    result = pytester.runpytest_subprocess("--edge-update-golden", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-3000:]


def test_json_examples_are_reports_pytest_edge_reads(tmp_path: Path) -> None:
    from pytest_edge.report import load_report

    examples = [b.code for b in blocks() if b.lang == "json"]
    assert examples
    for index, code in enumerate(examples):
        path = tmp_path / f"example{index}.json"
        path.write_text(code)
        assert load_report(path).records


def test_toml_examples_are_configurations_pytest_edge_reads() -> None:
    import tomllib

    from pytest_edge.core.settings import OPTIONS, parse_devices

    examples = [b.code for b in blocks() if b.lang == "toml"]
    assert examples
    known = {o.ini for o in OPTIONS}
    for code in examples:
        options = tomllib.loads(code)["tool"]["pytest"]["ini_options"]
        assert set(options) <= known, set(options) - known
        if "edge_devices" in options:
            lines = [line for line in options["edge_devices"].splitlines() if line.strip()]
            assert parse_devices(lines)


def test_the_command_line_page_names_every_option() -> None:
    from pytest_edge.core.settings import OPTIONS

    page = (ROOT / "docs/cli.md").read_text()
    for option in OPTIONS:
        assert f"`{option.ini}`" in page, option.ini
        assert option.flag is None or f"`{option.flag}" in page, option.flag
    assert "`--edge-device" in page and "`--edge-update-golden`" in page


def _missing(module: str) -> str | None:
    return None if importlib.util.find_spec(module) else f"{module} is not installed here"


def _environment() -> dict[str, str]:
    """This environment, nothing of the outer pytest run, and the third-party plugins no block uses
    not loaded (edge_helpers.UNUSED_PLUGINS: 2 s a pytest)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID")}
    return {**env, "PYTEST_ADDOPTS": UNUSED_PLUGINS}


def _run(command: list[str], folder: Path, what: str) -> None:
    env = _environment()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"


def _run_in_a_folder(page: Path, folder: Path, optional: str | None) -> None:
    """The page's blocks in order, in ``folder``: consecutive Python blocks as one script in a fresh
    process (one namespace, as a reader runs them one after another), file blocks written, bash
    blocks run there with this environment's Python (for ``.venv/bin/python`` and ``pytest``)."""
    script: list[str] = []

    def run_script() -> None:
        if script:
            (folder / "_page.py").write_text("\n\n".join(script) + "\n")
            _run([sys.executable, "_page.py"], folder, f"the Python blocks of {page.name} (as _page.py)")
            script.clear()

    for block in blocks(page):
        if block.needs not in (None, optional):
            continue
        first = block.code.splitlines()[0]
        if block.lang in ("toml", "python") and re.match(r"# [\w./-]+\.(py|toml)$", first):
            path = folder / first[2:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code + "\n")
        elif block.lang == "python":
            script.append(block.code)
        elif block.lang == "bash":
            run_script()
            python = shlex.quote(sys.executable)
            code = re.sub(r"(?<![\w/])\.venv/bin/(pytest|python)\b",
                          lambda m: f"{python} -m pytest" if m.group(1) == "pytest" else python, block.code)
            _run(["bash", "-euo", "pipefail", "-c", code], folder, f"{page.name} block\n{code}")
    run_script()


@pytest.mark.parametrize("page", IN_A_FOLDER, ids=lambda p: p.name)
def test_pages_run_in_a_fresh_folder(page: Path, tmp_path: Path) -> None:
    for module in ("torch", "executorch", "onnxscript", "onnxruntime"):
        if _missing(module):
            pytest.skip(f"{page.name} exports with torch, ExecuTorch and onnxscript: {_missing(module)}")
    _run_in_a_folder(page, tmp_path, None)


@pytest.mark.parametrize(("page", "module"), [pytest.param(p, m, id=f"{p.name}-{m}") for p in IN_A_FOLDER
                                              for m in sorted({b.needs for b in blocks(p) if b.needs})])
def test_blocks_that_need_an_optional_package(page: Path, module: str, tmp_path: Path) -> None:
    """The page once more with the blocks that need ``module``, where it is installed."""
    for needed in ("torch", "executorch", "onnxscript", "onnxruntime", module):
        if _missing(needed):
            pytest.skip(f"the blocks of {page.name} that need {module} do not run: {_missing(needed)}")
    _run_in_a_folder(page, tmp_path, module)


def _requirements_of(name: str, extras: frozenset[str]) -> set[str]:
    """The distributions ``name[extras]`` requires, transitively, as installed here (canonical names)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(name, extras)]
    while todo:
        dist_name, dist_extras = todo.pop()
        if (canonicalize_name(dist_name), dist_extras) in seen:
            continue
        seen.add((canonicalize_name(dist_name), dist_extras))
        try:
            requires = importlib.metadata.distribution(dist_name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra})
                                                 for extra in dist_extras or {""}):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return {dist for dist, _ in seen}


def _dependency_view(target: Path) -> Path:
    """This environment's site-packages minus pytest-edge itself, for a new venv to see through a
    .pth file: the walkthrough then installs pytest-edge for real without downloading runtimes. The
    metadata of distributions ``pytest-edge[all]`` does not pull in is left out, so the venv has the
    pytest plugins an ``[all]`` install has (labgrid's, of the labgrid extra, not)."""
    from packaging.utils import canonicalize_name

    wanted = _requirements_of("pytest-edge", frozenset({"all"}))
    view = target / "deps"
    view.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(("pytest_edge", "__editable__", "_pytest_edge", "pytest-edge")):
            continue
        if entry.suffix == ".dist-info" and canonicalize_name(entry.name.split("-")[0]) not in wanted:
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
@pytest.mark.slow
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
    for _, lang, code, _ in blocks(WALKTHROUGH):
        first = code.splitlines()[0]
        if lang in ("toml", "python") and first.startswith("# "):
            path = project / first[2:].strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code + "\n")
            continue
        assert lang == "bash", f"a walkthrough block of {lang!r} must name its file on its first line"
        started = time.perf_counter()
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=project, env=env,
                              capture_output=True, text=True, timeout=900)
        # How long each step took (shown with -rP): docs/ci.md quotes these figures.
        lines = code.splitlines()
        print(f"{time.perf_counter() - started:6.1f} s  {next((x for x in lines if 'pytest' in x), lines[0])}")
        assert done.returncode == 0, f"walkthrough block failed:\n{code}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        outputs.append(done.stdout)
    text = "\n".join(outputs)
    assert (project / "golden/tiny_cnn/meta.json").is_file()
    assert "tiny_cnn-executorch" not in text or "failed" not in text
    assert re.search(r"onnxruntime-cpu\s+\S+ delegated", text), "inspect printed no coverage"
    assert "pytest-edge conformance" in text and "passed" in text
    # Every installed backend that reads tiny_cnn is gated (OpenVINO too where the venv has it).
    ab = re.search(r"merge gate \(A/B against \.\./main-models/models\): (\d+) compared, 0 regressed", text)
    stored = re.search(r"merge gate \(against stored numbers\): (\d+) compared, 0 regressed", text)
    assert ab and stored and int(ab.group(1)) >= 4 and ab.group(1) == stored.group(1), text
    installed = subprocess.run([str(project / ".venv/bin/python"), "-c",
                                "import pytest_edge, xdist, pytest_benchmark; print(pytest_edge.__file__)"],
                               capture_output=True, text=True, env=env, cwd=project)
    assert str(project / ".venv") in installed.stdout, installed.stdout + installed.stderr
