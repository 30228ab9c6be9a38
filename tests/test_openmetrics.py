"""OpenMetrics text of a run's figures (report/openmetrics.py, --edge-openmetrics, ``pytest-edge report
openmetrics``), checked by Prometheus' own programs: ``promtool check metrics``, a real Prometheus on
loopback scraping the file from an HTTP server and from node_exporter's textfile collector, each
queried back through its HTTP API. Debian's ``prometheus`` package has them (scripts/test.sh installs
it where it can); where a program is absent its test is skipped with the reason."""

from __future__ import annotations

import http.server
import json
import math
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from edge_helpers import record
from loopback import free_port

from pytest_edge.cli import main
from pytest_edge.core.record import Record
from pytest_edge.report.openmetrics import CONTENT_TYPE, FIGURES, render_openmetrics, samples

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
NO_PROMETHEUS = "Debian's prometheus package (promtool, prometheus) is not installed (apt-get install prometheus)"
# How long a server on a loaded 2-core machine may take to start or scrape: a bound on waiting, never
# on what a test asserts.
WAIT_S = 180.0


def _rich() -> list[Record]:
    """A tensor model's record with every figure, a compile-time target's with NPU memories, a
    decoder's, and one that measured nothing."""
    tensor = record("tiny_cnn", "litert", p50=0.41, artifact_bytes=5816, steady_memory_mb=11.0,
                    counted={"instructions": 123456.0})
    npu = record("tiny_cnn", "ethos-u55-128", p50=None, npu={"memories": {"sram": 2048, "off_chip_flash": 9000}})
    decoder = record("tiny_llm", "onnxruntime-cpu@pi5", p50=None,
                     llm={"ttft_ms": {"p50": 12.5, "p90": 14.0}, "tpot_ms": {"p50": 3.25, "p90": 3.5},
                          "prefill_tokens_per_s": 800.0,
                          "decode_tokens_per_s": 307.7, "load_ms": 40.0, "peak_memory_mb": 64.0})
    bare = record("quiet", "litert", p50=None, coverage=None, test='tests/t.py::t["odd\\name"\n]')
    return [Record.from_json(data) for data in (tensor, npu, decoder, bare)]


def test_each_figure_is_one_family_in_base_units_and_an_unmeasured_one_is_left_out() -> None:
    text = render_openmetrics(_rich(), commit="0123abcd", machine="ci-1")
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(families) == len(set(families)) and all(line.endswith(" gauge") for line in text.splitlines()
                                                        if line.startswith("# TYPE"))
    assert "edge_npu_dram_bytes" not in families  # no record planned DRAM: no family, no made-up zero
    for line in text.splitlines():
        if line.startswith("# UNIT"):
            _, _, family, unit = line.split()
            assert family.endswith("_" + unit) and unit in ("seconds", "bytes", "ratio")
    found = {(s.figure.name, dict(s.labels)["model"], dict(s.labels)["backend"]): s for s in samples(_rich(), "c", "ci-1")}
    assert math.isclose(found["latency_p50_seconds", "tiny_cnn", "litert"].value, 0.41e-3)
    assert found["peak_memory_bytes", "tiny_cnn", "litert"].value == 10.0 * 2**20
    assert found["npu_sram_bytes", "tiny_cnn", "ethos-u55-128"].value == 2048
    assert ("latency_p50_seconds", "tiny_cnn", "ethos-u55-128") not in found  # not measured there
    ttft = found["llm_ttft_p50_seconds", "tiny_llm", "onnxruntime-cpu"]
    assert math.isclose(ttft.value, 0.0125) and dict(ttft.labels)["device"] == "pi5"
    assert dict(found["fallback_ratio", "tiny_cnn", "litert"].labels) == {
        "model": "tiny_cnn", "backend": "litert", "device": "ci-1", "commit": "c",
        "test": "tests/test_m.py::test_m[tiny_cnn-litert]"}
    assert not any(key[1] == "quiet" for key in found)  # measured nothing: in no family
    # A label value is escaped as OpenMetrics says: backslash, double quote, newline.
    bare = Record.from_json(record("quiet", "litert", p50=1.0, test='t["a\\b"\n]'))
    assert 'test="t[\\"a\\\\b\\"\\n]"' in render_openmetrics([bare])


def test_nothing_measured_is_an_empty_exposition() -> None:
    assert render_openmetrics([Record.from_json(record("m", "litert", p50=None, coverage=None))]) == "# EOF\n"


@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMETHEUS)
def test_promtool_accepts_the_text() -> None:
    text = render_openmetrics(_rich(), commit="0123abcd", machine="ci-1")
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr
    # promtool does fail a text it does not accept (a counter without _total, a unit abbreviation).
    bad = "# TYPE edge_load_ms counter\nedge_load_ms 3\n"
    assert subprocess.run([PROMTOOL, "check", "metrics"], input=bad, capture_output=True, text=True,
                          timeout=120).returncode != 0


