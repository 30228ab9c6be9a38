"""The product's fidelity claim for llama.cpp (SPEC section 10): our prefill and decode tokens/s
within 5 % of llama.cpp's own counters (``llama_perf_context``) over the same generations. Run and
reported here, not asserted in the suite: the share of our time llama.cpp's counter counts is a
ratio of two clocks whose reading moves with the CPU and the load (0.946 decode on one fresh
2-core machine, 0.955-0.964 on another: issue 53), so a bound a few points under one machine's
reading is a coin flip on the next. The suite keeps what logic guarantees
(tests/test_llm_quality.py: the counters read per generation, the share at most 1).

Measured as ``@pytest.mark.edge_llm(..., backends=["llama.cpp"], runs=10)`` under ``--edge-measure``
measures it (``judging.generation.measure_rounds``: fresh worker processes, warm-up, the counters
reset before each timed generation), on ``fixtures/llm/gguf_llama`` with a 64-token prompt and 16 new
tokens, ``--trials`` times in one run. Per trial: the median share counted (prefill, decode), and our
mean tokens/s over llama.cpp's (the record's ``prefill_tokens_per_s`` / ``runtime_timings.
per_generation.prefill_tokens_per_s.mean``); then the claim's verdict per figure, with the load average.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_llama_counters.py [--trials 5] [--processes 2] [--runs 10]

Where llama.cpp's time goes outside its counter: benchmarks/bench_llama_prefill.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from pytest_edge.backends import get_backend
from pytest_edge.judging.generation import measure_rounds
from pytest_edge.llm.metrics import timing_figures
from pytest_edge.worker.pool import WorkerPool

MODEL = Path(__file__).resolve().parent.parent / "fixtures" / "llm" / "gguf_llama" / "model.gguf"
CLAIM = 0.95  # ours within 5 % of the runtime's own counter (SPEC section 10, docs/llm.md)


def trial(pool: WorkerPool, config: object, prompt: list[int], new_tokens: int, runs: int,
          processes: int) -> dict[str, float]:
    """One measurement as the plugin takes it: the shares counted and our tokens/s over theirs."""
    (measured,) = measure_rounds(pool, "llama.cpp", [(MODEL, config)], prompt, new_tokens, 3, runs, processes)
    ours = timing_figures(len(prompt), measured["ttft_s"], measured["tpot_s"], measured["decode_s"], new_tokens)
    theirs = measured["runtime_timings"]["per_generation"]
    return {"counted_prefill": theirs["counted"]["prefill"], "counted_decode": theirs["counted"]["decode"],
            "prefill": ours["prefill_tokens_per_s"] / theirs["prefill_tokens_per_s"]["mean"],
            "decode": ours["decode_tokens_per_s"] / theirs["decode_tokens_per_s"]["mean"],
            "generations": theirs["generations"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=16)
    args = parser.parse_args()
    config = get_backend("llama.cpp").decoders.config_of(MODEL)
    prompt = [(7 * i + 3) % config.vocab_size for i in range(args.prompt)]
    pool = WorkerPool(isolated=True, timeout_s=300.0, on_crash=lambda backend: None, fork="off")
    rows = []
    print(f"load average {os.getloadavg()[0]:.2f}, cores {len(os.sched_getaffinity(0))}, {args.trials} trials of "
          f"{args.processes} processes x {args.runs} generations, {args.prompt}-token prompt, {args.new} new tokens")
    try:
        for number in range(args.trials):
            row = trial(pool, config, prompt, args.new, args.runs, args.processes)
            rows.append(row)
            print(f"trial {number + 1}: share counted prefill {row['counted_prefill']:.4f} decode "
                  f"{row['counted_decode']:.4f}; ours / llama.cpp's tokens/s prefill {row['prefill']:.4f} "
                  f"decode {row['decode']:.4f} ({row['generations']} generations; load {os.getloadavg()[0]:.2f})")
    finally:
        pool.close()
    for figure in ("prefill", "decode"):
        shares = [row[f"counted_{figure}"] for row in rows]
        held = sum(share >= CLAIM for share in shares)
        print(f"{figure}: share counted {min(shares):.4f} to {max(shares):.4f} (median {statistics.median(shares):.4f}); "
              f"within 5 % of llama.cpp's counter in {held} of {len(shares)} trials")


if __name__ == "__main__":
    main()
