"""Issue 49, round 5: the bad inputs of benchmarks/probe_round5.py that were not clear errors, one
regression test per cause (the run history's files, ``pytest-edge history``'s options and import,
OpenMetrics labels). Fast: plain calls, no measured run."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_edge.cli import history as history_cli
from pytest_edge.core.record import Record
from pytest_edge.report import history, history_runs
from pytest_edge.report.html_history import render_history_html
from pytest_edge.report.openmetrics import _escape, render_openmetrics


def _report(commit: str = "c0", created: str = "2026-12-01T00:00:00Z", **record: Any) -> dict[str, Any]:
    return {"schema": "pytest-edge/report/1", "created": created, "machine": {"name": "ci"},
            "run": {"commit": commit, "machine": "ci", "created": created},
            "records": [{"test": "t.py::test_m[m-onnxruntime-cpu]", "model": {"name": "m"},
                         "backend": "onnxruntime-cpu", "verdict": "passed", "latency_ms": {"p50": 1.0},
                         "measured_runs": 50, "processes": [{"p50": 1.0, "runs": 50}], "peak_memory_mb": 10.0,
                         "artifact_bytes": 5000, **record}]}


def _history(folder: Path, runs: int = 3) -> Path:
    target = folder / "hist"
    target.mkdir()
    for index in range(runs):
        (target / f"r{index}.json").write_text(json.dumps(_report(f"c{index}", f"2026-12-0{index + 1}T00:00:00Z")))
    return target


# ------------------------------------------------------------------------ the history's files

def test_a_fifo_in_the_history_is_refused_naming_it_not_read(tmp_path: Path) -> None:
    folder = _history(tmp_path)
    os.mkfifo(folder / "fifo.json")  # reading it would block forever (the probe: killed at 60 s)
    with pytest.raises(ValueError, match=r"fifo.json is not a regular file"):
        history.load_history(folder)


def test_a_link_out_of_the_history_is_refused_naming_it(tmp_path: Path) -> None:
    folder = _history(tmp_path)
    (folder / "zero.json").symlink_to("/dev/zero")  # read whole: 3.3 GB before the cap killed it
    with pytest.raises(ValueError, match=r"zero.json is a link out of the history .* \(to /dev/zero\)"):
        history.load_history(folder)
    (folder / "zero.json").unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps(_report()))
    (folder / "out.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ValueError, match=r"out.json is a link out of the history"):
        history.load_history(folder)
    (folder / "out.json").unlink()
    (folder / "inside.json").symlink_to(folder / "r0.json")  # a link within the folder is a run
    assert len(history.load_history(folder)) == 4


def test_an_oversized_run_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _history(tmp_path)
    monkeypatch.setattr(history_runs, "MAX_RUN_BYTES", 100)  # the probe's 400 MB file parsed to 3.6 GB
    with pytest.raises(ValueError, match=r"r0.json is \d+ bytes, more than the 100 bytes a run file may be"):
        history.load_history(folder)


@pytest.mark.parametrize("block, field", [({"commit": ["a"]}, "run.commit"), ({"machine": {"x": 1}}, "run.machine"),
                                          ({"created": 5}, "run.created"), ("x", "'run' must be an object")])
def test_a_run_block_of_the_wrong_type_names_the_file_and_field(tmp_path: Path, block: Any, field: str) -> None:
    folder = _history(tmp_path)
    report = _report()
    report["run"] = block
    (folder / "odd.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match=rf"odd.json is not a valid run of a history: .*{field}"):
        history.load_history(folder)


# ------------------------------------------------------------------------ pytest-edge history

def _args(**given: Any) -> argparse.Namespace:
    defaults = {"last": 10, "model": None, "window": 10, "max_creep": None, "commit": None, "machine": None}
    return argparse.Namespace(**{**defaults, **given})


@pytest.mark.parametrize("command, given, said", [
    ("show", {"last": 0}, "--last 0: at least 1"),
    ("export", {"last": -1}, "--last -1: at least 1"),  # it exported every run but the first
    ("html", {"window": 1, "max_creep": "5%"}, "--window 1: at least 3"),  # it judged a window of 3
    ("html", {"last": 0}, "--last 0: at least 1"),
    ("creep", {"window": 2, "max_creep": "5%"}, "--window 2: at least 3"),
])
def test_run_counts_out_of_range_are_refused_not_bent(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      command: str, given: dict[str, Any], said: str) -> None:
    folder = _history(tmp_path)
    run = getattr(history_cli, f"{command}_command")
    assert run(_args(folder=str(folder), output=str(tmp_path / "out"), **given)) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["export", "html"])
def test_an_output_under_a_file_names_the_file_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       command: str) -> None:
    folder = _history(tmp_path)
    (tmp_path / "file").write_text("")
    output = tmp_path / "file" / "out"  # it said "[Errno 17] File exists: '.../file'"
    assert getattr(history_cli, f"{command}_command")(_args(folder=str(folder), output=str(output), last=None
                                                            if command == "export" else 10)) == 2
    assert f"cannot write {output}: {tmp_path / 'file'} is not a folder" in capsys.readouterr().err


def _export(tmp_path: Path, runs: Any) -> Path:
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"schema": history.EXPORT_SCHEMA, "runs": runs}))
    return path


def test_an_import_validates_every_run_before_writing_any(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _export(tmp_path, [_report()])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": history.EXPORT_SCHEMA, "runs": [_report(), {**_report(), "records": [1]}]}))
    new = tmp_path / "new"
    # A run of records [1] was written, and every later read of the history failed on it.
    assert history_cli.import_command(_args(folder=str(new), files=[str(good), str(bad)])) == 2
    assert f"{bad}: run 1 is not a valid pytest-edge report: record 0: expected an object" in capsys.readouterr().err
    assert not new.exists()
    bad.write_text(json.dumps({"schema": history.EXPORT_SCHEMA, "runs": 5}))  # a TypeError traceback
    assert history_cli.import_command(_args(folder=str(new), files=[str(bad)])) == 2
    assert "a history export's 'runs' must be a list of runs, got 5" in capsys.readouterr().err
    negative = _export(tmp_path, [_report(peak_memory_mb=float("nan"))])
    assert history_cli.import_command(_args(folder=str(new), files=[str(negative)])) == 2
    assert "run 0 is not a valid pytest-edge report" in capsys.readouterr().err and not new.exists()


def test_an_export_imported_twice_adds_its_runs_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exported = _export(tmp_path, [_report("c0", "2026-12-01T00:00:00Z"), _report("c1", "2026-12-02T00:00:00Z")])
    new = tmp_path / "new"
    assert history_cli.import_command(_args(folder=str(new), files=[str(exported)])) == 0
    assert history_cli.import_command(_args(folder=str(new), files=[str(exported)])) == 0
    assert "imported 0 run(s)" in capsys.readouterr().out.splitlines()[-1]
    assert [r.commit for r in history.load_history(new)] == ["c0", "c1"]


def test_an_import_of_a_fifo_is_refused_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "fifo")
    assert history_cli.import_command(_args(folder=str(tmp_path / "new"), files=[str(tmp_path / "fifo")])) == 2
    assert "fifo is not a regular file" in capsys.readouterr().err


def test_an_environments_folder_that_is_a_file_is_named(tmp_path: Path) -> None:
    from pytest_edge.devices import backend_env

    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "requirements.txt").write_text("nothing-installed==1\n")
    (tmp_path / "envs").write_text("")
    with pytest.raises(backend_env.EnvironmentUnmade, match=r"the environments' folder .*envs is a file, not a folder"):
        backend_env.make(tmp_path / "reqs", tmp_path / "envs", label="probe")
    (tmp_path / "reqs" / "requirements.txt").write_bytes(b"\xff\xfebad")  # its message named no file
    with pytest.raises(backend_env.EnvironmentUnmade, match=r"reqs/requirements.txt is not UTF-8 text"):
        backend_env.make(tmp_path / "reqs", tmp_path / "envs2", label="probe")


@pytest.mark.parametrize("npu, said", [({"estimated_ms": 0}, "'npu.estimated_ms' must be above 0"),
                                       ({"estimated_ms": float("nan")}, "'npu.estimated_ms' must be a finite number"),
                                       ({"estimated_ms": "48"}, "'npu.estimated_ms' must be a finite number")])
def test_a_baseline_npu_estimate_the_gate_would_drop_is_refused(tmp_path: Path, npu: dict[str, Any], said: str) -> None:
    from pytest_edge.report.json_report import load_report

    report = _report(backend="ethos-u55-128", npu=npu)
    (tmp_path / "base.json").write_text(json.dumps(report))
    # An estimate of 0 was dropped by the gate's parser: the comparison was off, in silence.
    with pytest.raises(ValueError, match=rf"base.json is not a valid pytest-edge report: record 0 .*{re.escape(said)}"):
        load_report(tmp_path / "base.json")


@pytest.mark.parametrize("value", [float("nan"), "48", True, -1])
def test_a_stored_arena_figure_is_named_with_its_value(tmp_path: Path, value: Any) -> None:
    from pytest_edge.report.json_report import load_report

    arena = {"reported_by": "tflite-micro (RecordingMicroAllocator)", "head_bytes": 10, "tail_bytes": 20,
             "total_bytes": value}
    (tmp_path / "base.json").write_text(json.dumps(_report(backend="tflite-micro", arena=arena)))
    # It said "'arena' must be an object of byte counts >= 0 or null, got {'reported_by': 'tflite-m": cut
    # before the bad figure.
    with pytest.raises(ValueError, match=rf"'arena.total_bytes' must be a number of bytes >= 0 or null, got "
                                         rf"{re.escape(repr(value))}$"):
        load_report(tmp_path / "base.json")


@pytest.mark.parametrize("value", [float("nan"), "48", True, [1]])
def test_a_stored_memory_growth_that_is_no_number_is_refused(tmp_path: Path, value: Any) -> None:
    from pytest_edge.report.json_report import load_report

    (tmp_path / "base.json").write_text(json.dumps(_report(memory_growth_kb_per_run=value)))
    # The page drew "48 KB per run" for a string; a slope below 0 (memory that shrank) is a figure.
    with pytest.raises(ValueError, match=r"base.json is not a valid pytest-edge report: record 0 .*"
                                         r"'memory_growth_kb_per_run' must be a finite number or null"):
        load_report(tmp_path / "base.json")
    (tmp_path / "base.json").write_text(json.dumps(_report(memory_growth_kb_per_run=-0.5)))
    assert load_report(tmp_path / "base.json").records[0].memory_growth_kb_per_run == -0.5


@pytest.mark.parametrize("change, said", [
    ({"peak_memory_mb": float("nan")}, "'peak_memory_mb' must be a finite number"),
    ({"peak_memory_mb": float("inf")}, "'peak_memory_mb' must be a finite number"),
    ({"latency_ms": {"p50": float("nan")}}, "'latency_ms.p50' must be a finite number"),
    ({"processes": [{"p50": 1.0, "runs": 50}, {"p50": float("nan"), "runs": 50}]}, "'processes[1].p50' must be"),
])
def test_a_stored_timed_or_memory_figure_that_is_nan_is_refused(tmp_path: Path, change: dict[str, Any],
                                                                 said: str) -> None:
    from pytest_edge.report.json_report import load_report

    # The gate's parser dropped a NaN peak memory: the stored gate compared no memory, in silence.
    (tmp_path / "base.json").write_text(json.dumps(_report(**change)))
    with pytest.raises(ValueError, match=rf"base.json is not a valid pytest-edge report: record 0 .*{re.escape(said)}"):
        load_report(tmp_path / "base.json")


# ---------------------------------------------------------------------- labels and surrogates

def _unescape(text: str) -> str:
    out, chars = [], iter(text)
    for char in chars:
        out.append({"n": "\n", "\\": "\\", '"': '"'}[next(chars)] if char == "\\" else char)
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40))
def test_a_label_value_is_utf8_and_reads_back_as_its_text(value: str) -> None:
    escaped = _escape(value)
    escaped.encode("utf-8")  # a lone surrogate raised UnicodeEncodeError while the file was written
    assert "\n" not in escaped and all(escaped[i - 1] == "\\" for i, c in enumerate(escaped) if c == '"')
    assert _unescape(escaped) == value.encode("utf-8", "backslashreplace").decode("utf-8")


def test_openmetrics_of_hostile_labels_passes_promtool(tmp_path: Path) -> None:
    labels = ['q"uote', "back\\slash", "new\nline", "unicodé ✓ 模型", "{brace}=", "# EOF", "cr\rhere", "nul\x00",
              "lone\udcffsurrogate"]
    records = [Record.from_json({**_report()["records"][0], "test": f"t[{text}]", "model": {"name": text}})
               for text in labels]
    text = render_openmetrics(records, commit='a"b\\c')
    path = tmp_path / "m.om"
    path.write_bytes(text.encode("utf-8"))
    assert text.count("edge_latency_p50_seconds{") == len(labels)
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian's prometheus package)")
    done = subprocess.run(["promtool", "check", "metrics"], stdin=path.open("rb"), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_negative_or_nan_figure_has_no_sample() -> None:
    record = {**_report()["records"][0], "load_ms": float("nan"), "first_inference_ms": -1, "artifact_bytes": 0}
    text = render_openmetrics([Record.from_json(record)])
    # first_inference_ms -1 was a gauge of -0.001 s; a size of 0 is a measurement
    assert "edge_first_inference_seconds" not in text and "edge_load_seconds" not in text
    assert 'edge_artifact_size_bytes{model="m"' in text and text.count("edge_latency_p50_seconds{") == 1


def test_the_history_page_of_a_surrogate_model_name_is_written(tmp_path: Path) -> None:
    runs = [history.Run(f"2026-12-0{i + 1}T00:00:00Z", f"c{i}", "ci",
                        tuple(map(Record.from_json, _report(model={"name": "m\udcff"})["records"]))) for i in range(3)]
    page = render_history_html(runs)
    page.encode("utf-8")
    assert "m\\udcff" in page
