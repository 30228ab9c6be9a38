"""report/terminal.py and report/outputs.py: what a session prints at its end (the conformance table,
where the reports went, the goldens no test used, the decoders' figures) through a stand-in for
pytest's TerminalReporter, and what it writes (the JSON report, the HTML page, the Markdown summary,
each on its own), from records built as a finished check builds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import pytest_edge.report.html
from pytest_edge.core.generation_figures import GenerationFigures, TimingPercentiles
from pytest_edge.core.record import GenerationRecord, Record
from pytest_edge.core.settings import Settings
from pytest_edge.golden.use import GoldenUse
from pytest_edge.report.json_report import Report, build_report
from pytest_edge.report.outputs import finish_session, write_outputs
from pytest_edge.report.terminal import write_golden_use, write_nothing_ran, write_summary
from pytest_edge.report.table import DASH
from pytest_edge.measurement.machine import Machine


class Terminal:
    """What pytest's TerminalReporter is asked: sections and lines, with their markup."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str, dict[str, bool]]] = []

    def section(self, title: str, sep: str = "=", **markup: bool) -> None:
        self.said.append(("section", title, markup))

    def write_line(self, line: str, **markup: bool) -> None:
        self.said.append(("line", line, markup))

    @property
    def sections(self) -> list[str]:
        return [text for kind, text, _ in self.said if kind == "section"]

    @property
    def lines(self) -> list[str]:
        return [text for kind, text, _ in self.said if kind == "line"]


def tensor_record(model: str = "net", backend: str = "onnxruntime-cpu", *, peak: float | None = 10.25,
                  violations: tuple[str, ...] = ()) -> Record:
    record = Record(f"tests/test_m.py::test_m[{model}-{backend}]",
                    {"name": model, "artifact": f"models/{model}.onnx", "sha256": "0" * 64}, backend,
                    measured_runs=50, load_ms=3.04, first_inference_ms=1.5,
                    latency_ms={"p50": 1.2345, "p90": 1.5, "p99": 2.5, "mean": 1.3, "min": 1.1},
                    peak_memory_mb=peak, coverage={"total_ops": 8, "delegated_ops": 8, "fallback": 0.0, "partitions": 1},
                    accuracy={"reference": "onnxruntime-cpu", "max_abs_err": 1.5e-6, "cosine": 1.0}, checked=True)
    return record.conclude(list(violations))


def decoder_record(tpot_p50: float | None = 2.5) -> Record:
    measured = GenerationFigures(prompt_tokens=6, ttft_ms=TimingPercentiles(11.0, 12.0),
                                 tpot_ms=TimingPercentiles(tpot_p50, tpot_p50),
                                 decode_tokens_per_s=400.0 if tpot_p50 else None,
                                 decode_tokens_per_s_sd=3.2 if tpot_p50 else None)
    block = GenerationRecord(new_tokens=3 if tpot_p50 else 1, kv_cache="runtime", measured=measured)
    return Record("tests/test_llm.py::test_short[tiny_llm-llama.cpp]", {"name": "tiny_llm"}, "llama.cpp",
                  accuracy={"token_agreement": 1.0}, generation=block, checked=True).conclude([])


def settings(tmp_path: Path, **paths: str) -> Settings:
    return Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, **paths)


def summary(terminal: Terminal, the_settings: Settings, records: list[Record], use: GoldenUse | None = None,
            report_error: str = "") -> None:
    write_summary(terminal, the_settings, records, use or GoldenUse(), under_load=False, inconclusive=0,
                  xdist_workers=None, report_error=report_error)


# ------------------------------------------------------------------ terminal


def test_nothing_ran_and_nothing_asked_prints_nothing(tmp_path: Path) -> None:
    terminal = Terminal()
    write_nothing_ran(terminal, settings(tmp_path), GoldenUse())
    assert terminal.said == []


