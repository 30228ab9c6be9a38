"""pytest-benchmark integration: put the worker's timed runs into pytest-benchmark's tables.

The samples come from the backend worker's own ``perf_counter_ns`` loop (never timed across the
pipe) and are handed to the ``benchmark`` fixture's statistics, so teams already on
pytest-benchmark see edge models beside their other benchmarks, with ``--benchmark-compare`` etc.
This uses ``BenchmarkFixture._make_stats``, an internal of pytest-benchmark 4 and 5.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .edge_model import EdgeModel

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def record_benchmark(benchmark: Any, edge_model: EdgeModel,
                     feeds: Mapping[str, ArrayLike] | Sequence[ArrayLike] | None = None,
                     warmup: int | None = None, runs: int | None = None) -> dict[str, Any]:
    model = edge_model.with_protocol(warmup, runs)
    if isinstance(feeds, Mapping):
        feeds = [feeds[s.name] for s in model.inputs]
    result = model.measure(None if feeds is None else [np.asarray(x) for x in feeds])
    benchmark._mode = "edge_benchmark(...)"
    stats = benchmark._make_stats(1)
    for sample in result["samples_ns"]:
        stats.update(sample / 1e9)
    benchmark.extra_info.update({
        "edge_backend": model.backend, "edge_model": model.model.name,
        "edge_load_ms": result["load_ms"], "edge_warmup_runs": result["warmup_runs"],
        "edge_peak_memory_mb": result["peak_memory_mb"], "edge_processes": len(result["processes"]),
    })
    return result