class _Serve(http.server.BaseHTTPRequestHandler):
    text = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(self.text)))
        self.end_headers()
        self.wfile.write(self.text)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metrics_server(tmp_path: Path) -> Iterator[tuple[int, type[_Serve]]]:
    handler = type("Handler", (_Serve,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def _prometheus(tmp_path: Path, target: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                      f"  - job_name: edge\n    static_configs:\n      - targets: ['{target}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    return process, port


def _api(port: int, path: str, **params: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _query_until_found(process: subprocess.Popen, port: int, query: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The query's result once Prometheus has scraped the figure (WAIT_S at most)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
        try:
            result = _api(port, "query", query=query)["data"]["result"]
        except OSError:  # not listening yet
            result = []
        if result:
            return result
        time.sleep(0.5)
    targets = _api(port, "targets")
    pytest.fail(f"Prometheus did not return {query} within {WAIT_S} s; targets: {json.dumps(targets)[:2000]}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
def test_prometheus_scrapes_the_file_and_returns_a_figure(tmp_path: Path, metrics_server) -> None:
    port, handler = metrics_server
    path = tmp_path / "edge.om"
    from pytest_edge.report.openmetrics import write_openmetrics

    write_openmetrics(path, _rich(), commit="0123abcd", machine="ci-1")
    handler.text = path.read_bytes()
    process, api = _prometheus(tmp_path, f"127.0.0.1:{port}")
    try:
        result = _query_until_found(process, api, 'edge_latency_p50_seconds{model="tiny_cnn"}', tmp_path)
        assert len(result) == 1
        labels, value = result[0]["metric"], float(result[0]["value"][1])
        assert math.isclose(value, 0.41e-3, rel_tol=1e-12)
        assert labels["backend"] == "litert" and labels["device"] == "ci-1" and labels["commit"] == "0123abcd"
        assert labels["test"] == "tests/test_m.py::test_m[tiny_cnn-litert]"
        ttft = _query_until_found(process, api, "edge_llm_ttft_p50_seconds", tmp_path)
        assert math.isclose(float(ttft[0]["value"][1]), 0.0125) and ttft[0]["metric"]["device"] == "pi5"
        # Read as OpenMetrics (the content type said so): the family's unit is Prometheus' metadata.
        metadata = _api(api, "metadata", metric="edge_latency_p50_seconds")["data"]["edge_latency_p50_seconds"]
        assert metadata[0]["type"] == "gauge" and metadata[0]["unit"] == "seconds"
        health = [t["health"] for t in _api(api, "targets")["data"]["activeTargets"]]
        assert health == ["up"]
    finally:
        _stop(process)


@pytest.mark.skipif(PROMETHEUS is None or NODE_EXPORTER is None,
                    reason=f"{NO_PROMETHEUS}; node_exporter comes with it (prometheus-node-exporter)")
def test_node_exporter_textfile_collector_reads_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "textfile"
    folder.mkdir()
    assert main(["report", "openmetrics", str(_report(tmp_path)), "--commit", "feedbeef",
                 "-o", str(folder / "edge.prom")]) == 0
    port = free_port()
    log = open(tmp_path / "node_exporter.log", "wb")
    exporter = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                                 "--collector.textfile", f"--collector.textfile.directory={folder}"],
                                stdout=log, stderr=log)
    process, api = _prometheus(tmp_path, f"127.0.0.1:{port}")
    try:
        result = _query_until_found(process, api, 'edge_artifact_size_bytes{model="tiny_cnn"}', tmp_path)
        assert [float(r["value"][1]) for r in result] == [5816.0] and result[0]["metric"]["commit"] == "feedbeef"
        # node_exporter says whether it could read the file: an error gauge of 0.
        errors = _query_until_found(process, api, "node_textfile_scrape_error", tmp_path)
        assert float(errors[0]["value"][1]) == 0.0, (tmp_path / "node_exporter.log").read_text()[-2000:]
    finally:
        _stop(process)
        _stop(exporter)


def _report(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema": "pytest-edge/report/1", "created": "2026-12-03T00:00:00Z",
                                "machine": {"cpu": "x", "name": "ci-1"}, "records": [r.to_json() for r in _rich()]}))
    return path


def test_report_openmetrics_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "openmetrics", str(_report(tmp_path)), "--commit", "abc"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("# EOF\n") and 'device="ci-1",commit="abc"' in out
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["report", "openmetrics", str(bad)]) == 2
    assert "not a pytest-edge report" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_edge_openmetrics_writes_the_runs_figures(pytester: pytest.Pytester, models: Path, workers: str | None) -> None:
    if workers:
        pytest.importorskip("xdist", reason="pytest-xdist merges the workers' records")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
        def test_mlp(edge_model):
            pass
        @pytest.mark.edge(model="tiny_cnn", backends=["onnxruntime-cpu"])
        def test_cnn(edge_model):
            pass
    """)
    args = ["--edge-update-golden", "--edge-measure", "--edge-openmetrics=out/edge.om", "--edge-report=r.json",
            "--edge-history-commit=abc123", *(["-n", workers] if workers else [])]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    text = (pytester.path / "out/edge.om").read_text()
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    # Both workers' records, merged as the JSON report's are: one P50 sample per record.
    p50 = [line for line in text.splitlines() if line.startswith("edge_latency_p50_seconds{")]
    assert len(p50) == len(records) == 2 and all('commit="abc123"' in line for line in p50)
    for rec in records:
        value = next(line for line in p50 if f'test="{rec["test"]}"' in line).rsplit(" ", 1)[1]
        assert math.isclose(float(value), rec["latency_ms"]["p50"] / 1000, rel_tol=1e-9)
    if PROMTOOL is not None:
        done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
