"""The run history (report/history.py and the modules it gathers: history_runs.py, history_series.py,
history_creep.py; --edge-history, ``pytest-edge history``) and its creep alert
(--edge-max-creep), judged on synthetic histories: an unchanged model with noise never alerts, a
staged creep of 1 % per run alerts naming the first run that moved. No test bounds a time."""

from __future__ import annotations

import html
import json
import math
import platform
import random
import re
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_edge.cli import main
from pytest_edge.core.record import Record
from pytest_edge.measurement.combined import MeasuredProcess
from pytest_edge.report.history_creep import judge_creep
from pytest_edge.report.history_runs import Run, append_run, load_history, read_commit
from pytest_edge.report.history_series import series, show_lines


def _record(p50s: list[float], instructions: float | None = None, peak: float = 10.0,
            artifact: int = 5000) -> dict[str, Any]:
    """A measured record as the plugin writes it (a check that ran: its accuracy, here none): one P50
    per fresh process (50 runs each)."""
    record = {"test": "tests/test_m.py::test_m[tiny-onnxruntime-cpu]", "model": {"name": "tiny"},
              "backend": "onnxruntime-cpu", "verdict": "passed", "accuracy": None,
              "latency_ms": {"p50": sorted(p50s)[len(p50s) // 2]}, "measured_runs": 50 * len(p50s),
              "processes": [{"p50": v, "runs": 50} for v in p50s], "peak_memory_mb": peak, "artifact_bytes": artifact}
    if instructions is not None:
        record["counted"] = {"instructions": instructions}
    return record


def _history(seed: int, creep: float = 0.0, start: int = 1, runs: int = 10, noise: float = 0.03) -> list[Run]:
    """``runs`` runs of one model, 3 fresh processes each: P50s with ``noise`` (log sd) per process and a
    third of it per run (the machine's state), peak memory within 0.3 MB, instructions within 0.01 %;
    from run ``start`` on, every figure grows by ``creep`` per run (work: the model is calibrated to grow)."""
    rng = random.Random(seed)
    found = []
    for index in range(runs):
        level = (1 + creep) ** (index - start + 1) if index >= start else 1.0
        machine = rng.gauss(0, noise / 3)
        p50s = [level * math.exp(rng.gauss(0, noise) + machine) for _ in range(3)]
        record = _record(p50s, instructions=1e6 * level * (1 + rng.gauss(0, 1e-4)),
                         peak=40.0 * level + rng.uniform(-0.3, 0.3), artifact=round(5000 * level))
        found.append(Run(f"2026-12-{index + 1:02d}T00:00:00Z", f"c{index:02d}" + "0" * 38, "ci-1",
                         (Record.from_json(record),)))
    return found


def test_ten_runs_of_an_unchanged_model_with_noise_never_alert() -> None:
    for seed in range(200):
        assert judge_creep(_history(seed), 0.05, 10) == [], seed


def test_a_staged_creep_of_one_percent_per_run_alerts_naming_the_first_run_that_moved() -> None:
    for seed in range(50):
        history = _history(seed, creep=0.01, start=3)
        creeps = {c.figure: c for c in judge_creep(history, 0.05, 10)}
        # Work counted (instructions) and the artifact's size crept by 1 % per run from run 3 on; peak
        # memory moved by 2.4 MB over 40 MB (+6 %), beyond the gate's 1 MB floor too.
        assert {"instructions", "artifact size", "peak memory"} <= set(creeps), (seed, creeps)
        for figure in ("instructions", "artifact size"):  # exact figures: the run named is the one that moved
            assert creeps[figure].first_moved.commit.startswith("c03"), creeps[figure].message
        assert "first moved in the run of 2026-12-04T00:00:00Z c03" in creeps["instructions"].message


def test_a_latency_creep_is_judged_by_the_gates_test_over_the_fresh_processes() -> None:
    # 1 % per run from run 1 with 1 % noise per process: significant every time. (With 3 % noise
    # the same creep alerts in 90 % of histories, with 5 % in 73 %: docs/monitoring.md.)
    for seed in range(50):
        creeps = {c.figure: c for c in judge_creep(_history(seed, creep=0.01, start=1, noise=0.01), 0.05, 10)}
        p50 = creeps["P50 latency"]
        assert p50.change is not None and p50.change.significant and p50.ratio - 1 > 0.05
        assert "P50 latency crept +" in p50.message and "over 9 vs 9 processes" in p50.message


def test_a_step_outside_the_window_and_too_few_runs_are_not_creep() -> None:
    old_step = _history(0, creep=0.0, runs=20)
    for run in old_step[:10]:  # 20 % faster long ago, flat since: the window of 10 sees no change
        for record in run.records:
            record.processes = [MeasuredProcess(p.p50 / 1.2, runs=50) for p in record.processes]
    assert judge_creep(old_step, 0.05, 10) == []
    assert [c.figure for c in judge_creep(old_step, 0.05, 20)] == ["P50 latency"]
    assert judge_creep(_history(0, creep=0.5)[:2], 0.05, 10) == []  # two runs: not judged


def test_a_run_file_is_written_once_under_a_unique_name(tmp_path: Path) -> None:
    run = _history(0, runs=1)[0]
    first, second = append_run(tmp_path / "h", run), append_run(tmp_path / "h", run)
    assert first != second and first.name.startswith("20261201T000000Z-c00000000000-ci-1-")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == sorted([first.name, second.name])  # no temporary left
    (tmp_path / "h" / ".half-written.json.tmp").write_text("{")  # another job's write in progress: not a run
    runs = load_history(tmp_path / "h")
    assert [r.commit for r in runs] == [run.commit] * 2 and runs[0].records == run.records
    (tmp_path / "h" / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json"):
        load_history(tmp_path / "h")


def test_the_history_names_are_importable_where_the_plugin_and_the_cli_import_them() -> None:
    """report.history gathers the names of the modules that own them (the run files, the series,
    the creep alert): each is the owner's object."""
    from pytest_edge.report import history, history_creep, history_runs, history_series

    owners = (history_creep, history_runs, history_series)
    for name in history.__all__:
        value = getattr(history, name)
        owner = [module for module in owners if getattr(module, name, None) is value]
        assert owner or value.__module__ == history.__name__, name


def _append_one(folder: str, index: int) -> str:
    run = _history(index, runs=1)[0]
    return str(append_run(Path(folder), Run(run.created, f"{index:040x}", "ci-1", run.records)))


def test_concurrent_jobs_append_to_one_folder_without_losing_a_run(tmp_path: Path) -> None:
    # Sixteen jobs at once, from four processes, all with the same time stamp: each its own file.
    with ProcessPoolExecutor(4) as pool:
        written = list(pool.map(_append_one, [str(tmp_path)] * 16, range(16)))
    assert len(set(written)) == 16
    assert sorted(int(r.commit, 16) for r in load_history(tmp_path)) == list(range(16))


def test_history_show_creep_export_and_import_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "history"
    for run in _history(1, creep=0.01, start=3):
        append_run(folder, run)
    assert main(["history", "show", str(folder), "--last", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tiny / onnxruntime-cpu / ci-1: 4 run(s), 2026-12-07T00:00:00Z .. 2026-12-10T00:00:00Z"
    assert out[1].split()[1:] == ["c060000000", "c070000000", "c080000000", "c090000000"]
    rows = {line.split()[0] + " " + line.split()[1]: line.split()[2:] for line in out[2:]}
    assert rows["artifact B"] == ["5203", "5255", "5308", "5361"] and "TTFT ms" not in rows  # no decoder: no row
    assert main(["history", "creep", str(folder), "--max-creep", "5%"]) == 1
    out = capsys.readouterr().out
    assert "instructions crept" in out and "first moved in the run of 2026-12-04T00:00:00Z c03" in out
    assert main(["history", "creep", str(folder), "--max-creep", "50%"]) == 0
    capsys.readouterr()
    assert main(["history", "export", str(folder), "-o", str(tmp_path / "runs.json"), "--last", "5"]) == 0
    assert main(["history", "import", str(tmp_path / "copy"), str(tmp_path / "runs.json")]) == 0
    copied = load_history(tmp_path / "copy")
    assert [r.commit for r in copied] == [r.commit for r in load_history(folder)][-5:]
    assert [r.records for r in copied] == [r.records for r in load_history(folder)][-5:]
    # A report (--edge-report's) is one run, under the commit and machine given.
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema": "pytest-edge/report/1", "created": "2026-12-11T00:00:00Z",
                                  "machine": {"cpu": "x"}, "records": [_record([1.0, 1.0, 1.0])]}))
    assert main(["history", "import", str(tmp_path / "copy"), str(report), "--commit", "f" * 40,
                 "--machine", "ci-1"]) == 0
    last = load_history(tmp_path / "copy")[-1]
    assert (last.commit, last.machine, last.created) == ("f" * 40, "ci-1", "2026-12-11T00:00:00Z")
    assert main(["history", "show", str(tmp_path / "nowhere")]) == 2
    assert "is not a history folder" in capsys.readouterr().err


def test_show_lines_per_model_backend_and_device() -> None:
    runs = _history(0, runs=3)
    pi = Run("2026-12-04T00:00:00Z", "d" * 40, "ci-1",
             (Record.from_json(dict(_record([2.0]), backend="onnxruntime-cpu@pi5")),))
    keys = set(series([*runs, pi]))
    assert keys == {("tiny", "onnxruntime-cpu", "ci-1"), ("tiny", "onnxruntime-cpu", "pi5")}
    assert show_lines(runs, model="other") == ["no measured record in the history for model other"]


def test_the_history_page_draws_each_figure_over_the_runs_with_the_creeps_first(tmp_path: Path) -> None:
    from pytest_edge.report.html_history import render_history_html

    runs = _history(1, creep=0.01, start=3)
    evil = Run("2026-12-11T00:00:00Z", "e" * 40, "ci-1",
               (Record.from_json(dict(_record([1.0, 1.1, 1.2]), model={"name": "<script>x"})),))
    creeps = judge_creep(runs, 0.05, 10)
    page = render_history_html([*runs, evil], 10, creeps)
    assert "<script" not in page and "&lt;script&gt;x / onnxruntime-cpu / ci-1" in page  # names are escaped
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    assert page.index("Creep over the history") < page.index("<h3>tiny / onnxruntime-cpu / ci-1</h3>")
    assert page.count("<li><strong>creep</strong>") == len(creeps) >= 3
    section = page[page.index("<h3>tiny / onnxruntime-cpu / ci-1</h3>"):]
    labels = re.findall(r'aria-label="([^"]*)"', section)
    assert labels == ["P50 ms (dashed: processes&#x27; range) against run", "peak memory, MB against run",
                      "artifact size, bytes against run", "instructions per inference, instructions against run"]
    # The P50 chart has the run's P50 and the fastest and slowest process's, ten points each.
    first = section[:section.index("</svg>")]
    assert first.count("<polyline") == 3 and first.count("<circle") == 30
    assert main(["history", "html", str(_folder(tmp_path, runs)), "-o", str(tmp_path / "page.html"),
                 "--max-creep", "5%"]) == 0
    assert (tmp_path / "page.html").read_text().count("<li><strong>creep</strong>") == len(creeps)


def test_the_history_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    from test_html_report import PROBE, _chromium

    from pytest_edge.report.html_history import render_history_html

    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it as root)")
    runs = _history(1, creep=0.01, start=3)
    page = render_history_html(runs, 10, judge_creep(runs, 0.05, 10))
    (tmp_path / "probe.html").write_text(page.replace("</body>", PROBE))
    dom = _chromium("--dump-dom", (tmp_path / "probe.html").as_uri(), profile=tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    probe = json.loads(html.unescape(re.search(r"<pre id=\"probe\">(.*?)</pre>", dom.stdout, re.S).group(1)))
    assert len(probe["sizes"]) == page.count("<svg") == 4 and all(w > 0 and h > 0 for w, h in probe["sizes"])
    assert probe["resources"] == []  # nothing requested: no font, image, stylesheet or script
    (tmp_path / "page.html").write_text(page)
    png = tmp_path / "page.png"
    shot = _chromium(f"--screenshot={png}", (tmp_path / "page.html").as_uri(), profile=tmp_path / "profile")
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot.stderr[-2000:]


def _folder(tmp_path: Path, runs: list[Run]) -> Path:
    for run in runs:
        append_run(tmp_path / "history", run)
    return tmp_path / "history"


TEST = """
import pytest
@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
def test_mlp(edge_model):
    pass
"""


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True).stdout.strip()


def test_edge_history_keeps_one_file_per_run_under_the_git_commit(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_mlp=TEST)
    _git(pytester.path, "init", "-q")
    _git(pytester.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one")
    head = _git(pytester.path, "rev-parse", "HEAD")
    assert read_commit(pytester.path) == head
    xdist = ["-n", "2"] if pytest.importorskip("xdist", reason="pytest-xdist") else []
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-history=hist", *xdist).assert_outcomes(passed=1)
    pytester.runpytest_inprocess("--edge-history=hist").assert_outcomes(passed=1)
    runs = load_history(pytester.path / "hist")
    # Under xdist the controller writes the run once, with the workers' records merged.
    assert len(runs) == 2 and [r.commit for r in runs] == [head, head]
    assert all(r.machine == platform.node() and len(r.records) == 1 for r in runs)
    assert all(r.path is not None and r.path.name.split("-")[1] == head[:12] for r in runs)
    given = pytester.runpytest_inprocess("--edge-history=hist", "--edge-history-commit=abc1234", "--edge-html=page.html")
    given.assert_outcomes(passed=1)
    assert load_history(pytester.path / "hist")[-1].commit == "abc1234"
    page = (pytester.path / "page.html").read_text()
    # The page's history section: the three runs, this one's commit last.
    assert '<section id="history">' in page and "3 run(s) in the history" in page
    assert f"<h3>tiny_mlp / onnxruntime-cpu / {platform.node()}</h3>" in page and "<small>abc1234<br>" in page


def test_edge_max_creep_warns_or_fails_naming_the_first_run_that_moved(pytester: pytest.Pytester,
                                                                       models: Path) -> None:
    pytester.makepyfile(test_mlp=TEST)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-history=run").assert_outcomes(passed=1)
    (measured,) = load_history(pytester.path / "run")
    record = measured.records[0]
    size = record.artifact_bytes
    assert isinstance(size, int) and size > 0
    # Nine earlier runs of the same model on this machine: flat, then 1 % smaller per run before this one.
    for index in range(9):
        earlier = replace(record, artifact_bytes=round(size / 1.01 ** min(9 - index, 7)))
        append_run(pytester.path / "hist", Run(f"2026-01-{index + 1:02d}T00:00:00Z", f"c{index:02d}" + "0" * 38,
                                               measured.machine, (earlier,)))
    warned = pytester.runpytest_inprocess("--edge-history=hist", "--edge-max-creep=5%", "--edge-history-commit=c09")
    warned.assert_outcomes(passed=1)
    assert warned.ret == 0
    warned.stdout.fnmatch_lines([
        "*pytest-edge: creep: tiny_mlp on onnxruntime-cpu (*): artifact size crept +6.*% over the last 10 runs*"
        "first moved in the run of 2026-01-04T00:00:00Z c03*",
        "*1 figure(s) crept over the history: a warning*"])
    failed = pytester.runpytest_inprocess("--edge-history=hist", "--edge-max-creep=5%", "--edge-creep=fail")
    assert failed.ret == 1
    failed.stdout.fnmatch_lines(["*artifact size crept*first moved in the run of 2026-01-04T00:00:00Z c03*",
                                 "*fails the run (--edge-creep=fail)*"])
    refused = pytester.runpytest_inprocess("--edge-max-creep=5%")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--edge-max-creep judges the runs of a history: give it --edge-history=DIR*"])
    loud = pytester.runpytest_inprocess("--edge-history=hist", "--edge-creep=loud")
    assert loud.ret == pytest.ExitCode.USAGE_ERROR
    loud.stderr.fnmatch_lines(["*--edge-creep: 'loud' is not 'warn' or 'fail'*"])


def test_the_monitoring_pages_workflow_names_known_options() -> None:
    """docs/monitoring.md's CI job (restore the history, run, save it) uses options pytest-edge has."""
    import shlex

    yaml = pytest.importorskip("yaml", reason="pyyaml (the test extra) parses the workflow")
    from test_readme import ROOT, blocks

    from pytest_edge.core.settings import OPTIONS

    workflow = next(yaml.safe_load(b.code) for b in blocks(ROOT / "docs/monitoring.md")
                    if b.lang == "yaml" and "jobs:" in b.code)
    steps = workflow["jobs"]["edge"]["steps"]
    run = next(step["run"] for step in steps if "--edge-history" in step.get("run", ""))
    used = {word.partition("=")[0] for word in shlex.split(run.replace("\\\n", " ")) if word.startswith("--edge")}
    assert used and used <= {o.flag for o in OPTIONS if o.flag}, used
    cached = [step["with"]["path"] for step in steps if str(step.get("uses", "")).startswith("actions/cache/")]
    assert cached == [".edge/history", ".edge/history"] and "--edge-history=.edge/history" in run
