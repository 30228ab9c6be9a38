"""Memory that grows while a model runs (issue 51, SPEC section 13): the worker reads resident
memory between the timed runs, the record keeps its slope per run, and ``max_memory_growth_kb_per_run``
fails a model whose runtime keeps growing, naming the slope; an unchanged model stays under it.

The leaking runtime is a third-party backend installed as a distribution is (an entry point in
``pytest_edge.backends``): ONNX Runtime behind an app's binding that keeps every output it returned
plus a 256 KB buffer per inference, the way a binding that leaks does. A slope per run, not per
minute: a machine 3x faster or slower reads the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import install_backend
from hypothesis import given
from hypothesis import strategies as st

from pytest_edge.checks import check_memory_growth
from pytest_edge.measurement.timing import memory_growth_kb_per_run

LEAKING_BACKEND = """\
import numpy as np
from pytest_edge.backends.onnxruntime.backend import OrtBackend, OrtModel

class LeakingModel(OrtModel):
    kept = []

    def bind(self, feeds):
        infer = super().bind(feeds)

        def leaking():
            outputs = infer()
            self.kept.append((outputs, np.ones(65536, np.float32)))  # 256 KB written: resident
            return outputs
        return leaking

class LeakingBackend(OrtBackend):
    def __init__(self):
        super().__init__('CPUExecutionProvider')
        self.name = 'onnxruntime-leaking'

    def load(self, path, *, threads, shapes):
        loaded = super().load(path, threads=threads, shapes=shapes)
        return LeakingModel(loaded.session, self.provider, path, threads)

def backends():
    return [LeakingBackend()]
"""


@pytest.fixture
def leaking_backend(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    install_backend(pytester, monkeypatch, "leak", LEAKING_BACKEND)
    return "onnxruntime-leaking"


def test_a_leaking_runtime_fails_the_growth_budget_and_an_unchanged_one_passes(
        pytester: pytest.Pytester, models: Path, leaking_backend: str) -> None:
    pytester.makepyfile(test_leak="""
        import pytest

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "onnxruntime-leaking"], runs=200,
                          max_memory_growth_kb_per_run=64)
        def test_mlp(edge_model):
            pass
    """)
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=1, failed=1)  # budgets judged too
    result = pytester.runpytest_subprocess("--edge-report=r.json", "--edge-html=r.html")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-leaking: resident memory grew * KB per run over the timed runs, "
                                 "* MB per minute of runs (the median process's slope) > "
                                 "max_memory_growth_kb_per_run 64 KB: a leak*"])
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    leak, clean = records["onnxruntime-leaking"], records["onnxruntime-cpu"]
    # 256 KB per run kept: the slope reads it, within what the allocator adds or rounds.
    assert 200 < leak["memory_growth_kb_per_run"] < 400, leak["memory_growth_kb_per_run"]
    assert clean["memory_growth_kb_per_run"] < 64 and clean["verdict"] == "passed"
    points = leak["processes"][0]["rss_points"]
    assert len(points) >= 16 and points[-1][0] >= 200 and points[-1][1] > points[0][1]
    # The page draws the readings: a line per backend, the leaking one rising.
    page = (pytester.path / "r.html").read_text()
    assert "<h3>Resident memory during the timed runs</h3>" in page
    drawn = page.split("Resident memory during the timed runs")[1]
    assert re.search(r"onnxruntime-leaking: \d+(\.\d+)? KB per run", drawn) and "onnxruntime-cpu: " in drawn


@given(st.floats(0, 1000), st.floats(-50, 50), st.integers(0, 3))
def test_the_slope_is_the_leak_per_run_whatever_one_allocator_step(per_run_kb: float, base: float, step_at: int) -> None:
    """Theil-Sen over 17 readings: a leak of so much per run reads that slope, and one step of the
    allocator (an arena extended once, 8 MB) does not move it by more than a few percent of 8 MB."""
    runs = np.arange(0, 1700, 100)
    rss = 100 + base + runs * per_run_kb / 1024
    rss[8 + step_at:] += 8.0
    found = memory_growth_kb_per_run([[n, mb] for n, mb in zip(runs, rss)])
    assert found is not None and abs(found - per_run_kb) < 8 * 1024 / 1600 * 4  # < 4 step-widths per run


def test_growth_without_readings_is_not_measured_and_says_so() -> None:
    assert memory_growth_kb_per_run([[0, 10.0], [5, 10.0], [9, 10.0]]) is None
    (finding,) = check_memory_growth(None, None, {"max_memory_growth_kb_per_run": 64}, "litert")
    assert finding.value is None and "memory growth could not be measured here" in finding.message


def test_a_microsecond_model_timed_for_min_time_is_read_a_bounded_number_of_times(
        pytester: pytest.Pytester, models: Path) -> None:
    """tiny_mlp runs in about 2 us: timed past ``runs`` for ``edge_min_time``, resident memory was read
    every 3 runs (thousands of readings, whose slope's pairs took 1.6 GB, read as the model's peak, and
    whose own list read as a leak of 250 MB a minute). The readings past ``runs`` are by time."""
    pytester.makepyfile(test_fast="""
        import pytest

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"], runs=50)
        def test_mlp(edge_model):
            pass
    """)
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("--edge-measure", "--edge-min-time=0.5s", "--edge-report=r.json")
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    for process in record["processes"]:
        assert process["runs"] > 1000, process["runs"]  # timed well past runs=50: the case at hand
        # 16 by count, 16 by time, one per machine probe (5 ms): far from one per 3 runs.
        assert 16 <= len(process["rss_points"]) <= 16 + 16 + 0.5 / 0.005 + 4, len(process["rss_points"])
    assert record["peak_memory_mb"] < 200, record["peak_memory_mb"]  # the readings are not the model's peak


def test_the_slope_of_a_long_window_is_taken_over_a_bounded_number_of_pairs() -> None:
    runs = np.arange(0, 100_000, 10)  # 10,000 readings: 50 million pairs unthinned
    rss = 40 + runs * 2.0 / 1024  # 2 KB per run
    found = memory_growth_kb_per_run([[n, mb] for n, mb in zip(runs, rss)])
    assert found == pytest.approx(2.0, rel=1e-6)