def test_nothing_ran_says_which_asked_reports_were_not_written(tmp_path: Path) -> None:
    terminal = Terminal()
    write_nothing_ran(terminal, settings(tmp_path, report="out/edge.json", summary="out/summary.md"), GoldenUse())
    assert terminal.sections == ["pytest-edge"]
    [(kind, line, markup)] = terminal.said[1:]
    assert line == (f"pytest-edge: no edge test ran, so nothing was written (report {tmp_path / 'out/edge.json'}, "
                    f"summary {tmp_path / 'out/summary.md'})")
    assert markup == {"yellow": True}


def test_nothing_ran_still_reports_unused_goldens(tmp_path: Path) -> None:
    use = GoldenUse()
    use.unused, use.models_used = [("old_net", "default")], set()
    terminal = Terminal()
    write_nothing_ran(terminal, settings(tmp_path), use)
    assert terminal.sections == ["pytest-edge"]
    [line] = terminal.lines
    assert line.startswith("pytest-edge: 1 unused golden set: ") and "old_net" in line
    assert "(no test uses this model)" in line and line.endswith("remove it with pytest-edge golden prune")


def test_summary_prints_the_table_with_each_figure_in_its_column(tmp_path: Path) -> None:
    terminal = Terminal()
    summary(terminal, settings(tmp_path), [tensor_record(), tensor_record("other", peak=None)])
    assert terminal.sections == ["pytest-edge conformance"]
    header = next(line for line in terminal.lines if line.startswith("model"))
    row = next(line for line in terminal.lines if line.startswith("net "))
    columns = header.split()
    assert columns[:3] == ["model", "backend", "max"]
    # Each figure starts under its header (a table's columns align).
    for title, shown in (("P50", "1.234"), ("P99", "2.500"), ("load", "3.0"), ("peak", "10.2"), ("verdict", "passed")):
        assert row[header.index(title):].startswith(shown), (title, row)
    unmeasured = next(line for line in terminal.lines if line.startswith("other "))
    assert unmeasured[header.index("peak"):].startswith(DASH)  # not measured: a dash, never 0


def test_summary_says_where_the_reports_are_and_not_a_report_that_failed(tmp_path: Path) -> None:
    the_settings = settings(tmp_path, report="edge.json", html="edge.html")
    error = f"pytest-edge: cannot write the report {tmp_path / 'edge.json'}: Permission denied"
    terminal = Terminal()
    summary(terminal, the_settings, [tensor_record()], report_error=error)
    assert ("line", error, {"red": True, "bold": True}) in terminal.said
    assert f"html: {tmp_path / 'edge.html'}" in terminal.lines
    assert f"report: {tmp_path / 'edge.json'}" not in terminal.lines  # the one that was not written


def test_summary_adds_the_generation_section_for_a_measured_decoder_only(tmp_path: Path) -> None:
    terminal = Terminal()
    summary(terminal, settings(tmp_path), [tensor_record()])
    assert "pytest-edge LLM generation" not in terminal.sections
    terminal = Terminal()
    summary(terminal, settings(tmp_path), [tensor_record(), decoder_record()])
    assert terminal.sections == ["pytest-edge conformance", "pytest-edge LLM generation"]
    assert terminal.lines[-1] == ("tests/test_llm.py::test_short[tiny_llm-llama.cpp]: TTFT P50 11.000 ms (6 tokens), "
                                  "TPOT P50 2.500 ms, decode 400 ± 3 tokens/s")


def test_summary_of_a_decoder_with_one_new_token_does_not_raise(tmp_path: Path) -> None:
    """No TPOT sample (new_tokens=1): the line says a dash; the summary is not lost to a TypeError."""
    terminal = Terminal()
    summary(terminal, settings(tmp_path), [decoder_record(tpot_p50=None)])
    assert terminal.lines[-1].endswith(f"TPOT P50 {DASH}, decode {DASH} tokens/s")


def test_summary_shows_a_hostile_name_as_escapes_not_terminal_controls(tmp_path: Path) -> None:
    terminal = Terminal()
    summary(terminal, settings(tmp_path), [tensor_record("evil\x1b[2Jnet", violations=("bad\x1b]0;title\x07",))])
    assert not any("\x1b" in line or "\x07" in line for line in terminal.lines)
    assert any("\\x1b" in line for line in terminal.lines)


