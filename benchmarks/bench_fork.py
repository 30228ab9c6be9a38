"""Forked vs spawned measuring processes, side by side in one run (docs/measurement.md).

1. Start: seconds from asking for a fresh measuring worker to its hello, spawned (a new
   interpreter imports the runtime) vs forked (the backend's zygote forks one), per backend; the
   zygote's own start (one import) is printed apart.
2. Agreement: the same fixture model (tiny_cnn) measured in fresh processes, forked and spawned
   alternately; the median of the per-process P50s of each, their ratio, and the peak memory,
   load time and first inference of each.
3. A gate over four ExecuTorch models: wall time of a whole pytest run in A/B mode (every model
   against a baseline twin, 3 fresh processes per artifact), --edge-fork=off vs on; with
   ``--before REV`` also spawned with the package as it was at git revision REV (the same run, the
   same machine: "today's time" of a change).

    .venv/bin/python benchmarks/bench_fork.py [--processes 6] [--gate-rounds 1] [--skip-gate] [--before REV]
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_edge.worker.pool import WorkerPool  # noqa: E402
from pytest_edge.worker.protocol import Load, Measure  # noqa: E402

FIXTURES = ROOT / "fixtures"
BACKENDS = {"onnxruntime-cpu": "tiny_cnn.onnx", "litert": "tiny_cnn.tflite", "executorch": "tiny_cnn.pte"}
CNN_INPUT = [np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)]
# Four ExecuTorch models: the three fixture models and a renamed copy of one (a model of its own
# to pytest-edge: its own tests, goldens and measurements).
GATE_MODELS = {"tiny_cnn": "tiny_cnn", "tiny_mlp": "tiny_mlp", "two_io": "two_io", "tiny_cnn_b": "tiny_cnn"}
GATE_TEST = """
import pytest
{tests}
"""


def one_process(pool: WorkerPool, backend: str, model: Path, spawn: bool) -> dict:
    start = time.perf_counter()
    worker = pool.fresh(backend, spawn=spawn)
    worker.launch()
    worker.wait_ready()
    started = time.perf_counter() - start
    try:
        loaded = worker.request(Load("m", str(model), 1, {}, with_coverage=False), artifact=str(model))
        result = worker.request(Measure("m", CNN_INPUT, 5, 50, 0.25), artifact=str(model))
    finally:
        worker.close()
    return {"start_s": started, "p50": result["latency_ms"]["p50"], "peak": result["peak_memory_mb"],
            "load": loaded["load_ms"], "first": result["first_inference_ms"]}


def processes_side_by_side(processes: int) -> None:
    measured: dict[str, tuple[float, dict[bool, list[dict]]]] = {}
    for backend, model in BACKENDS.items():
        pool = WorkerPool(True, 600.0, on_crash=lambda b: None, fork="on")
        try:
            zygote_start = time.perf_counter()
            pool.fresh(backend).zygote.start()  # type: ignore[union-attr]
            zygote_s = time.perf_counter() - zygote_start
            runs: dict[bool, list[dict]] = {True: [], False: []}
            for index in range(processes):  # alternate, so both meet the same machine
                for spawn in (index % 2 == 0, index % 2 == 1):
                    runs[spawn].append(one_process(pool, backend, FIXTURES / model, spawn))
        finally:
            pool.close()
        measured[backend] = (zygote_s, runs)

    def median(runs: dict[bool, list[dict]], spawn: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs[spawn])

    def spread(runs: dict[bool, list[dict]], spawn: bool) -> float:
        p50s = [r["p50"] for r in runs[spawn]]
        return max(p50s) / min(p50s)

    print(f"Measuring-process start (launch to hello), median of {processes} of each:\n")
    print("| backend | zygote start (one import) s | spawned start s | forked start s | spawned / forked |")
    print("|---|---|---|---|---|")
    for backend, (zygote_s, runs) in measured.items():
        spawned, forked = median(runs, True, "start_s"), median(runs, False, "start_s")
        print(f"| {backend} | {zygote_s:.2f} | {spawned:.3f} | {forked:.3f} | {spawned / forked:.0f}x |")
    print(f"\nAgreement on tiny_cnn, {processes} forked and {processes} spawned processes alternately, medians "
          "(spread: largest over smallest process P50):\n")
    print("| backend | P50 ms spawned | P50 ms forked | forked / spawned | spread spawned | spread forked | "
          "peak MB spawned | peak MB forked | load ms spawned | load ms forked | 1st inference ms spawned | "
          "1st inference ms forked |")
    print("|---" * 12 + "|")
    for backend, (_, runs) in measured.items():
        row = [median(runs, True, "p50"), median(runs, False, "p50")]
        print(f"| {backend} | {row[0]:.4f} | {row[1]:.4f} | {row[1] / row[0]:.3f} | {spread(runs, True):.3f} | "
              f"{spread(runs, False):.3f} | {median(runs, True, 'peak'):.2f} | {median(runs, False, 'peak'):.2f} | "
              f"{median(runs, True, 'load'):.1f} | {median(runs, False, 'load'):.1f} | "
              f"{median(runs, True, 'first'):.3f} | {median(runs, False, 'first'):.3f} |", flush=True)


def gate_wall_time(rounds: int, before: str | None) -> None:
    project = Path(tempfile.mkdtemp(prefix="edge-fork-gate-"))
    earlier = Path(tempfile.mkdtemp(prefix="edge-fork-before-"))
    try:
        if before:  # the package at that revision, first on the path of its pytest runs
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", before, "pytest_edge"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(earlier)], input=archive, check=True)
        for folder in ("models", "base"):
            (project / folder).mkdir()
            for name, source in GATE_MODELS.items():
                for suffix in (".onnx", ".pte"):  # the .onnx records the golden (the reference backend)
                    shutil.copy(FIXTURES / f"{source}{suffix}", project / folder / f"{name}{suffix}")
        (project / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\n")
        tests = "\n".join(f"@pytest.mark.edge(model={name!r}, backends=['executorch'])\ndef test_{name}(edge_model):\n"
                          "    pass\n" for name in GATE_MODELS)
        (project / "test_gate.py").write_text(GATE_TEST.format(tests=tests))
        run(project, "--edge-update-golden")
        times: dict[str, list[float]] = {"before": [], "off": [], "on": []}
        for _ in range(rounds):
            for fork in ("before", "off", "on") if before else ("off", "on"):
                start = time.perf_counter()
                run(project, "--edge-measure", "--edge-baseline-models=base",
                    f"--edge-fork={'off' if fork == 'before' else fork}", path=earlier if fork == "before" else None)
                times[fork].append(time.perf_counter() - start)
        spawned, forked = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"\nExecuTorch A/B gate over {len(GATE_MODELS)} models (3 fresh processes per artifact, "
              f"{2 * 3 * len(GATE_MODELS)} in all), wall time of the pytest run, median of {rounds}:")
        print("| measuring processes | wall time s |\n|---|---|")
        if before:
            print(f"| spawned, pytest-edge at {before} | {statistics.median(times['before']):.1f} |")
        print(f"| spawned (--edge-fork=off) | {spawned:.1f} |\n| forked (--edge-fork=on) | {forked:.1f} |")
        print(f"forked / spawned: {forked / spawned:.2f}")
        if before:
            old = statistics.median(times["before"])
            print(f"spawned / spawned at {before}: {spawned / old:.2f}; forked / spawned at {before}: {forked / old:.2f}")
    finally:
        shutil.rmtree(project, ignore_errors=True)
        shutil.rmtree(earlier, ignore_errors=True)


def run(project: Path, *args: str, path: Path | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path)] + [os.environ.get("PYTHONPATH", "")])} \
        if path else None
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_gate.py", *args],
                          cwd=project, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6, help="fresh processes of each kind per backend")
    parser.add_argument("--gate-rounds", type=int, default=1)
    parser.add_argument("--skip-gate", action="store_true")
    parser.add_argument("--before", metavar="REV", help="also time the spawned gate with the package at this git revision")
    args = parser.parse_args()
    processes_side_by_side(args.processes)
    if not args.skip_gate:
        gate_wall_time(args.gate_rounds, args.before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
