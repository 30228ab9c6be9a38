"""report/html_model.py: a model's section of the HTML page, from records built as a finished check
builds them and a report reads them back (``Record.from_json(...to_json())``): the figures table's columns, a null figure as
a dash or "not measured" and never 0, the baseline's change, coverage, accuracy, and a hostile
model, backend or message escaped."""

from __future__ import annotations

import re
from typing import Any

from pytest_edge.core.record import Record
from pytest_edge.report.html_model import model_section
from pytest_edge.report.json_report import Report
from pytest_edge.report.table import DASH

HOSTILE = "<script>alert(1)</script>"
FIGURES = ["P50 ms", "P90 ms", "P99 ms", "mean ms", "min ms", "runs", "load ms", "first inference ms", "peak MB"]


def finished(model: str = "net", backend: str = "onnxruntime-cpu", *, p50: float = 1.0, peak: float | None = 10.0,
             load: float | None = 3.0, violations: tuple[str, ...] = (), test: str = "test_m",
             **fields: Any) -> Record:
    record = Record(f"tests/test_m.py::{test}[{model}-{backend}]",
                    {"name": model, "artifact": f"models/{model}.onnx", "sha256": "0" * 64}, backend,
                    measured_runs=50, load_ms=load, first_inference_ms=1.5,
                    latency_ms={"p50": p50, "p90": p50 * 1.2, "p99": p50 * 2, "mean": p50 * 1.1, "min": p50 * 0.9},
                    latency_quantiles_ms=[p50 * (0.9 + 1.1 * i / 100) for i in range(101)], peak_memory_mb=peak,
                    accuracy={"reference": "onnxruntime-cpu", "max_abs_err": 1.5e-6, "max_rel_err": None,
                              "cosine": 0.99999, "snr_db": 120.0}, checked=True, **fields)
    return Record.from_json(record.conclude(list(violations)).to_json())


def section(records: list[Record], model: str = "net", *, baseline: Report | None = None,
            skipped: list[Record] | None = None, gates: bool = False) -> str:
    return "".join(model_section(model, records, skipped or [], baseline, 0.1, False, gates))


def table(html: str, title: str) -> list[list[str]]:
    """The cells (inner HTML) of the rows of the table under ``<h3>title``."""
    start = html.index(f"<h3>{title}")
    body = html[start:html.index("</table>", start)]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body) if "<td" in row]


def test_figures_table_puts_each_figure_in_its_column() -> None:
    html = section([finished(p50=1.0)])
    header = re.findall(r"<th>([^<]*)</th>", html[html.index("<h3>Figures"):])[:11]
    assert header == ["backend", *FIGURES, "verdict"]
    [row] = table(html, "Figures")
    assert row[0].endswith("onnxruntime-cpu")
    assert dict(zip(FIGURES, row[1:10])) == {"P50 ms": "1.00", "P90 ms": "1.20", "P99 ms": "2.00", "mean ms": "1.10",
                                             "min ms": "0.900", "runs": "50", "load ms": "3.00",
                                             "first inference ms": "1.50", "peak MB": "10.0"}
    assert row[10] == "passed"


def test_a_figure_not_measured_is_a_dash_in_the_table_and_not_measured_in_the_charts() -> None:
    html = section([finished(peak=None, load=None)])
    cells = dict(zip(FIGURES, table(html, "Figures")[0][1:10]))
    assert cells["peak MB"] == cells["load ms"] == DASH
    assert "load: not measured" in html
    assert "<h3>Peak memory</h3>" not in html  # no peak measured anywhere: no chart of it, not a zero bar


def test_a_hostile_model_backend_and_violation_are_escaped() -> None:
    record = finished(HOSTILE, f"cpu{HOSTILE}", violations=(f"P50 {HOSTILE} > 1 ms",))
    html = section([record], model=HOSTILE)
    assert "<script>" not in html
    assert html.startswith('<section id="model-_script_alert_1___script_"><h2>&lt;script&gt;alert(1)&lt;/script&gt; '
                           "<small>failures</small></h2>")
    assert '<td class="failed" title="P50 &lt;script&gt;alert(1)&lt;/script&gt; &gt; 1 ms">failed</td>' in html


def test_two_records_of_one_backend_are_told_apart_by_their_test() -> None:
    html = section([finished(test="test_a"), finished(test="test_b", p50=2.0)])
    labels = [row[0].rpartition("</span>")[2] for row in table(html, "Figures")]
    assert labels == ["onnxruntime-cpu [test_a[net-onnxruntime-cpu]]", "onnxruntime-cpu [test_b[net-onnxruntime-cpu]]"]


def test_the_change_against_the_baseline_is_shown_old_to_new() -> None:
    baseline = Report([finished(p50=1.0)])
    html = section([finished(p50=2.0)], baseline=baseline)
    assert "<h3>Against the baseline" in html and "dashed: baseline" in html
    [row] = table(html, "Against the baseline")
    p50 = next(cell for cell in row if cell.startswith("1.00 → 2.00"))
    assert "+100" in p50
    assert re.search(r'<td class="n changed">1\.00 → 2\.00', html)  # no gate ran: a comparison, not "bad"


def test_coverage_and_accuracy_tables() -> None:
    record = finished(coverage={"total_ops": 8, "delegated_ops": 6, "fallback_ops": 2, "fallback": 0.25,
                                "partitions": 2, "fallback_op_names": {"CUMSUM": 2, HOSTILE: 1}})
    html = section([record])
    [cov] = table(html, "Delegate coverage")
    assert "75% delegated" in cov[1] and cov[2] == "6/8" and cov[3] == "2"
    assert "<code>CUMSUM</code> ×2" in cov[4] and "<script>" not in cov[4]
    [acc] = table(html, "Accuracy")
    assert acc[1:6] == ["onnxruntime-cpu", "1.50e-06", DASH, "0.999990", "120"]  # max rel not measured: a dash


def test_skipped_backends_for_want_of_an_artifact_fold_into_one_line() -> None:
    skipped = [Record.skipped(f"tests/test_m.py::test_m[net-{b}]", {"name": "net"}, b, "no .pte artifact for net")
               for b in ("executorch", "executorch-xnnpack")]
    html = section([finished()], skipped=skipped)
    assert '<p class="muted">net: no .pte: executorch, executorch-xnnpack skipped</p>' in html


def test_resident_memory_is_drawn_from_the_first_process_well_formed_points_only() -> None:
    record = finished(memory_growth_kb_per_run=12.5,
                      processes=[{"rss_points": [[1, 100.0], [2, 100.5], [4, float("nan")], [5, 101.0]]}])
    html = section([record])
    assert "<h3>Resident memory during the timed runs</h3>" in html
    chart = html[html.index("Resident memory"):]
    assert len(re.findall("<circle ", chart[:chart.index("</svg>")])) == 3
    assert "onnxruntime-cpu: 12.5 KB per run" in chart
