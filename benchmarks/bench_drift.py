"""Does the drift budget hold on an unchanged model? The drift example of docs/measurement.md, quiet and busy.

    .venv/bin/python benchmarks/bench_drift.py [--trials 8] [--loads quiet,busy] [--model tiny_mlp]

Copies a shipped model into a throw-away project with the drift test of docs/measurement.md
(``max_drift=1.5`` on onnxruntime-cpu, default settings: 3 fresh processes), records its golden,
then runs ``pytest --edge-report`` ``--trials`` times per load. "busy" is another process spinning on
one core for the whole run, as on a shared CI runner. Prints each run's drift (the geometric mean
over processes), the per-process figures and the machine probe's drift, and how many runs passed.
Wanted: every run passes; the spread of the figures is what an unchanged model reads.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = """
import pytest

@pytest.mark.edge(model="{model}", backends="onnxruntime-cpu", max_drift={budget})
def test_no_slowdown_while_running(edge_model):
    pass
"""


def run_once(project: Path) -> tuple[bool, dict]:
    report = project / "r.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--edge-report={report}"],
                          cwd=project, capture_output=True, text=True)
    record = json.loads(report.read_text())["records"][0]
    return done.returncode == 0, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--loads", default="quiet,busy")
    parser.add_argument("--model", default="tiny_mlp")
    parser.add_argument("--budget", type=float, default=1.5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "models").mkdir()
        shutil.copy(ROOT / "fixtures" / f"{args.model}.onnx", project / "models")
        (project / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\n")
        (project / "test_drift.py").write_text(TEST.format(model=args.model, budget=args.budget))
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--edge-update-golden"],
                       cwd=project, check=True, capture_output=True)
        for load in args.loads.split(","):
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
            try:
                passed, figures = 0, []
                for trial in range(args.trials):
                    ok, record = run_once(project)
                    passed += ok
                    figures.append(record["drift"])
                    per = ", ".join(f"{p['drift']:.3f}" if p.get("drift") else "-" for p in record["processes"])
                    probe = ", ".join(f"{p['probe_drift']:.3f}" if p.get("probe_drift") else "-"
                                      for p in record["processes"])
                    print(f"{load:5} trial {trial + 1}: drift {record['drift']:.3f} ({'passed' if ok else 'FAILED'}); "
                          f"processes {per}; probe {probe}", flush=True)
            finally:
                if spinner:
                    spinner.kill()
            present = [f for f in figures if f is not None]
            print(f"{load:5} {args.model} max_drift={args.budget}: {passed}/{args.trials} passed, drift "
                  f"{min(present):.3f}..{max(present):.3f}", flush=True)


if __name__ == "__main__":
    main()
