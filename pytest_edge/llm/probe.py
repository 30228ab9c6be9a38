"""The context sweep (:func:`context_sweep`)
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
from ..backends.decoder_config import LlmConfig

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
