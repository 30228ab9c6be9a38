"""What does one golden check cost on top of pytest itself? Wall time of a whole pytest run with
one ORT golden check (tiny_mlp on onnxruntime-cpu, golden recorded beforehand) against the same
pytest with one empty test, alternating, in one throw-away project. Prints both medians, the
difference (goal: <= 0.3 s) and the ratio.

    .venv/bin/python benchmarks/bench_fixed_cost.py [--rounds 10]
"""

from __future__ import annotations

import argparse
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

@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
def test_mlp(edge_model):
    pass
"""
BARE_TEST = "def test_empty():\n    pass\n"


def timed(project: Path, test_file: str, *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, *args],
                          cwd=project, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="edge-fixed-cost-"))
    (project / "models").mkdir()
    shutil.copy(FIXTURES / "tiny_mlp.onnx", project / "models")
    (project / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\n")
    (project / "test_edge.py").write_text(EDGE_TEST)
    (project / "test_bare.py").write_text(BARE_TEST)
    timed(project, "test_edge.py", "--edge-update-golden")
    timed(project, "test_bare.py")  # warm the file cache for both
    edge, bare = [], []
    for _ in range(args.rounds):
        bare.append(timed(project, "test_bare.py"))
        edge.append(timed(project, "test_edge.py"))
    shutil.rmtree(project)
    e, b = statistics.median(edge), statistics.median(bare)
    print(f"bare pytest, one empty test:  median {b:.3f} s over {args.rounds} runs")
    print(f"one ORT golden check:         median {e:.3f} s over {args.rounds} runs")
    print(f"fixed cost: {e - b:+.3f} s (goal <= 0.300 s); ratio {e / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
