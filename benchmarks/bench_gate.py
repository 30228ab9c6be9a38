"""Does the merge gate cry wolf, and what does it catch? Unchanged and 1.1x/1.2x/1.5x slower models gated at 10 %.

    .venv/bin/python benchmarks/bench_gate.py [--trials 8] [--modes stored,ab] [--loads quiet,busy]
        [--ratios 1.0,1.1,1.2,1.5] [--extra '--edge-processes=5']

Builds a throw-away project with two ONNX MLPs (about 0.5 ms and 25 us on onnxruntime-cpu) and
their slower twins (hidden layer ``--ratios`` wider, same signature; 1.0 is the unchanged model),
records a baseline report on a quiet machine, then runs the documented gate lines (docs/index.md)
``--trials`` times per (mode, load, twin), timing each run:

- stored: ``pytest --edge-baseline=base.json --edge-max-regression=10%``
- ab:     ``pytest --edge-baseline-models=main --edge-max-regression=10%`` (both artifacts in one job)

"busy" is another process spinning on one core for the whole run, as on a shared CI runner.
Prints, per row, the P50 ratio the first measurement read, how many runs passed, failed, and were
inconclusive (passed with a warning), how many times each model was caught, and the median seconds
per pytest run. Wanted: unchanged never fails; 1.2x and more is caught every time in A/B mode
(docs/gate.md, "Catching 1.2x"), 1.5x in stored mode on a quiet machine.

``--llm`` gates decoders instead (``@pytest.mark.edge_llm``, A/B): a 4-layer decoder of
fixtures/make_llm.py's family (d_model 128) against twins with ``--ratios`` times the layers
(1.5: 6 layers), TPOT/TTFT P50 at 10 %, quiet and busy: the busy-machine rule of tensor models
(the CPU probe and the fastest whole generation of each process) applies to them unchanged.

``--shipped`` runs the walkthrough's (docs/index.md) stored gate instead: the shipped tiny_cnn (.onnx,
.tflite, .pte) on every backend, unchanged, against a baseline from a run just before (the case a
CI run of this repository once failed: LiteRT and ExecuTorch "+20 % to +50 %" slower).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TEST = """
import pytest

@pytest.mark.edge(model="mlp_small", backends="onnxruntime-cpu")
def test_small(edge_model):
    pass

@pytest.mark.edge(model="mlp_large", backends="onnxruntime-cpu")
def test_large(edge_model):
    pass
