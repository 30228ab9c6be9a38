"""The record's deployment fields (artifact_bytes, runtime_bytes, throughput, power_and_temperature)
in reports read back: reports older than these fields are read as before, and garbage in them is a
clear error naming the file, the record and the field (never a traceback, never a silent pass)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from edge_helpers import record, run_cli

from pytest_edge import codec
from pytest_edge.report import build_report, load_report
from pytest_edge.measurement.machine import Machine

POWER = {"tool": "linux-sysfs", "initial": {"temperature_c": {"cpu": 41.0}, "cpu_mhz": {"mean": 2400.0}},
         "steady": {"temperature_c": {"cpu": 55.5}, "power_w": {"rapl package-0": 12.5}}, "reason": None}


def _new(**fields: Any) -> dict[str, Any]:
    return record("m", "onnxruntime-cpu", **{"artifact_bytes": 2951, "runtime_bytes": 80_000_000, "throughput": 1e4,
                                             "power_and_temperature": POWER, **fields})


def _write(path: Path, *records: dict[str, Any]) -> Path:
    # A report file's JSON with these records as they are (some of a shape no Record holds).
    path.write_text(json.dumps({**build_report([], Machine(cpu="x86")).to_json(), "records": list(records)}))
    return path


@pytest.mark.parametrize("fields, detail", [
    ({"artifact_bytes": "big"}, "'artifact_bytes' must be a finite number >= 0 or null, got 'big'"),
    ({"artifact_bytes": -1}, "'artifact_bytes' must be a finite number >= 0 or null, got -1"),
    ({"runtime_bytes": True}, "'runtime_bytes' must be a finite number >= 0 or null, got True"),
    ({"throughput": float("nan")}, "'throughput' must be a finite number >= 0 or null, got nan"),
    ({"throughput": -3.0}, "'throughput' must be a finite number >= 0 or null, got -3.0"),
    # Numbers no page can format: an int past a float's range, infinity (JSON readers take 1e999).
    ({"runtime_bytes": 10**400}, "'runtime_bytes' must be a finite number >= 0 or null, got 1000000000"),
    ({"throughput": float("inf")}, "'throughput' must be a finite number >= 0 or null, got inf"),
    ({"load_ms": 10**400}, "'load_ms' must be a number or null, got 1000000000"),
    # A counted baseline that would pass any count against it.
    ({"counted": {"instructions": float("nan")}}, "'counted.instructions' must be a positive number or null, got nan"),
    ({"counted": {"instructions": -5}}, "'counted.instructions' must be a positive number or null, got -5"),
    ({"counted": {"instructions": "many"}}, "'counted.instructions' must be a positive number or null, got 'many'"),
    ({"counted": {"instructions": 10.0, "spread": float("inf")}}, "'counted.spread' must be a finite number"),
    ({"counted": [1]}, "'counted' must be an object or null, got [1]"),
    ({"latency_quantiles_ms": [1.0, float("inf")]}, "'latency_quantiles_ms' must be a list of finite numbers"),
    ({"power_and_temperature": {"steady": {"power_w": {"rapl": 10**400}}}},
     "'power_and_temperature.steady.power_w' must be an object of numbers"),
    ({"power_and_temperature": "hot"}, "'power_and_temperature' must be an object or null, got 'hot'"),
    ({"power_and_temperature": {"tool": 5}}, "'power_and_temperature.tool' must be a string or null"),
    ({"power_and_temperature": {"initial": [1]}}, "'power_and_temperature.initial' must be an object or null"),
    ({"power_and_temperature": {"steady": {"temperature_c": {"cpu": "x"}}}},
     "'power_and_temperature.steady.temperature_c' must be an object of numbers"),
])
def test_garbage_in_the_deployment_fields_is_refused_by_name(tmp_path: Path, fields: dict, detail: str) -> None:
    path = _write(tmp_path / "r.json", _new(), _new(**fields))
    with pytest.raises(ValueError) as error:
        load_report(path)
    assert str(path) in str(error.value) and "record 1" in str(error.value) and detail in str(error.value), \
        str(error.value)


def test_old_and_new_reports_are_read(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.json", record("m", "onnxruntime-cpu"))
    assert load_report(old).records[0].artifact_bytes is None
    new = _write(tmp_path / "new.json", _new(), _new(power_and_temperature=None, runtime_bytes=None, throughput=0))
    assert codec.to_json(load_report(new).records[0].power_and_temperature) == POWER


def test_report_commands_on_old_and_garbage_reports(tmp_path: Path) -> None:
    """One CLI run per command: an old report against a new one works both ways, a report with a
    negative size is refused with the file and the field named (exit 2, no traceback)."""
    _write(tmp_path / "old.json", record("m", "onnxruntime-cpu"))
    _write(tmp_path / "new.json", _new())
    _write(tmp_path / "bad.json", _new(runtime_bytes=-5))
    compared = run_cli("report", "compare", "old.json", "new.json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    merged = run_cli("report", "merge", "old.json", "new.json", "-o", "m.json", cwd=tmp_path)
    assert merged.returncode == 0 and len(load_report(tmp_path / "m.json").records) == 2, merged.stderr
    for command in (("compare", "new.json", "bad.json"), ("html", "bad.json", "-o", "bad.html"),
                    ("merge", "new.json", "bad.json", "-o", "bad-merged.json")):
        refused = run_cli("report", *command, cwd=tmp_path)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert "bad.json is not a valid pytest-edge report" in refused.stderr
        assert "'runtime_bytes' must be a finite number >= 0 or null, got -5" in refused.stderr
    assert not (tmp_path / "bad.html").exists() and not (tmp_path / "bad-merged.json").exists()
