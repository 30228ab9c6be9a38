"""Where our llama.cpp prefill time goes that llama.cpp's own counter (``llama_perf_context``'s
``t_p_eval_ms``, started inside ``llama_decode`` and stopped in ``llama_synchronize``) does not
count. Per generation of ``fixtures/llm/gguf_llama`` (a 64-token prompt, 16 new tokens, one
thread), as the worker measures it (``backends/decoder.generate``, the counters reset before each):

- TTFT (prompt in, the first token's logits computed: our prefill) against the counter's time, and
  the share it counts, beside the decode steps' share;
- the same prefill split, the decoder's own ``feed`` with its two ctypes calls wrapped by clocks:
  (a) our Python before ``llama_decode`` (the batch fill), (b) the ``llama_decode`` call, (s) the
  ``llama_synchronize`` call, (c) the logits read and the argmax (after TTFT's clock stops);
- with ``--c-floor``, the same prefill in llama.cpp's own loop without Python
  (``benchmarks/llama_prefill_floor.c``, built with the C compiler against the wheel's
  ``include/llama.h`` and ``lib/libllama.so``): what llama.cpp itself does before its counter starts.

Medians over the generations; the machine's load average is printed beside them.

    PYTHONPATH=. taskset -c 1 .venv/bin/python benchmarks/bench_llama_prefill.py [--generations 40] [--c-floor]
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
from typing import Any, Callable

import numpy as np

from pytest_edge.backends import get_backend
from pytest_edge.backends.decoder import generate

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "fixtures" / "llm" / "gguf_llama" / "model.gguf"


def timed(call: Callable[..., Any], marks: list[float]) -> Callable[..., Any]:
    """``call`` with the clock read just before and just after it, into ``marks``."""

    def wrapper(*args: Any) -> Any:
        marks.append(time.perf_counter())
        result = call(*args)
        marks.append(time.perf_counter())
        return result

    return wrapper


def c_floor(generations: int, tokens: int) -> str:
    """llama_prefill_floor.c built against the installed wheel and run on the same model."""
    import llama_cpp

    package = Path(llama_cpp.__file__).parent
    header = package.parent / "include" / "llama.h"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not header.is_file():
        return f"no C floor: needs a C compiler and {header}"
    with tempfile.TemporaryDirectory() as folder:
        binary = Path(folder) / "floor"
        subprocess.run([compiler, "-O2", "-o", str(binary), str(ROOT / "benchmarks" / "llama_prefill_floor.c"),
                        f"-I{header.parent}", f"-L{package / 'lib'}", "-lllama", f"-Wl,-rpath,{package / 'lib'}"],
                       check=True)
        run = subprocess.run([str(binary), str(MODEL), str(generations), str(tokens)], check=True,
                             capture_output=True, text=True)
    return run.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--c-floor", action="store_true")
    args = parser.parse_args()
    backend = get_backend("llama.cpp")
    config = backend.decoders.config_of(MODEL)
    decoder: Any = backend.decoders.open(MODEL, config, 1)
    prompt = [(7 * i + 3) % config.vocab_size for i in range(args.prompt)]
    for _ in range(3):
        generate(decoder, prompt, 16)
    marks: list[float] = []
    real_decode, real_synchronize = decoder._llama_decode, decoder._synchronize
    rows: dict[str, list[float]] = {key: [] for key in (
        "ttft", "counted", "share", "decode_share", "a", "b", "s", "tail", "c", "split_counted", "split_share")}
    for _ in range(args.generations):
        decoder.reset_runtime_timings()
        run = generate(decoder, prompt, 16)
        counted = decoder.runtime_timings()
        rows["ttft"].append(run.prefill_s)
        rows["counted"].append(counted["prompt_eval_ms"] / 1000)
        rows["share"].append(counted["prompt_eval_ms"] / 1000 / run.prefill_s)
        rows["decode_share"].append(counted["eval_ms"] / 1000 / sum(run.step_s))
        # The same prefill split: feed with its ctypes calls wrapped (each wrapper adds ~0.1 us).
        decoder.reset()
        decoder.reset_runtime_timings()
        marks.clear()
        decoder._llama_decode, decoder._synchronize = timed(real_decode, marks), timed(real_synchronize, marks)
        start = time.perf_counter()
        decoder.feed(list(prompt))
        fed = time.perf_counter()
        token = int(np.argmax(decoder.logits()))
        chosen = time.perf_counter()
        decoder._llama_decode, decoder._synchronize = real_decode, real_synchronize
        assert token == run.tokens[0] and len(marks) == 4, (token, run.tokens[0], len(marks))
        split = decoder.runtime_timings()["prompt_eval_ms"] / 1000
        rows["a"].append(marks[0] - start)
        rows["b"].append(marks[1] - marks[0])
        rows["s"].append(marks[3] - marks[2])
        rows["tail"].append(fed - marks[3])
        rows["c"].append(chosen - fed)
        rows["split_counted"].append(split)
        rows["split_share"].append(split / (fed - start))
    median = {key: statistics.median(values) for key, values in rows.items()}
    gap = statistics.median([ours - theirs for ours, theirs in zip(rows["ttft"], rows["counted"])])
    inside = statistics.median([b + s - counted for b, s, counted in zip(rows["b"], rows["s"], rows["split_counted"])])
    us = 1e6
    print(f"load average {os.getloadavg()[0]:.2f}, cores {sorted(os.sched_getaffinity(0))}, "
          f"{args.generations} generations, {args.prompt}-token prompt, python {sys.version.split()[0]}")
    print(f"TTFT {median['ttft'] * us:.1f} us, llama.cpp's prompt eval {median['counted'] * us:.1f} us, "
          f"TTFT - it {gap * us:.1f} us; share counted: prefill {median['share']:.4f}, decode {median['decode_share']:.4f}")
    print(f"split: (a) Python before llama_decode {median['a'] * us:.2f} us, (b) llama_decode {median['b'] * us:.1f} us, "
          f"(s) llama_synchronize {median['s'] * us:.2f} us, after it {median['tail'] * us:.2f} us; "
          f"(b) + (s) - counter {inside * us:.1f} us; (c) logits read + argmax {median['c'] * us:.2f} us "
          f"(after TTFT's clock); split share {median['split_share']:.4f}")
    if args.c_floor:
        print(c_floor(args.generations, args.prompt))


if __name__ == "__main__":
    main()