def test_golden_use_error_is_said_in_yellow() -> None:
    use = GoldenUse()
    use.error = "pytest-edge: cannot tell the unused goldens: \x1b[31mred"
    terminal = Terminal()
    write_golden_use(terminal, use)
    assert terminal.said == [("line", "pytest-edge: cannot tell the unused goldens: \\x1b[31mred", {"yellow": True})]


# ------------------------------------------------------------------ outputs


def report_of(*records: Record) -> Report:
    return build_report(list(records), Machine(cpu="Test CPU", cores=2, os="Linux", python="3.11"))


def test_write_outputs_writes_each_report_asked_for(tmp_path: Path) -> None:
    report = report_of(tensor_record("<script>alert(1)</script>"))
    errors = write_outputs(report, settings(tmp_path, report="out/edge.json", html="out/edge.html",
                                            summary="out/summary.md"), ["<section id='history'></section>"])
    assert errors == []
    assert json.loads((tmp_path / "out/edge.json").read_text())["records"] == report.to_json()["records"]
    page = (tmp_path / "out/edge.html").read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "<section id='history'></section>" in page  # the sections the page adds after the models
    assert "&lt;script&gt;" in (tmp_path / "out/summary.md").read_text()  # Markdown renders HTML too


def test_write_outputs_writes_nothing_unasked(tmp_path: Path) -> None:
    assert write_outputs(report_of(tensor_record()), settings(tmp_path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_unwritable_output_is_one_error_line_and_the_others_are_written(tmp_path: Path) -> None:
    (tmp_path / "edge.json").mkdir()  # a folder where the report should go
    errors = write_outputs(report_of(tensor_record()), settings(tmp_path, report="edge.json", html="edge.html",
                                                                summary="summary.md"))
    [error] = errors
    assert error.startswith(f"pytest-edge: cannot write the report {tmp_path / 'edge.json'}: ")
    assert "\n" not in error
    assert (tmp_path / "edge.html").is_file() and (tmp_path / "summary.md").is_file()


def test_a_page_that_cannot_render_is_an_error_and_the_rest_is_written(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> str:
        raise KeyError("latency_ms")

    monkeypatch.setattr(pytest_edge.report.html, "render_html", broken)
    errors = write_outputs(report_of(tensor_record()), settings(tmp_path, report="edge.json", html="edge.html",
                                                                summary="summary.md"))
    assert errors == ["pytest-edge: cannot render the HTML report: KeyError: 'latency_ms'"]
    assert not (tmp_path / "edge.html").exists()
    assert (tmp_path / "edge.json").is_file() and (tmp_path / "summary.md").is_file()


def test_a_session_end_writes_what_is_asked_and_fails_on_a_gate_that_compared_nothing(tmp_path: Path) -> None:
    from dataclasses import replace

    from pytest_edge.core.baseline_check import BaselineCheck

    machine = Machine(cpu="Test CPU", cores=2, os="Linux", python="3.11")
    (tmp_path / "edge.json").mkdir()  # unwritable: one error, and the page is still written
    end = finish_session([tensor_record()], machine, settings(tmp_path, report="edge.json", html="edge.html"))
    [error] = end.errors
    assert error.startswith(f"pytest-edge: cannot write the report {tmp_path / 'edge.json'}: ")
    assert end.over_time is None and (tmp_path / "edge.html").is_file()
    # Every gated record new: the gate compared nothing, which fails the run after the outputs' errors.
    new = replace(tensor_record(), baseline_check=BaselineCheck(mode="ab", new=True, looked_for="base/net.onnx",
                                                                folder="base"))
    end = finish_session([new], machine, settings(tmp_path))
    [error] = end.errors
    assert error.startswith("pytest-edge: the merge gate compared nothing: --edge-baseline-models base holds no twin")
    assert finish_session([tensor_record()], machine, settings(tmp_path)).errors == []  # nothing asked, nothing gated
