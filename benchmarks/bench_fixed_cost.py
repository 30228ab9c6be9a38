"""What does one golden check cost on top of pytest itself? Whole pytest runs with one ORT golden
check (tiny_mlp on onnxruntime-cpu, golden recorded beforehand) against the same pytest with one
empty test, alternating, in one throw-away project: P3, their difference (goal: <= 0.3 s on a quiet
machine). Then P2: one pytest with 20 such checks (20 copies of the model) against 20
``polygraphy run --onnxrt`` processes, one per model (goal: <= 0.05), where Polygraphy is
installed. Each figure twice: wall clock, and CPU time (user + system of the whole process tree,
the worker included), the one that means something on a loaded machine.

    .venv/bin/python benchmarks/bench_fixed_cost.py [--rounds 10] [--tree DIR --tree DIR ...]

``--tree DIR`` (twice or more): P3 of each tree (a folder holding a ``pytest_edge`` package, put
first on ``PYTHONPATH``, e.g. ``git archive REV pytest_edge | tar -x -C DIR``), their runs
alternating round by round against one bare pytest, so that a change is read side by side in one
run, not across runs the machine's load moves apart.

Run it with and without PYTHONDONTWRITEBYTECODE=1 (without, the second run reads the bytecode the
first wrote). Which plugins pytest loads is the environment's: in this repository's .venv,
hypothesis, labgrid and Hydra make a bare pytest ~2 s of CPU, more than a Polygraphy process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
EDGE_TEST = """
import pytest

@pytest.mark.edge(model="{model}", backends="onnxruntime-cpu")
def test_{model}(edge_model):
    pass
"""
BARE_TEST = "def test_empty():\n    pass\n"


def timed(project: Path, argv: list[str], tree: str | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the process and the children it waited for); ``tree``:
    a folder put first on PYTHONPATH (its pytest_edge is the one imported)."""
    env = None
    if tree is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)}
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    output = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{output.decode(errors='replace')}")
    return elapsed, usage.ru_utime + usage.ru_stime


def pytest_run(project: Path, *args: str, tree: str | None = None) -> tuple[float, float]:
    return timed(project, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], tree)


def polygraphy() -> list[str] | None:
    """How to start Polygraphy's command line with this interpreter, if it is installed."""
    try:
        import polygraphy  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-c", "import sys; from polygraphy.tools import main; sys.exit(main())"]


def medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tree", action="append", default=[], help="P3 of this tree, alternating with the others")
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="edge-fixed-cost-"))
    (project / "models").mkdir()
    models = [f"m{i:02d}" for i in range(20)]
    for model in ["tiny_mlp", *models]:
        shutil.copy(FIXTURES / "tiny_mlp.onnx", project / "models" / f"{model}.onnx")
    (project / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\n")
    (project / "test_edge.py").write_text(EDGE_TEST.format(model="tiny_mlp"))
    (project / "test_edge20.py").write_text("".join(EDGE_TEST.format(model=m) for m in models))
    (project / "test_bare.py").write_text(BARE_TEST)
    if len(args.tree) > 1:
        return compare_trees(project, args.tree, args.rounds)
    poly = polygraphy()
    pytest_run(project, "test_edge.py", "test_edge20.py", "--edge-update-golden")
    pytest_run(project, "test_bare.py")  # warm the file cache
    bare, edge, edge20, polys = [], [], [], []
    for _ in range(args.rounds):
        bare.append(pytest_run(project, "test_bare.py"))
        edge.append(pytest_run(project, "test_edge.py"))
        if poly is not None:
            edge20.append(pytest_run(project, "test_edge20.py"))
            polys.append(timed(project, [*poly, "run", "models/m00.onnx", "--onnxrt"]))
    shutil.rmtree(project)
    (bw, bc), (ew, ec) = medians(bare), medians(edge)
    print(f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"bare pytest, one empty test:  median {bw:.3f} s wall, {bc:.3f} s CPU")
    print(f"one ORT golden check:         median {ew:.3f} s wall, {ec:.3f} s CPU")
    print(f"P3 fixed cost: {ew - bw:+.3f} s wall, {ec - bc:+.3f} s CPU (goal <= 0.300 s); wall ratio {ew / bw:.2f}")
    if poly is None:
        print("P2: Polygraphy is not installed here (pip install polygraphy)")
        return 0
    (tw, tc), (pw, pc) = medians(edge20), medians(polys)
    print(f"20 ORT checks in one pytest:  median {tw:.3f} s wall, {tc:.3f} s CPU; one polygraphy run "
          f"{pw:.3f} s wall, {pc:.3f} s CPU")
    print(f"P2: {tw / (20 * pw):.3f} wall, {tc / (20 * pc):.3f} CPU of 20 Polygraphy processes (goal <= 0.05); "
          f"(20 checks - bare pytest) / 20: {(tw - bw) / 20 * 1000:+.0f} ms wall, {(tc - bc) / 20 * 1000:+.0f} ms CPU")
    return 0


def compare_trees(project: Path, trees: list[str], rounds: int) -> int:
    """P3 of each tree, side by side: a bare pytest, then one check on each tree (in turn reversed
    every other round), for ``rounds`` rounds; medians, and each tree's wall times."""
    for tree in trees:  # each tree records its own golden, then runs once (bytecode, file cache)
        pytest_run(project, "test_edge.py", "--edge-update-golden", tree=tree)
        pytest_run(project, "test_edge.py", tree=tree)
    bare: list[tuple[float, float]] = []
    edge: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for index in range(rounds):
        bare.append(pytest_run(project, "test_bare.py"))
        for tree in trees if index % 2 == 0 else trees[::-1]:
            edge[tree].append(pytest_run(project, "test_edge.py", tree=tree))
    shutil.rmtree(project)
    bw, bc = medians(bare)
    print(f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}, {rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}; bare pytest median {bw:.3f} s wall, {bc:.3f} s CPU")
    for tree, samples in edge.items():
        ew, ec = medians(samples)
        walls = " ".join(f"{w:.2f}" for w, _ in sorted(samples))
        print(f"{tree}: P3 {ew - bw:+.3f} s wall, {ec - bc:+.3f} s CPU (goal <= 0.300 s); its walls: {walls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