"""
# (name, batch, input width, hidden width) for about 30 us and 0.5 ms on one core. Compute grows
# with the hidden width, weights stay small (< 1 MB), so the slower twins regress in latency, not
# in peak memory (which the gate would catch on its own, load or not).
MODELS = [("mlp_small", 8, 128, 768), ("mlp_large", 128, 256, 1024)]


def write_mlp(path: Path, batch: int, width: int, hidden: int, extra: float = 1.0) -> None:
    """x -> MatMul -> Relu -> MatMul -> y; ``extra`` widens the hidden layer (same outputs' shape)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    h = int(hidden * extra)
    w1 = numpy_helper.from_array((rng.standard_normal((width, h)) / np.sqrt(width)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((h, 10)) / np.sqrt(h)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def pytest_run(project: Path, models: str, *args: str) -> tuple[int, str]:
    (project / "pytest.ini").write_text(f"[pytest]\nedge_model_dirs = {models}\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=project, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--modes", default="stored,ab")
    parser.add_argument("--loads", default="quiet,busy")
    parser.add_argument("--ratios", default="1.0,1.1,1.2,1.5", metavar="X,Y",
                        help="twins' hidden layer this much wider (1.0: the unchanged model gated against itself)")
    parser.add_argument("--keep", action="store_true", help="keep the project folder and print its path")
    parser.add_argument("--shipped", action="store_true",
                        help="tiny_cnn on every backend, unchanged, with the walkthrough's gate commands (--modes)")
    parser.add_argument("--llm", action="store_true",
                        help="decoders under @pytest.mark.edge_llm, A/B, twins with --ratios times the layers")
    parser.add_argument("--gate-p99", default="", metavar="PCT",
                        help="also gate P99 in A/B mode with this threshold (--edge-gate-p99), e.g. 25%%")
    parser.add_argument("--extra", default="", metavar="ARGS",
                        help="more pytest options for every gate run, e.g. '--edge-processes=5'")
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="edge-gate-"))
    extra = [f"--edge-gate-p99={args.gate_p99}"] if args.gate_p99 else []
    extra += args.extra.split()
    if args.shipped:
        return shipped(project, args.trials, args.loads.split(","), args.modes.split(","), extra)
    if args.llm:
        return decoders(project, args.trials, args.loads.split(","), [float(r) for r in args.ratios.split(",")], extra)
    ratios = [float(r) for r in args.ratios.split(",")]
    folders = {ratio: "main" if ratio == 1.0 else f"slow_{ratio:g}" for ratio in ratios}
    for folder, ratio in {"main": 1.0, **{f: r for r, f in folders.items()}}.items():
        (project / folder).mkdir(exist_ok=True)
        for name, batch, width, hidden in MODELS:
            write_mlp(project / folder / f"{name}.onnx", batch, width, hidden, ratio)
    (project / "test_gate.py").write_text(TEST)
    for folder in {"main", *folders.values()}:  # each variant's own golden (a wider one computes other numbers)
        code, out = pytest_run(project, folder, "--edge-update-golden", f"--edge-golden-dir=golden_{folder}")
        assert code == 0, out
    code, out = pytest_run(project, "main", "--edge-golden-dir=golden_main", "--edge-measure",
                           "--edge-report=base.json")
    assert code == 0, out
    base = json.loads((project / "base.json").read_text())
    print("baseline:", ", ".join(f"{r['model']['name']} P50 {r['latency_ms']['p50'] * 1000:.1f} us "
                                 f"(process spread {r['process_spread']:.2f}x)" for r in base["records"]))
    print("pytest options:", " ".join(["--edge-max-regression=10%", *extra]))
    names = [name for name, *_ in MODELS]
    print(f"{'mode':7} {'load':6} {'twin':8} {'P50 ratio':>9} {'passed':>6} {'failed':>6} {'inconclusive':>12}  "
          f"{'caught per model':20} {'s/trial':>8}")
    for mode in args.modes.split(","):
        for load in args.loads.split(","):
            spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None)
            try:
                for ratio, folder in folders.items():
                    counts = {"passed": 0, "failed": 0, "inconclusive": 0}
                    caught = dict.fromkeys(names, 0)
                    seen: list[float] = []
                    took: list[float] = []
                    for _ in range(args.trials):
                        gate = (["--edge-baseline=base.json"] if mode == "stored" else
                                ["--edge-baseline-models=main"])
                        start = time.perf_counter()
                        code, out = pytest_run(project, folder, f"--edge-golden-dir=golden_{folder}", *gate,
                                               "--edge-max-regression=10%", "--edge-report=gate.json",
                                               "-W", "default", *extra)
                        took.append(time.perf_counter() - start)
                        if code not in (0, 1):
                            print(out)
                            raise SystemExit(f"pytest exited {code}")
                        found = re.search(r"merge gate .*: (\d+) compared, (\d+) regressed, (\d+) inconclusive", out)
                        assert found, out
                        key = "failed" if code == 1 else "inconclusive" if int(found.group(3)) else "passed"
                        counts[key] += 1
                        failed_tests = {line.split("::")[1].split(" ")[0].split("[")[0] for line in out.splitlines()
                                        if line.startswith("FAILED ") and "::" in line}
                        for name in names:
                            caught[name] += f"test_{name.split('_')[1]}" in failed_tests
                        seen += _first_ratios(project / "gate.json", base)
                    label = "same" if ratio == 1.0 else f"{ratio:g}x"
                    observed = float(np.exp(np.mean(np.log(seen)))) if seen else float("nan")
                    per_model = "/".join(str(caught[name]) for name in names)
                    print(f"{mode:7} {load:6} {label:8} {observed:9.2f} {counts['passed']:6} {counts['failed']:6} "
                          f"{counts['inconclusive']:12}  {per_model:20} {float(np.median(took)):8.1f}", flush=True)
            finally:
                if spinner is not None:
                    spinner.kill()
    print(f"P50 ratio: geometric mean over the trials and models of the first measurement's P50 against the "
          f"baseline's (the twin's in A/B mode); caught per model: failed runs of {'/'.join(names)}")
    if args.keep:
        print("project:", project)
    return 0


