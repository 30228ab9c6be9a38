"""pytest-benchmark integration: put the worker's timed runs into pytest-benchmark's tables.

The samples come from the backend worker's own ``perf_counter_ns`` loop (never timed across the
pipe) and are handed to the ``benchmark`` fixture's statistics, so teams already on
pytest-benchmark see edge models beside their other benchmarks, with ``--benchmark-compare`` etc.
This uses ``BenchmarkFixture._make_stats``, an internal of pytest-benchmark 4 and 5.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .handle import EdgeModel
from .inputs import generate_case


def record_benchmark(benchmark: Any, edge_model: EdgeModel, feeds: Mapping[str, Any] | Sequence[Any] | None = None,
                     warmup: int | None = None, runs: int | None = None) -> dict[str, Any]:
    session = edge_model._session
    loaded = edge_model.loaded
    if feeds is None:
        case = generate_case(loaded.inputs, edge_model.spec.shapes, session.settings.seed)
        ordered = list(case.values())
    elif isinstance(feeds, Mapping):
        ordered = [feeds[s.name] for s in loaded.inputs]
    else:
        ordered = list(feeds)
    spec = edge_model.spec
    if warmup is not None or runs is not None:
        from dataclasses import replace

        spec = replace(spec, warmup=warmup if warmup is not None else spec.warmup,
                       runs=runs if runs is not None else spec.runs)
    result = session.measure(loaded, [np.asarray(x) for x in ordered], spec)
    benchmark._mode = "edge_benchmark(...)"
    stats = benchmark._make_stats(1)
    for sample in result["samples_ns"]:
        stats.update(sample / 1e9)
    benchmark.extra_info.update({
        "edge_backend": edge_model.backend, "edge_model": edge_model.model.name,
        "edge_load_ms": loaded.load_ms, "edge_warmup_runs": result["warmup_runs"],
        "edge_peak_memory_mb": result["peak_memory_mb"],
    })
    return result
