"""Timing and memory of generation. TTFT/TPOT and memory (:func:`measure_rounds`) are measured in
the backend's fresh worker processes, as every model is. The context sweep (:func:`context_sweep`)
runs each length in a process of its own under an address-space limit
(``python -m pytest_edge.llm.probe`` reads one JSON request on stdin and prints one result line),
and turns a process the OS killed into a figure instead of a crash.

Memory is resident set size from ``/proc/self/status`` over the process's baseline after the
runtime is imported (the peak is reset there through ``/proc/self/clear_refs``, so the import's
own peak is not counted): Linux only; elsewhere the memory figures are null.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import BackendError
from ..measurement import timing
from ..worker.pool import WorkerPool
from ..worker.protocol import Load, MeasureGeneration
from ..backends.decoder_config import LlmConfig
from .metrics import mean_sd

RESULT_PREFIX = "PYTEST_EDGE_LLM "


def _limit_address_space(limit_mb: float) -> None:
    """Let the process map at most ``limit_mb`` more than it has now (as a device with that much
    free memory would): an allocation past it fails inside the runtime, as it would there."""
    import resource

    size = timing.address_space_mb()
    if size is None:
        raise RuntimeError("memory_limit_mb needs /proc/self/status (Linux)")
    limit = int((size + limit_mb) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _child(request: dict[str, Any]) -> dict[str, Any]:
    from ..backends import get_backend
    from ..backends.decoder import generate

    backend, artifact = get_backend(request["backend"]), Path(request["artifact"])
    config = LlmConfig(**request["config"])
    backend.import_runtime()  # part of the baseline, not of the model

    if request.get("memory_limit_mb"):
        _limit_address_space(request["memory_limit_mb"])
    baseline = timing.rss_mb()
    peak_reset = timing.reset_hwm()
    start = time.perf_counter()
    decoder = backend.open_decoder(artifact, config, request.get("threads", 1))
    load_ms = (time.perf_counter() - start) * 1000.0
    result: dict[str, Any] = {"load_ms": load_ms}
    length = request["context"]
    prompt = np.random.default_rng(length).integers(0, config.vocab_size, length - 1).tolist()
    generate(decoder, prompt, 2)  # fills length positions: the prompt, then one decode step
    steady, peak = timing.rss_mb(), timing.hwm_mb()
    usable = baseline is not None and peak is not None and peak_reset
    result.update(baseline_mb=baseline, peak_memory_mb=peak - baseline if usable else None,
                  steady_memory_mb=steady - baseline if usable and steady is not None else None)
    return result


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        result = {"ok": True, **_child(request)}
    except MemoryError:
        result = {"ok": False, "error": "MemoryError: the runtime could not allocate"}
    except Exception as exc:  # noqa: BLE001 - reported to the parent with its type
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------- parent side


def run_probe(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One fresh process for ``request``; what it printed, or how it ended (killed, timed out)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                       os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    try:
        done = subprocess.run([sys.executable, "-m", "pytest_edge.llm.probe"], input=json.dumps(request),
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s:g} s", "status": "timed out"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
            error = result.get("error") or ""
            status = "ok" if result["ok"] else "out of memory" if any(
                word in error for word in ("bad_alloc", "MemoryError", "MemoryAllocationFailed",
                                           "Failed to allocate memory")) else "failed"
            return {"status": status, **result}
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        why = " (the OOM killer?)" if name == "SIGKILL" else ""
        return {"ok": False, "status": "killed", "error": f"killed by {name}{why}"}
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"ok": False, "status": "failed", "error": f"exit status {done.returncode}: {' | '.join(tail)}"}


def measure_rounds(pool: WorkerPool, backend: str, models: Sequence[tuple[Path, LlmConfig]], prompt: Sequence[int],
                   new_tokens: int, warmup: int, runs: int, rounds: int, threads: int = 1) -> list[dict[str, Any]]:
    """TTFT and TPOT of each model in ``rounds`` fresh worker processes of ``backend`` (the one
    measurement policy of tensor models, measurer.fresh_rounds: A B, B A, ... under the machine's
    measurement lock, forked or spawned or on a device as the session's workers are, each within
    edge_timeout); one pooled result per model (see :func:`_pooled`). A process that failed raises
    BackendError naming the artifact and the backend."""
    from ..measurement.measurer import fresh_rounds

    configs = {str(artifact): config for artifact, config in models}

    def measure_one(worker: Any, artifact: Path) -> dict[str, Any]:
        key = f"decoder|{artifact}"
        try:
            loaded = worker.request(Load(key, str(artifact), threads, with_coverage=False,
                                         decoder=asdict(configs[str(artifact)])), artifact=str(artifact))
            result = worker.request(MeasureGeneration(key, list(prompt), new_tokens, warmup, runs),
                                    artifact=str(artifact))
        except BackendError as exc:
            raise BackendError(f"{artifact} ({backend}): measuring failed: {exc}") from None
        return {**result, "load_ms": loaded["load_ms"]}

    results = fresh_rounds(pool, backend, [artifact for artifact, _ in models], rounds, measure_one)
    return [_pooled(r) for r in results]


def _pooled(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    peaks = [r["peak_memory_mb"] for r in results if r["peak_memory_mb"] is not None]
    steadies = [r["steady_memory_mb"] for r in results if r["steady_memory_mb"] is not None]
    return {"ttft_s": [t for r in results for t in r["ttft_s"]], "tpot_s": [t for r in results for t in r["tpot_s"]],
            "decode_s": [t for r in results for t in r.get("decode_s") or []],  # per generation, with ttft_s
            # per fresh process: what the merge gate compares
            # (with the machine probe and the fastest whole generation, "min", which the gate's
            # slower-machine rule reads as it reads a tensor model's fastest run)
            "processes": [{"ttft_p50_ms": float(np.median(r["ttft_s"])) * 1000.0,
                           "tpot_p50_ms": float(np.median(r["tpot_s"])) * 1000.0 if r["tpot_s"] else None,
                           **({"probe_us": r["probe_us"], "min": min(r["generation_s"]) * 1000.0}
                              if r.get("probe_us") and r.get("generation_s") else {})}
                          for r in results],
            "load_ms": float(np.median([r["load_ms"] for r in results])),
            "peak_memory_mb": max(peaks) if peaks else None, "steady_memory_mb": max(steadies) if steadies else None,
            "runtime_timings": _runtime_timings([r.get("runtime_timings") for r in results],
                                                [(r["ttft_s"], r.get("decode_s") or []) for r in results]),
            # timed generations each process ran (fewer than runs= where the worker's time cap stopped it)
            "runs": [r.get("runs", len(r["ttft_s"])) for r in results]}


def _runtime_timings(per_process: Sequence[Sequence[dict[str, Any]] | None],
                     ours: Sequence[tuple[Sequence[float], Sequence[float]]] = ()) -> dict[str, Any] | None:
    """The runtime's own counters (llama.cpp's llama_perf_context), read per timed generation: summed
    over every process's generations, with the tokens per second the sums give, and per generation
    (``per_generation``) the field's speeds as ours are taken (metrics.timing_figures), mean and
    standard deviation over the same generations, and ``counted``: the share of our prefill and
    decode time (each process's TTFTs and decode times, ``ours``) the runtime's counters count,
    median over the generations (1.0: none of it is outside the runtime)."""
    found = [t for process in per_process if process for t in process if t]
    if not found:
        return None
    shares: dict[str, list[float]] = {"prefill": [], "decode": []}
    for process, (ttft_s, decode_s) in zip(per_process, ours):
        for counted, ttft, decode in zip(process or [], ttft_s, decode_s):
            if counted and ttft > 0 and decode > 0:
                shares["prefill"].append(counted["prompt_eval_ms"] / 1000 / ttft)
                shares["decode"].append(counted["eval_ms"] / 1000 / decode)
    total = {key: sum(t[key] for t in found) for key in ("prompt_eval_ms", "prompt_tokens", "eval_ms", "eval_tokens")}
    if all("ttft_ms" in t for t in found):  # a runtime that keeps its own time to first token
        total["ttft_ms"] = sum(t["ttft_ms"] for t in found)
    prefill = [t["prompt_tokens"] / t["prompt_eval_ms"] * 1000 for t in found if t["prompt_eval_ms"] > 0]
    decode = [t["eval_tokens"] / t["eval_ms"] * 1000 for t in found if t["eval_ms"] > 0]
    return {"source": found[0]["source"], **total,
            "prompt_tokens_per_s": total["prompt_tokens"] / total["prompt_eval_ms"] * 1000 if total["prompt_eval_ms"] else None,
            "eval_tokens_per_s": total["eval_tokens"] / total["eval_ms"] * 1000 if total["eval_ms"] else None,
            "per_generation": {"generations": len(found), "prefill_tokens_per_s": mean_sd(prefill),
                               "decode_tokens_per_s": mean_sd(decode),
                               "counted": {key: float(np.median(v)) if v else None for key, v in shares.items()}}}


def context_lengths(start: int, cap: int) -> list[int]:
    """Doubling lengths from ``start`` up to ``cap``, ``cap`` itself last."""
    lengths, n = [], max(2, start)
    while n < cap:
        lengths.append(n)
        n *= 2
    return lengths + [cap]


def context_sweep(backend: str, artifact: Path, config: LlmConfig, lengths: Sequence[int],
                  memory_budget_mb: float | None, memory_limit_mb: float | None = None,
                  timeout_s: float = 120.0) -> dict[str, Any]:
    """Each length in a fresh process, shortest first, until one fails (an allocation past
    ``memory_limit_mb`` fails), is killed, or goes over ``memory_budget_mb``: the longest stable
    length and where and why it stopped."""
    points, longest, stopped = [], None, None
    for length in sorted(lengths):
        # The runtime's cache sized for this length (llama.cpp's n_ctx, GenAI's max_length), not the
        # model's maximum: each point's memory is that of its own length.
        result = run_probe({"mode": "context", "backend": backend, "artifact": str(artifact),
                            "config": asdict(config.for_context(int(length))),
                            "context": int(length), "memory_limit_mb": memory_limit_mb}, timeout_s)
        point = {"tokens": int(length), "status": result["status"],
                 "peak_memory_mb": result.get("peak_memory_mb"),
                 "kv_cache_estimate_mb": config.kv_cache_bytes(int(length)) / 2**20}
        if not result["ok"]:
            point["error"] = result["error"]
        elif memory_budget_mb is not None and (result.get("peak_memory_mb") or 0.0) > memory_budget_mb:
            point["status"] = "over memory budget"
        points.append(point)
        if point["status"] != "ok":
            stopped = {"tokens": int(length), "reason": point.get("error") or point["status"]}
            break
        longest = int(length)
    return {"points": points, "longest_stable": longest, "stopped": stopped,
            "os_killed": any(p["status"] == "killed" for p in points)}


if __name__ == "__main__":
    sys.exit(main())
