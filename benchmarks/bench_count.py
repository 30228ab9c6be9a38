"""Counted vs wall-clock A/B gate, side by side: which small changes each one catches on a busy machine.

    .venv/bin/python benchmarks/bench_count.py [--trials 8] [--load busy|quiet] [--threshold 1%]

Builds a throw-away project with one ONNX MLP (batch 16, 128 -> 1600 -> 10, about 0.5 ms on
onnxruntime-cpu) as the baseline (``main/``) and twins that do 1.00x, 1.02x, 1.05x, 1.2x and 1.5x
its work (the hidden layer that much wider, in whole 16-column tiles of ONNX Runtime's GEMM), then
runs, ``--trials`` times, both gates over all five twins:

- counted:    ``pytest --edge-count=instructions --edge-baseline-models=main -o edge_count_processes=1``
              (instructions per inference under callgrind; threshold --edge-count-threshold, 1 %)
- wall-clock: ``pytest --edge-baseline-models=main`` (the defaults: 3 A/B pairs of fresh processes,
              P50 gated at --edge-max-regression, 10 %, re-measured before it fails)

"busy" is another process spinning on one core for the whole run, as on a shared CI runner.
Prints, per twin, the counted instruction ratio and the wall-clock P50 ratio (medians over the
trials) and how many trials each gate failed. Wanted: the unchanged twin never fails; counted mode
catches 1.02x and above every time; wall clock catches what its threshold allows.
Needs Valgrind (apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.edge_helpers import write_mlp  # noqa: E402  (the twins of the gate tests)

HIDDEN = 1600  # 100 tiles of 16 columns: every twin below is whole tiles
TWINS = {"x100": 1.00, "x102": 1.02, "x105": 1.05, "x120": 1.2, "x150": 1.5}
TEST = "".join(f"""
@pytest.mark.edge(model="{name}", backends="onnxruntime-cpu")
def test_{name}(edge_model):
    pass
""" for name in TWINS)


def gate(project: Path, *args: str) -> dict[str, dict]:
    """One pytest run of the A/B gate over every twin; its records by model name."""
    report = project / "r.json"
    report.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--edge-baseline-models=main", f"--edge-report={report}", *args],
                          cwd=project, capture_output=True, text=True)
    if done.returncode not in (0, 1) or not report.is_file():
        print(done.stdout[-3000:], done.stderr[-3000:])
        raise SystemExit(f"pytest exited {done.returncode}")
    return {r["model"]["name"]: r for r in json.loads(report.read_text())["records"]}


def p50_ratio(record: dict) -> float | None:
    twin = (record.get("baseline_check") or {}).get("twin") or {}
    mine, theirs = (record.get("latency_ms") or {}).get("p50"), (twin.get("latency_ms") or {}).get("p50")
    return mine / theirs if mine and theirs else None


def table(seen: dict[str, dict[str, list]], trials: int, args: argparse.Namespace) -> None:
    print(f"\n{trials} trials, {args.load}; counted threshold {args.threshold}, wall clock the default")
    print(f"{'twin':6} {'instructions':>12} {'counted gate':>13} {'P50 (wall)':>11} {'wall-clock gate':>16}")
    for name, work in TWINS.items():
        row = seen[name]
        count = [r for r in row["count"] if r is not None]
        clock = [r for r in row["clock"] if r is not None]
        print(f"{work:.2f}x  {(np.median(count) if count else float('nan')):>11.4f}x "
              f"{sum(row['count_failed']):>5}/{trials} fail "
              f"{(np.median(clock) if clock else float('nan')):>10.3f}x {sum(row['clock_failed']):>8}/{trials} fail",
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--load", choices=("busy", "quiet"), default="busy")
    parser.add_argument("--threshold", default="1%", help="counted mode's threshold (--edge-count-threshold)")
    parser.add_argument("--keep", action="store_true", help="keep the project folder and print its path")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("counted mode needs Valgrind: apt-get install valgrind")
    project = Path(tempfile.mkdtemp(prefix="edge-count-"))
    for folder in ("main", "new"):
        (project / folder).mkdir()
    for name, work in TWINS.items():
        write_mlp(project / "main" / f"{name}.onnx", HIDDEN)
        write_mlp(project / "new" / f"{name}.onnx", round(HIDDEN * work / 16) * 16)
    (project / "test_twins.py").write_text("import pytest\n" + TEST)
    (project / "pytest.ini").write_text("[pytest]\nedge_model_dirs = new\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--edge-update-golden"],
                          cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    seen: dict[str, dict[str, list]] = {name: {"count": [], "clock": [], "count_failed": [], "clock_failed": []}
                                        for name in TWINS}
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.load == "busy" else None
    try:
        for trial in range(args.trials):
            counted = gate(project, "--edge-count=instructions", "-o", "edge_count_processes=1",
                           f"--edge-count-threshold={args.threshold}")
            clocked = gate(project)
            for name in TWINS:
                seen[name]["count"].append(counted[name]["baseline_check"].get("instructions_ratio"))
                seen[name]["count_failed"].append(counted[name]["verdict"] == "failed")
                seen[name]["clock"].append(p50_ratio(clocked[name]))
                seen[name]["clock_failed"].append(clocked[name]["verdict"] == "failed")
            table(seen, trial + 1, args)  # so far: a run cut short still says what it saw
    finally:
        if spinner is not None:
            spinner.kill()
    if args.keep:
        print("project:", project)
    else:
        shutil.rmtree(project, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
