"""The HTML report, the Markdown job summary and the terminal table: unit tests on hand-written
records, and a real run's report (merged with a relabelled copy, against a scaled baseline)
rendered in headless Chromium."""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from edge_helpers import record

from pytest_edge.cli import main as cli_main
from pytest_edge.core.record import Record
from pytest_edge.report import Report, build_report, format_table, merge_reports, table_footer, table_rows
from pytest_edge.report.changes import FigureChange, figure_changes
from pytest_edge.report.html import render_html
from pytest_edge.report.markdown import markdown_summary
from pytest_edge.measurement.machine import Machine

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# A src or href that leaves the file: a scheme, or a protocol-relative "//host".
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:|//)""", re.I)



# The reports here are written as their JSON (as a file holds one, edited in place by the tests);
# the pages read them as a Report, as the CLI's load_report gives one.
def typed(report: dict[str, Any] | None) -> Report | None:
    return Report.from_json(report) if report is not None else None


def html_of(report: dict[str, Any], baseline: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> str:
    return render_html(Report.from_json(report), typed(baseline), *args, **kwargs)


def summary_of(report: dict[str, Any], baseline: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> str:
    return markdown_summary(Report.from_json(report), typed(baseline), *args, **kwargs)


def merged_of(reports: list[dict[str, Any]]) -> dict[str, Any]:
    return merge_reports([Report.from_json(r) for r in reports]).to_json()


def changes_of(new: dict[str, Any], old: dict[str, Any]) -> list[FigureChange]:
    """figure_changes of two records as a report file holds them."""
    return figure_changes(Record.from_json(new), Record.from_json(old))

def skipped_for(model: str, backend: str, suffix: str) -> dict[str, Any]:
    return record(model, backend, "skipped", skip_reason=f"no {suffix} artifact for {model}")


def report_of(*records: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """The JSON of a report of ``records`` (a report file's)."""
    machine = Machine(cpu="Test CPU", cores=2, os="Linux", python="3.11")
    return build_report([Record.from_json(r) for r in records], machine.named(name) if name else machine).to_json()


def scaled(report: dict[str, Any], factor: float) -> dict[str, Any]:
    """The same report with every latency and memory figure multiplied by ``factor``."""
    out = copy.deepcopy(report)
    for r in out["records"]:
        if r.get("latency_ms"):
            r["latency_ms"] = {k: v * factor for k, v in r["latency_ms"].items()}
        if r.get("latency_quantiles_ms"):
            r["latency_quantiles_ms"] = [v * factor for v in r["latency_quantiles_ms"]]
        if r.get("peak_memory_mb") is not None:
            r["peak_memory_mb"] *= factor
    return out


def decoder_record(backend: str, test: str, ttft: float = 0.2, swept: bool = True) -> dict[str, Any]:
    """A measured decoder record as edge_llm writes it: TTFT/TPOT with their percentiles, the
    context sweep, the quality figures in its accuracy."""
    points = [{"tokens": n, "status": "ok", "peak_memory_mb": 5.0 + n / 64, "kv_cache_estimate_mb": n / 2048}
              for n in (64, 128, 256)] if swept else []
    return record("tiny_llm", backend, test=f"tests/test_llm.py::{test}[tiny_llm-{backend}]", coverage=None,
                  latency_ms=None, latency_quantiles_ms=None,
                  accuracy={"reference": "onnxruntime-cpu", "token_agreement": 0.875, "top1_agreement": 0.9375,
                            "kld_mean": 2.3e-4, "max_abs_err": 1e-3, "cosine": 0.9999},
                  llm={"prompt_tokens": 6, "ttft_ms": {"p50": ttft, "p90": ttft * 1.3},
                       "tpot_ms": {"p50": ttft / 3, "p90": ttft / 2},
                       "ttft_quantiles_ms": [ttft * (0.8 + 0.8 * i / 100) for i in range(101)],
                       "tpot_quantiles_ms": [ttft / 3 * (0.8 + 0.8 * i / 100) for i in range(101)],
                       "prefill_tokens_per_s": 30000.0, "decode_tokens_per_s": 15000.0, "load_ms": 20.0,
                       "peak_memory_mb": 6.0, "kv_cache_estimate_mb": 0.007,
                       "context": {"points": points, "longest_stable": 256 if swept else None, "stopped": None,
                                   "os_killed": False}})


def test_page_draws_each_decoders_ttft_tpot_and_memory_against_context() -> None:
    """#40 item 5: per measured decoder (test and backend) its TTFT and TPOT distributions and its
    peak memory with the KV-cache estimate against the context length, as inline SVG; the LLM
    table names the test; the quality figures are in the accuracy table."""
    page = html_of(report_of(decoder_record("onnxruntime-cpu", "test_short"),
                                 decoder_record("onnxruntime-cpu", "test_long", ttft=0.5, swept=False),
                                 decoder_record("llama.cpp", "test_short", ttft=0.7)))
    section = page[page.index('<section id="llm">'):page.index("</section>", page.index('<section id="llm">'))]
    for title in ("TTFT distribution", "TPOT distribution", "Memory against context"):
        assert f"<h3>{title}</h3><svg" in section, title
    # One curve per decoder in each distribution, two (peak, estimate) per swept decoder.
    ttft = section[section.index("TTFT distribution"):section.index("TPOT distribution")]
    assert ttft.count("<polyline") == 3 and "TTFT, ms" in ttft and "fraction of generations" in ttft
    memory = section[section.index("Memory against context"):]
    assert memory.count("<polyline") == 4 and memory.count('stroke-dasharray="5 3"') == 2
    assert "context length, tokens (log scale)" in memory and "KV-cache estimate: 0.125 at 256" in memory
    # Two tests of one backend are two rows, each naming its test.
    assert "<td>tests/test_llm.py::test_short[tiny_llm-onnxruntime-cpu]</td>" in section
    assert "<td>tests/test_llm.py::test_long[tiny_llm-onnxruntime-cpu]</td>" in section
    accuracy = page[page.index("<h3>Accuracy"):]
    accuracy = accuracy[:accuracy.index("</table>")]
    assert "<th>token agreement</th><th>top-1 agreement</th><th>KLD mean</th>" in accuracy
    assert '<td class="n">0.875</td><td class="n">0.938</td><td class="n">2.30e-04</td>' in accuracy
    summary = summary_of(report_of(decoder_record("onnxruntime-cpu", "test_short")))
    assert "| test | model | backend |" in summary


def test_report_compare_and_the_page_list_a_decoders_gated_figures(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """#39 item 2: ``report compare`` judges a decoder by the gate's figures (TTFT and TPOT P50 per
    process, peak memory, artifact size), and the page lists them and has the gate line in A/B mode."""
    def measured(ttft: float, peak: float, size: int) -> dict[str, Any]:
        decoder = decoder_record("onnxruntime-cpu", "test_gen", ttft=ttft)
        decoder["llm"]["processes"] = [{"ttft_p50_ms": ttft * f, "tpot_p50_ms": ttft / 3 * f} for f in (0.98, 1.0, 1.02)]
        return {**decoder, "peak_memory_mb": peak, "artifact_bytes": size}

    old, new = report_of(measured(0.2, 6.0, 100_000)), report_of(measured(0.4, 12.0, 180_000))
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert cli_main(["report", "compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 1
    said = capsys.readouterr().out
    for figure in ("TTFT P50", "TPOT P50", "peak memory", "artifact"):
        assert f"onnxruntime-cpu: {figure}" in said, (figure, said)
    assert '{"regressions": 4}' in said
    # The page, no gate having run: each figure a comparison beyond the threshold.
    page = html_of(new, old)
    assert all(f"{figure} +" in page for figure in ("TTFT P50", "TPOT P50", "peak memory", "artifact size"))
    # A/B: the gate's findings on the record are the page's verdict, and its line is on the page.
    new["records"][0]["baseline_check"] = {"mode": "ab", "verdict": "failed", "folder": "main-models",
                                           "findings": [{"figure": "TTFT P50", "old": 0.2, "new": 0.4,
                                                         "verdict": "failed"}],
                                           "twin": {}}
    page = html_of(new)
    assert "merge gate (A/B against main-models): 1 compared, 1 regressed, 0 inconclusive" in page
    regressions = page[page.index("<h3>Regressions against the baseline"):]
    assert "TTFT P50 +100.0% (0.200 → 0.400)" in regressions[:regressions.index("</ul>")]


# ---------------------------------------------------------------- terminal table


def test_table_folds_backends_without_an_artifact_into_one_line_per_model() -> None:
    records = [record("tiny_mlp", "onnxruntime-cpu"), skipped_for("tiny_mlp", "executorch", ".pte"),
               skipped_for("tiny_mlp", "litert", ".tflite"), skipped_for("tiny_mlp", "litert-ref", ".tflite"),
               skipped_for("only_pte", "onnxruntime-cpu", ".onnx"),
               record("two_io", "litert", "skipped", skip_reason="ai-edge-litert is not installed")]
    records = [Record.from_json(r) for r in records]
    rows = table_rows(records)
    assert [(r[0], r[1]) for r in rows] == [("tiny_mlp", "onnxruntime-cpu"), ("two_io", "litert")]
    assert rows[1][-1] == "skipped [1]"  # another reason stays a row, the reason below the table
    footer = table_footer(records)
    assert footer[0] == "[1] skipped: ai-edge-litert is not installed"
    assert "tiny_mlp: no .pte, .tflite: executorch, litert, litert-ref skipped" in footer
    assert "only_pte: no .onnx: onnxruntime-cpu skipped" in footer
    assert not any("no .pte artifact" in cell for row in rows for cell in row)


def test_table_legend_for_a_reference_lane_at_zero_coverage() -> None:
    no_delegate = {"total_ops": 6, "delegated_ops": 0, "fallback_ops": 6, "fallback": 1.0, "partitions": 0,
                   "fallback_op_names": {"CONV_2D": 6}}
    records = [Record.from_json(record("m", "litert")), Record.from_json(record("m", "litert-ref", coverage=no_delegate))]
    rows = table_rows(records)
    assert rows[1][3] == "0%"
    assert any("litert-ref" in line and "no delegate by design" in line for line in table_footer(records))
    assert not any("no delegate" in line for line in table_footer(records[:1]))


def test_table_fits_100_columns_and_keeps_the_figures() -> None:
    long_model = "a_model_with_a_really_long_name_from_a_zoo_v2_int8_per_channel"
    records = [record(long_model, "onnxruntime-cpu@raspberry-pi-5-lab-rack-3", p50=1234.5678),
               record(long_model, "litert", "failed", violations=["x" * 300]),
               record("m", "litert", "skipped", skip_reason="the runtime is not installed here " * 5),
               skipped_for(long_model, "executorch", ".pte")]
    records = [Record.from_json(r) for r in records]
    lines = format_table(table_rows(records)) + table_footer(records)
    assert all(len(line) <= 100 for line in lines), [len(line) for line in lines]
    assert any("1234.568" in line for line in lines)  # figures are never cut
    assert any(line.startswith("a_model_") and "…" in line for line in lines)
    # Unlimited width on request (the Markdown summary and other callers).
    assert table_rows(records, width=None)[0][0] == long_model


# ---------------------------------------------------------------- HTML and Markdown on hand-written records


def test_every_name_is_escaped() -> None:
    evil = "<script>alert('x')</script>"
    bad = record(evil, "litert", "failed", violations=[f"P50 too slow <img src=x onerror=alert(1)> {evil}"])
    bad["coverage"]["fallback_op_names"] = {"<b>OP</b>": 1}
    baseline = report_of(record(evil, "litert", p50=0.5))
    page = html_of(report_of(bad, record(evil, 'onnx"runtime'), skipped_for(evil, "executorch", ".pte")),
                       baseline)
    assert "<script" not in page.lower() and "<img" not in page and "<b>OP" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert 'onnx"runtime' not in page and "onnx&quot;runtime" in page
    summary = summary_of(report_of(bad), baseline)
    outside_code = re.sub(r"`[^`]*`", "", summary)  # a code span shows its text as it is, never as HTML
    assert "<script" not in outside_code and "<img" not in outside_code
    assert "&lt;script&gt;" in summary


def test_page_has_overview_failures_first_and_every_section() -> None:
    records = [record("fast", "onnxruntime-cpu", p50=0.05), record("fast", "litert", p50=0.02),
               record("fast", "litert-ref", p50=0.2, coverage={"total_ops": 8, "delegated_ops": 0, "fallback_ops": 8,
                                                               "fallback": 1.0, "partitions": 0,
                                                               "fallback_op_names": {"ADD": 8}}),
               record("slow", "litert", "failed", violations=["P50 3.1 ms exceeds the budget 2 ms"]),
               record("legacy", "onnxruntime-cpu", latency_quantiles_ms=None),
               record("unmeasured", "onnxruntime-cpu", p50=None),
               skipped_for("fast", "executorch", ".pte")]
    page = html_of(report_of(*records))
    assert page.index("Failures (1)") < page.index('id="model-slow"') < page.index('id="model-fast"')
    assert "P50 3.1 ms exceeds the budget 2 ms" in page
    for heading in ("Latency distribution", "Load and first inference", "Peak memory", "Delegate coverage",
                    "Accuracy", "Figures"):
        assert heading in page
    assert "<polyline" in page and "CUMSUM" in page and "×2" in page
    assert "fast: no .pte: executorch skipped" in page
    assert "reference lane: no delegate by design" in page
    assert "Device × backend" not in page  # one machine: no matrix
    assert not EXTERNAL.search(page) and "http" not in page
    # every chart has a size of its own
    for svg in re.findall(r"<svg[^>]*>", page):
        width, height = re.search(r'width="(\d+)" height="(\d+)"', svg).groups()
        assert int(width) > 0 and int(height) > 0


def test_baseline_changes_and_regressions() -> None:
    """Against a stored report where no gate ran: the changes past the threshold are a comparison."""
    new = report_of(record("m", "litert", p50=1.25), record("m", "onnxruntime-cpu", p50=1.05))
    old = report_of(record("m", "litert", p50=1.0), record("m", "onnxruntime-cpu", p50=1.0))
    changes = {c.figure: c for c in changes_of(new["records"][0], old["records"][0])}
    assert changes["P50"].beyond and not changes["P50"].regressed and changes["P50"].text() == "+25.0%"
    assert not changes["peak memory"].marked and not changes["fallback"].marked
    assert not changes_of(new["records"][1], old["records"][1])[0].marked  # +5 % < 10 %
    page = html_of(new, old)
    assert "1 record(s) changed beyond 10%" in page and 'class="n changed"' in page and "regressed" not in page
    assert "Against the baseline" in page and "(baseline)" in page  # both distributions overlaid
    assert "stroke-dasharray" in page
    assert "0 record(s) changed beyond 50%" in html_of(new, old, max_regression=0.5)
    summary = summary_of(new, old)
    assert "_1.250 (+25.0%)_" in summary and "### Changes beyond 10% against the baseline" in summary
    # a record matched by (model, backend) when the test id changed
    renamed = copy.deepcopy(new)
    renamed["records"][0]["test"] = "tests/test_other.py::test_x[m-litert]"
    assert "1 record(s) changed beyond 10%" in html_of(renamed, old)


def test_a_comparison_uses_the_merge_gates_stored_rules() -> None:
    """+25 % over processes that spread 0.6x..1.7x is not significant, and +9 % of memory under 1 MB
    is allocator noise: the gate would pass both, so the comparison does not mark them."""
    noisy_new = record("m", "litert", p50=1.25, peak_memory_mb=10.9)
    noisy_new["processes"] = [{"p50": v, "p99": 2 * v, "runs": 5000} for v in (1.25, 0.7, 2.0)]
    noisy_old = record("m", "litert", p50=1.0, peak_memory_mb=10.0)
    noisy_old["processes"] = [{"p50": v, "p99": 2 * v, "runs": 5000} for v in (1.0, 0.6, 1.7)]
    changes = {c.figure: c for c in changes_of(noisy_new, noisy_old)}
    assert changes["P50"].text() == "+25.0%" and not changes["P50"].marked
    assert changes["peak memory"].text() == "+9.0%" and not changes["peak memory"].marked
    steady_new, steady_old = copy.deepcopy(noisy_new), copy.deepcopy(noisy_old)
    steady_new["processes"] = [{"p50": v, "p99": 2 * v, "runs": 5000} for v in (1.25, 1.26, 1.24)]
    steady_old["processes"] = [{"p50": v, "p99": 2 * v, "runs": 5000} for v in (1.0, 1.01, 0.99)]
    steady_new["peak_memory_mb"] = 30.0
    changes = {c.figure: c for c in changes_of(steady_new, steady_old)}
    assert changes["P50"].beyond and changes["peak memory"].beyond
    assert not changes["P99"].marked  # a tail change is a note against stored numbers, never gated
    # Where a gate ran, its verdict is the mark: the steady +25 % it passed (say, inconclusive on a busy
    # machine) is not regressed, and nothing it did not judge is judged again.
    steady_new["baseline_check"] = {"mode": "stored", "baseline": "t", "verdict": "inconclusive", "findings": [
        {"figure": "P50 latency", "verdict": "inconclusive", "old": 1.0, "new": 1.25, "threshold": 0.1,
         "statistic": None, "rule": "stored", "message": "..."}]}
    changes = {c.figure: c for c in changes_of(steady_new, steady_old)}
    assert not any(c.marked for c in changes.values()) and changes["P50"].inconclusive


def test_merged_report_has_the_device_by_backend_matrix() -> None:
    a = report_of(record("m", "litert", p50=1.0), record("m", "onnxruntime-cpu", p50=2.0), name="x86-ci")
    b = report_of(record("m", "litert", "failed", p50=4.0, violations=["slow"]), name="pi5")
    # a record that ran on a device of the run has the device in its backend and its record
    b["records"].append(record("m", "litert@phone", p50=9.0, device={"name": "phone", "machine": {}}))
    merged = merged_of([a, b])
    page = html_of(merged)
    matrix = page[page.index('id="matrix"'):page.index("</section>", page.index('id="matrix"'))]
    for label in ("x86-ci", "pi5", "pi5 / phone", "litert", "onnxruntime-cpu", "P50 4.00 ms", "failed"):
        assert label in matrix
    summary = summary_of(merged)
    assert "| model | device | backend |" in summary and "| m | pi5 / phone | litert@phone |" in summary


def test_summary_is_a_markdown_table() -> None:
    records = [record("m", "onnxruntime-cpu"), record("m", "litert", "failed", violations=["a | b\nc"]),
               skipped_for("m", "executorch", ".pte")]
    lines = summary_of(report_of(*records)).splitlines()
    assert lines[0].startswith("## pytest-edge conformance: 1 failed, 1 passed, 1 skipped")
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 4 and set(table[1]) <= set("|-: ")
    assert all(re.sub(r"\\\|", "", line).count("|") == table[0].count("|") for line in table)
    assert "- m: no .pte: executorch skipped" in lines
    assert "  - a \\| b c" in lines  # a pipe or newline in a message cannot break the list


def test_cli_report_html_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = report_of(record("m", "litert", p50=2.0))
    (tmp_path / "new.json").write_text(json.dumps(report))
    (tmp_path / "old.json").write_text(json.dumps(scaled(report, 0.5)))
    assert cli_main(["report", "html", str(tmp_path / "new.json"), str(tmp_path / "old.json"),
                     "-o", str(tmp_path / "out/page.html")]) == 0
    assert "1 record(s) changed beyond 10%" in (tmp_path / "out/page.html").read_text()
    capsys.readouterr()
    assert cli_main(["report", "summary", str(tmp_path / "new.json")]) == 0
    assert "| m | litert |" in capsys.readouterr().out
    assert cli_main(["report", "summary", str(tmp_path / "new.json"), str(tmp_path / "old.json"),
                     "--max-regression", "200%", "-o", str(tmp_path / "s.md")]) == 0
    assert "Regressions" not in (tmp_path / "s.md").read_text()
    assert cli_main(["report", "html", str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.html")]) == 2
    assert "cannot read report" in capsys.readouterr().err


def test_pages_are_replaced_whole_and_odd_reports_are_said_not_raised(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    report = report_of(record("m", "litert", p50=2.0))
    (tmp_path / "new.json").write_text(json.dumps(report))
    page = tmp_path / "page.html"
    page.write_text("the old page")
    page.chmod(0o640)
    assert cli_main(["report", "html", str(tmp_path / "new.json"), "-o", str(page)]) == 0
    assert "pytest-edge" in page.read_text() and (page.stat().st_mode & 0o777) == 0o640  # replaced, mode kept
    assert not list(tmp_path.glob(".page.html.*.tmp"))
    # A target that is not a plain file (a pipe, /dev/stdout) is written in place, never replaced.
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    import threading
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    assert cli_main(["report", "summary", str(tmp_path / "new.json"), "-o", str(fifo)]) == 0
    reader.join(10)
    assert b"| m | litert |" in received[0] and stat.S_ISFIFO(fifo.stat().st_mode)
    # A link to a file (committed, pointing out of the project) is replaced, its target untouched.
    outside = tmp_path / "outside.html"
    outside.write_text("not ours")
    link = tmp_path / "linked.html"
    link.symlink_to(outside)
    assert cli_main(["report", "html", str(tmp_path / "new.json"), "-o", str(link)]) == 0
    assert outside.read_text() == "not ours" and not link.is_symlink() and "pytest-edge" in link.read_text()
    # A verdict that is markup is no verdict: a Report refuses it (as load_report refuses a file's).
    report["records"][0]["verdict"] = "<img src=x onerror=alert(1)>"
    with pytest.raises(ValueError, match="unknown verdict"):
        summary_of(report)
    report["records"][0]["verdict"] = "passed"  # read from a file, such a verdict is refused (load_report)
    # A figure that is not a number: a message naming the file and the field, not a TypeError.
    report["records"][0]["processes"] = [{"p50": "fast"}]
    (tmp_path / "odd.json").write_text(json.dumps(report))
    capsys.readouterr()
    assert cli_main(["report", "html", str(tmp_path / "odd.json"), "-o", str(tmp_path / "odd.html")]) == 2
    assert "'processes[0].p50' must be a number or null, got 'fast'" in capsys.readouterr().err


# ---------------------------------------------------------------- a real run, in a real browser

RUN_TEST = """
import pytest

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert", "litert-ref"])
def test_mlp(edge_model):
    pass

@pytest.mark.edge(model="tiny_cnn", backends=["onnxruntime-cpu", "litert", "litert-ref"], atol=1e-4, rtol=1e-3)
def test_cnn(edge_model):
    pass

@pytest.mark.edge(model="two_io", backends=["onnxruntime-cpu", "litert", "litert-ref"])
def test_two_io(edge_model):
    assert False, "the body fails"
"""

# Added to a copy of the page only: the rendered size of every chart and the resources the page
# fetched (Resource Timing lists every image, stylesheet, font or script a page requested).
PROBE = """<script>
window.addEventListener("load", () => {
  const sizes = [...document.querySelectorAll("svg")].map(s => { const r = s.getBoundingClientRect();
                                                                   return [r.width, r.height]; });
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({sizes, resources: performance.getEntriesByType("resource").map(e => e.name)});
  document.body.appendChild(probe);
});
</script></body>"""


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shutil.which("chromium") or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-quic", "--no-first-run", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                           "--window-size=1280,2000", *args],
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_real_report_renders_in_headless_chromium(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(RUN_TEST)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-measure", "--edge-report=r.json",
                                           "--edge-html=out/r.html", "--edge-summary=r.md")
    result.assert_outcomes(passed=6, failed=1, skipped=2)
    out = result.stdout.str()
    table = out[out.index("pytest-edge conformance"):].splitlines()[1:]
    assert "two_io: no .tflite: litert, litert-ref skipped" in table
    assert not any("skipped: no .tflite artifact" in line for line in table)
    assert any("litert-ref" in line and "no delegate by design" in line for line in table)
    assert all(len(line) <= 100 for line in table[:table.index("two_io: no .tflite: litert, litert-ref skipped")])
    assert f"html: {pytester.path / 'out/r.html'}" in out and f"summary: {pytester.path / 'r.md'}" in out

    report = json.loads((pytester.path / "r.json").read_text())
    assert all(len(r["latency_quantiles_ms"]) == 101 for r in report["records"] if r["verdict"] == "passed")
    page = (pytester.path / "out/r.html").read_text()
    assert "the body fails" in page or "AssertionError" in page
    summary = (pytester.path / "r.md").read_text()
    assert "| tiny\\_mlp | litert |" in summary and "### Failures (1)" in summary

    # Two devices (the report relabelled) against a baseline (the same figures, 20 % faster).
    other = scaled(report, 1.5)
    merged = merged_of([{**report, "machine": {**report["machine"], "name": "x86-ci"}},
                            {**other, "machine": {**other["machine"], "name": "pi5"}}])
    # And a decoder's charts (hand-written records: no decoder runs in this test).
    merged["records"] += [decoder_record("onnxruntime-cpu", "test_gen"), decoder_record("llama.cpp", "test_gen", 0.6)]
    html_text = html_of(merged, scaled(report, 0.8))
    size = len(html_text.encode())
    print(f"HTML size: {size} bytes for {len(merged['records'])} records")
    assert size < 300_000, size  # well under 1 MB for tens of records
    assert "Device × backend" in html_text and "pi5" in html_text and "x86-ci" in html_text
    # No gate ran against this baseline: its changes are a comparison, never called regressed.
    assert "changed beyond 10% against the baseline" in html_text and 'class="n changed"' in html_text
    assert "regressed" not in html_text
    assert not EXTERNAL.search(html_text) and "http" not in html_text
    svg_count = html_text.count("<svg")
    assert svg_count >= 12  # per model: distribution, load, memory; a coverage bar per backend; TTFT, TPOT, context
    assert "<h3>TTFT distribution</h3><svg" in html_text and "<h3>Memory against context</h3><svg" in html_text

    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it as root): "
                    "the page was checked as text but not rendered")
    page_path = pytester.path / "merged.html"
    page_path.write_text(html_text)
    probe_path = pytester.path / "probe.html"
    probe_path.write_text(html_text.replace("</body>", PROBE))
    dom = _chromium("--dump-dom", probe_path.as_uri(), profile=pytester.path / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    probe = json.loads(html.unescape(re.search(r"<pre id=\"probe\">(.*?)</pre>", dom.stdout, re.S).group(1)))
    assert len(probe["sizes"]) == svg_count
    assert all(w > 0 and h > 0 for w, h in probe["sizes"]), probe["sizes"]
    assert probe["resources"] == []  # nothing was requested: no font, image, stylesheet or script
    # The page itself, as a user opens it: the DOM has every chart, and the screenshot shows them.
    dom = _chromium("--dump-dom", page_path.as_uri(), profile=pytester.path / "profile")
    assert dom.stdout.count("<svg") == svg_count and dom.stdout.count("<polyline") >= 12
    png = pytester.path / "page.png"
    shot = _chromium(f"--screenshot={png}", page_path.as_uri(), profile=pytester.path / "profile")
    assert png.is_file(), shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 50_000


def test_unwritable_html_and_summary_are_error_lines_and_fail_the_run(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
import pytest

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
def test_mlp(edge_model):
    pass
""")
    (pytester.path / "a_file").write_text("")
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-html=a_file/r.html",
                                           "--edge-summary=s.md")
    result.assert_outcomes(passed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*tiny_mlp*onnxruntime-cpu*passed*",
                                 f"pytest-edge: cannot write the HTML report {pytester.path / 'a_file/r.html'}: *",
                                 f"summary: {pytester.path / 's.md'}"])
    assert not any(line.startswith("html: ") for line in result.stdout.lines)
    assert (pytester.path / "s.md").read_text().startswith("## pytest-edge conformance: 1 passed")