def _first_ratios(report: Path, base: dict) -> list[float]:
    """P50 of each record against its baseline: the A/B twin's where the record has one, else the stored one's."""
    stored = {r["model"]["name"]: r for r in base["records"]}
    ratios = []
    for record in json.loads(report.read_text())["records"]:
        twin = (record.get("baseline_check") or {}).get("twin") or stored.get(record["model"]["name"])
        new, old = (record.get("latency_ms") or {}).get("p50"), ((twin or {}).get("latency_ms") or {}).get("p50")
        if new and old:
            ratios.append(new / old)
    return ratios


LLM_TEST = """
import pytest

@pytest.mark.edge_llm(model="dec", prompts=[list(range(1, 33))], new_tokens=16, backends=["onnxruntime-cpu"])
def test_decoder(edge_llm):
    pass
"""
LLM_CONFIG = {"vocab_size": 256, "d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "head_dim": 32,
              "max_context": 256, "dtype": "float32"}


def decoders(project: Path, trials: int, loads: list[str], ratios: list[float], extra: list[str]) -> int:
    """The A/B gate on decoders: per load and twin, how the gate decided (from the report's
    baseline_check: a twin computes other tokens, so the run's exit status says the golden too)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from make_llm import make_net, write_onnx

    # "same": a copy of main's decoder in a folder of its own (a twin must be another file).
    folders = {ratio: "same" if ratio == 1.0 else f"deeper_{ratio:g}" for ratio in ratios}
    for ratio, folder in {**folders, 0.0: "main"}.items():
        ratio = ratio or 1.0
        config = {**LLM_CONFIG, "n_layers": round(LLM_CONFIG["n_layers"] * ratio)}
        (project / folder).mkdir(exist_ok=True)
        write_onnx(make_net(config=config), project / folder / "dec.onnx")
        (project / folder / "dec.json").write_text(json.dumps(config))
    (project / "test_llm_gate.py").write_text(LLM_TEST)
    for folder in folders.values():  # each variant's own golden (a deeper one computes other tokens)
        code, out = pytest_run(project, folder, "--edge-update-golden", f"--edge-golden-dir=golden_{folder}")
        assert code == 0, out
    print(f"{'load':6} {'twin':8} {'passed':>6} {'failed':>6} {'inconclusive':>12} {'s/trial':>8}  the gate's first line")
    for load in loads:
        spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None)
        try:
            for ratio in ratios:
                folder = folders[ratio]
                counts = {"passed": 0, "failed": 0, "inconclusive": 0}
                took, said = [], ""
                for _ in range(trials):
                    start = time.perf_counter()
                    code, out = pytest_run(project, folder, f"--edge-golden-dir=golden_{folder}",
                                           "--edge-baseline-models=main", "--edge-max-regression=10%",
                                           "--edge-report=gate.json", "-W", "default", *extra)
                    took.append(time.perf_counter() - start)
                    (record,) = json.loads((project / "gate.json").read_text())["records"]
                    verdict = (record.get("baseline_check") or {}).get("verdict")
                    if verdict not in counts:
                        print(out)
                        raise SystemExit(f"no gate verdict (exit {code})")
                    counts[verdict] += 1
                    lines = [line.strip() for line in out.splitlines() if "TPOT P50" in line or "TTFT P50" in line]
                    said = said or (lines[0][:160] if lines and verdict != "passed" else "")
                label = "same" if ratio == 1.0 else f"{ratio:g}x"
                print(f"{load:6} {label:8} {counts['passed']:6} {counts['failed']:6} {counts['inconclusive']:12} "
                      f"{float(np.median(took)):8.1f}  {said}", flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
    return 0


SHIPPED_TEST = """
import numpy as np
import pytest

