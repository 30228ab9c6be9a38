"""TTFT, TPOT, prefill and decode tokens/s of the tiny decoder (fixtures/llm) on each LLM backend,
measured as ``@pytest.mark.edge_llm`` measures them (the backend's fresh worker processes, warm-up,
pooled samples).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_llm.py [--prompt 32] [--new 32] [--processes 3]

Prints one line per backend and the ORT / ExecuTorch ratio of each figure.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_edge.backends.decoder_config import LlmConfig
from pytest_edge.llm.metrics import timing_figures
from pytest_edge.judging.generation import measure_rounds
from pytest_edge.worker.pool import WorkerPool

LLM = Path(__file__).resolve().parent.parent / "fixtures" / "llm"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    config = LlmConfig.load(LLM / "tiny_llm.json")
    prompt = [(7 * i + 3) % config.vocab_size for i in range(args.prompt)]
    rows = {}
    pool = WorkerPool(isolated=True, timeout_s=300.0, on_crash=lambda backend: None, fork="off")
    for backend, suffix in (("onnxruntime-cpu", ".onnx"), ("executorch", ".pte")):
        (measured,) = measure_rounds(pool, backend, [(LLM / f"tiny_llm{suffix}", config)], prompt, args.new, 3,
                                     args.runs, args.processes)
        figures = timing_figures(args.prompt, measured["ttft_s"], measured["tpot_s"], measured["decode_s"], args.new)
        rows[backend] = {**figures, "load_ms": measured["load_ms"], "peak_memory_mb": measured["peak_memory_mb"]}
        print(backend, json.dumps(rows[backend]))
    pool.close()
    ort, et = rows["onnxruntime-cpu"], rows["executorch"]
    print("ExecuTorch / ORT: TTFT P50 x%.1f, TPOT P50 x%.1f, peak memory x%.1f" % (
        et["ttft_ms"]["p50"] / ort["ttft_ms"]["p50"], et["tpot_ms"]["p50"] / ort["tpot_ms"]["p50"],
        et["peak_memory_mb"] / ort["peak_memory_mb"]))


if __name__ == "__main__":
    main()
