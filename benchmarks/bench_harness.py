"""How much does pytest-edge's measurement add? The plugin's P50 against a bare perf_counter_ns loop
over the same runtime session, side by side in one process, for each backend. Prints the ratio.

    .venv/bin/python benchmarks/bench_harness.py [--runs 2000] [--rounds 5] [--model tiny_cnn]

Rounds alternate plugin / bare so slow drift of the machine hits both alike; the ratio is the
median of the per-round ratios. Target: within 2 % (ratio 0.98 .. 1.02).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_edge.backends import get_backend  # noqa: E402
from pytest_edge.accuracy.inputs import generate_case  # noqa: E402
from pytest_edge.worker import WorkerServer  # noqa: E402


def bare_call(backend: str, model, feeds):
    """The loop a user would write against the runtime's own API, with nothing of ours in it."""
    if backend.startswith("onnxruntime"):
        session = model.session
        named = {s.name: x for s, x in zip(model.inputs, feeds)}
        return lambda: session.run(None, named)
    if backend.startswith("litert"):
        interpreter = model.interpreter
        ins = [d["index"] for d in interpreter.get_input_details()]
        outs = [d["index"] for d in interpreter.get_output_details()]

        def run():
            for index, x in zip(ins, feeds):
                interpreter.set_tensor(index, x)
            interpreter.invoke()
            return [interpreter.get_tensor(i) for i in outs]
        return run
    if backend == "executorch":
        import torch

        method = model.method
        tensors = [torch.from_numpy(x) for x in feeds]
        return lambda: method.execute(tensors)
    raise ValueError(backend)


def bare_p50(call, warmup: int, runs: int) -> float:
    for _ in range(warmup):
        call()
    clock = time.perf_counter_ns
    samples = []
    for _ in range(runs):
        start = clock()
        call()
        samples.append(clock() - start)
    return float(np.percentile(samples, 50)) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny_cnn")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'backend':16s} {'plugin P50 ms':>14s} {'bare P50 ms':>12s} {'ratio':>7s}")
    for backend in ("onnxruntime-cpu", "litert", "litert-ref", "executorch"):
        reason = get_backend(backend).unavailable_reason()
        artifact = ROOT / "fixtures" / f"{args.model}{get_backend(backend).suffix}"
        if reason or not artifact.exists():
            print(f"{backend:16s} skipped: {reason or f'no {artifact.name}'}")
            continue
        server = WorkerServer(backend)
        server.op_load("m", str(artifact), 1, {})
        model = server.models["m"]
        feeds = list(generate_case(model.inputs, {}, 0).values())
        call = bare_call(backend, model, feeds)
        plugin, bare, ratios = [], [], []
        for _ in range(args.rounds):
            p = server.op_measure("m", feeds, args.warmup, args.runs)["latency_ms"]["p50"]
            b = bare_p50(call, args.warmup, args.runs)
            plugin.append(p)
            bare.append(b)
            ratios.append(p / b)
        print(f"{backend:16s} {statistics.median(plugin):14.4f} {statistics.median(bare):12.4f} "
              f"{statistics.median(ratios):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