@pytest.mark.edge(model="tiny_cnn")
def test_classifier(edge_model):
    edge_model(np.zeros((1, 3, 32, 32), np.float32))
"""


def shipped(project: Path, trials: int, loads: list[str], modes: list[str], extra: list[str]) -> int:
    """The walkthrough's gate commands on the shipped tiny_cnn, every backend, unchanged: the A/B
    gate against a copy of the models (``../main-models/models`` in the walkthrough) and the stored
    gate against a report from a run just before; per mode and load, how many runs passed, failed,
    were inconclusive; and the machine probe's ratio to the stored baseline."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    (project / "models").mkdir()
    for suffix in (".onnx", ".tflite", ".pte"):
        (project / "models" / f"tiny_cnn{suffix}").write_bytes((fixtures / f"tiny_cnn{suffix}").read_bytes())
    (project / "main-models").mkdir()
    for path in (project / "models").iterdir():
        (project / "main-models" / path.name).write_bytes(path.read_bytes())
    (project / "test_shipped.py").write_text(SHIPPED_TEST)
    code, out = pytest_run(project, "models", "--edge-update-golden")
    assert code == 0, out
    code, out = pytest_run(project, "models", "--edge-measure", "--edge-report=base.json")
    assert code == 0, out
    print(f"{'mode':7} {'load':6} {'passed':>6} {'failed':>6} {'inconclusive':>12}  machine probe / baseline's")
    for mode, load in ((m, lo) for m in modes for lo in loads):
        spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None)
        counts, probes = {"passed": 0, "failed": 0, "inconclusive": 0}, []
        gate_args = ["--edge-baseline=base.json"] if mode == "stored" else ["--edge-baseline-models=main-models"]
        try:
            for _ in range(trials):
                code, out = pytest_run(project, "models", *gate_args, "--edge-max-regression=10%",
                                       "--edge-report=gate.json", "-W", "default", *extra)
                gate = re.search(r"merge gate .*: (\d+) compared, (\d+) regressed, (\d+) inconclusive", out)
                assert code in (0, 1) and gate, out
                counts["failed" if code == 1 else "inconclusive" if int(gate.group(3)) else "passed"] += 1
                if code == 1:
                    print("\n".join(line for line in out.splitlines() if line.startswith("  - ")))
                probes.append(_probe_ratio(project / "base.json", project / "gate.json"))
        finally:
            if spinner is not None:
                spinner.kill()
        spread = f"{min(probes):.2f}x .. {max(probes):.2f}x" if all(probes) else "n/a"
        print(f"{mode:7} {load:6} {counts['passed']:6} {counts['failed']:6} {counts['inconclusive']:12}  {spread}",
              flush=True)
    return 0


def _probe_ratio(base: Path, gate: Path) -> float | None:
    from pytest_edge.judging.figures import GateFigures
    from pytest_edge.judging.gate import machine_slowdown

    old = {r["backend"]: GateFigures.from_json(r, source=str(base)) for r in json.loads(base.read_text())["records"]}
    ratios = [machine_slowdown(old[r["backend"]], GateFigures.from_json(r, source=str(gate)))
              for r in json.loads(gate.read_text())["records"] if r["backend"] in old]
    ratios = [r for r in ratios if r is not None]
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else None


if __name__ == "__main__":
    sys.exit(main())
