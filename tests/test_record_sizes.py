"""The rest of the field's record: artifact and runtime sizes with their budgets and the gate on
artifact growth, throughput, and power and temperature read from sysfs (docs/measurement.md)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from edge_helpers import FIXTURES

from pytest_edge import codec
from pytest_edge.core.marker import parse_marker
from pytest_edge.measurement import sensors
from pytest_edge.judging.figures import GateFigures
from pytest_edge.judging.regressions import check_baseline
from pytest_edge.report.deployment import megabytes
from pytest_edge.report.html import render_html
from pytest_edge.report.json_report import Report, merge_reports
from pytest_edge.core.sizes import artifact_bytes, runtime_package

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_sysfs(root: Path, *, package_uj: int, temps: tuple[int, int], khz: tuple[int, int]) -> None:
    """A folder laid out as Linux sysfs: two zones of one type and one whose sensor is off, two CPUs'
    frequencies, a RAPL package domain that wraps at 1e9 µJ, a battery reporting power_now."""
    thermal = root / sensors.THERMAL
    for index, (kind, temp) in enumerate((("acpitz", str(temps[0])), ("acpitz", str(temps[1])), ("off", "n/a"))):
        _write(thermal / f"thermal_zone{index}" / "type", kind + "\n")
        _write(thermal / f"thermal_zone{index}" / "temp", temp + "\n")
    for cpu, value in enumerate(khz):
        _write(root / sensors.CPUS / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq", f"{value}\n")
    _write(root / sensors.CPUS / "cpufreq" / "policy0" / "scaling_cur_freq", "1\n")  # not a CPU: ignored
    rapl = root / sensors.POWERCAP / "intel-rapl:0"
    _write(rapl / "name", "package-0\n")
    _write(rapl / "energy_uj", f"{package_uj}\n")
    _write(rapl / "max_energy_range_uj", "1000000000\n")
    _write(root / sensors.POWER_SUPPLY / "BAT0" / "power_now", "7500000\n")


def test_sysfs_readings_of_a_fake_root(tmp_path: Path) -> None:
    """The parsing, on a folder laid out like sysfs: temperatures per zone type, CPU MHz, power of a
    battery, and RAPL power as energy over the window (across the counter's wrap-around)."""
    _fake_sysfs(tmp_path, package_uj=999_000_000, temps=(41_000, 43_500), khz=(2_000_000, 2_400_000))
    before = sensors.read(tmp_path)
    _fake_sysfs(tmp_path, package_uj=19_000_000, temps=(55_250, 60_000), khz=(1_800_000, 1_800_000))
    after = sensors.read(tmp_path)
    after = replace(after, t_ns=before.t_ns + 2_000_000_000)  # 2 s window: 20 J used across the wrap -> 10 W
    found = sensors.window(before, after, tmp_path)
    assert found.tool == "linux-sysfs" and found.reason is None
    assert found.initial.temperature_c == {"acpitz": 41.0, "acpitz (thermal_zone1)": 43.5}
    assert found.steady.temperature_c == {"acpitz": 55.25, "acpitz (thermal_zone1)": 60.0}
    assert found.initial.cpu_mhz == sensors.CpuMhz(2200.0, 2000.0, 2400.0, 2)
    assert found.steady.cpu_mhz.mean == 1800.0
    assert found.initial.power_w == {"BAT0": 7.5}
    assert found.steady.power_w == {"BAT0": 7.5, "rapl package-0": 10.0}
    # The record's JSON, as the hand-written dicts wrote it.
    assert codec.to_json(found)["initial"] == {"temperature_c": {"acpitz": 41.0, "acpitz (thermal_zone1)": 43.5},
                                               "cpu_mhz": {"mean": 2200.0, "min": 2000.0, "max": 2400.0, "cpus": 2},
                                               "power_w": {"BAT0": 7.5}}
    # Several measuring processes: the first one's initial, the last one's steady readings.
    hotter = sensors.Readings(temperature_c={"acpitz": 70.0})
    combined = sensors.combine([found, None, replace(found, steady=hotter)])
    assert combined.initial == found.initial and combined.steady == hotter
    assert sensors.combine([None]) is None


def test_sysfs_without_sensors_says_why(tmp_path: Path) -> None:
    (tmp_path / sensors.THERMAL).mkdir(parents=True)
    empty = sensors.window(sensors.read(tmp_path), sensors.read(tmp_path), tmp_path)
    assert empty.initial is None and empty.steady is None
    assert f"no readable thermal zones in {tmp_path / sensors.THERMAL}" in empty.reason
    assert "no CPU frequency" in empty.reason and "no power readings" in empty.reason
    elsewhere = tmp_path / "mac"
    elsewhere.mkdir()
    assert "not Linux" in sensors.window(sensors.read(elsewhere), sensors.read(elsewhere), elsewhere).reason
    # Only temperatures: the readings are there, and the reason names what is missing.
    _write(tmp_path / sensors.THERMAL / "thermal_zone0" / "temp", "30000\n")
    partial = sensors.window(sensors.read(tmp_path), sensors.read(tmp_path), tmp_path)
    assert codec.to_json(partial.steady) == {"temperature_c": {"thermal_zone0": 30.0}}
    assert "thermal" not in partial.reason and "no power readings" in partial.reason


def test_this_machines_sysfs_gives_readings_or_the_reason() -> None:
    """The real /sys of the machine running the suite: whatever it exposes is read, the rest named."""
    found = sensors.window(sensors.read(), sensors.read())
    zones = [z for z in Path("/sys/class/thermal").glob("thermal_zone*") if sensors._number(z / "temp") is not None]
    assert (found.steady is not None and found.steady.temperature_c is not None) == bool(zones)
    if not zones:
        assert "no readable thermal zones" in found.reason or "not Linux" in found.reason
    assert found.steady is not None or found.reason


def test_sizes_of_an_artifact_and_a_runtime(tmp_path: Path) -> None:
    ext = FIXTURES / "tiny_ext.onnx"
    assert artifact_bytes(ext) == ext.stat().st_size + (FIXTURES / "tiny_ext.onnx.data").stat().st_size
    assert artifact_bytes(FIXTURES / "tiny_mlp.onnx") == (FIXTURES / "tiny_mlp.onnx").stat().st_size
    package = runtime_package("onnxruntime")
    assert package.bytes > package.native_bytes > 0 and package.files > 0
    assert "not installed" in runtime_package("no-such-runtime-distribution").reason
    assert (megabytes(2951), megabytes(80198301), megabytes(None)) == ("0.00281", "76.5", "—")
    marker = parse_marker((), {"model": "m", "max_artifact_mb": "512KB", "max_runtime_mb": 100})
    assert (marker.budget("max_artifact_mb"), marker.budget("max_runtime_mb"), marker.needs_measurement) == (0.5, 100.0, False)


def _grown(source: Path, target: Path, factor: float) -> None:
    """The same graph, ``factor`` times the bytes (padding in the model's doc string)."""
    import onnx

    model = onnx.load(str(source))
    model.doc_string = "x" * int(source.stat().st_size * (factor - 1))
    onnx.save(model, str(target))


def _ab_run(pytester: pytest.Pytester) -> dict[str, Any]:
    """One real A/B run on ONNX Runtime: ``same`` is byte for byte its twin in main/, ``grown`` is
    its twin 20 % bigger (same graph), ``ext`` has external data and size budgets it exceeds."""
    project = pytester.path
    for folder in ("models", "main"):
        (project / folder).mkdir()
    shutil.copy(FIXTURES / "tiny_mlp.onnx", project / "models" / "same.onnx")
    shutil.copy(FIXTURES / "tiny_mlp.onnx", project / "main" / "same.onnx")
    shutil.copy(FIXTURES / "tiny_mlp.onnx", project / "main" / "grown.onnx")
    _grown(FIXTURES / "tiny_mlp.onnx", project / "models" / "grown.onnx", 1.2)
    for name in ("tiny_ext.onnx", "tiny_ext.onnx.data"):
        shutil.copy(FIXTURES / name, project / "models" / name)
    (project / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n"
                                        "edge_backends = onnxruntime-cpu\n")
    (project / "test_sizes.py").write_text(
        "import pytest\n"
        "@pytest.mark.edge(model='same')\ndef test_same(edge_model):\n    pass\n"
        "@pytest.mark.edge(model='grown')\ndef test_grown(edge_model):\n    pass\n"
        "@pytest.mark.edge(model='tiny_ext', max_artifact_mb='3KB', max_runtime_mb=1)\n"
        "def test_ext(edge_model):\n    pass\n")
    run = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--edge-update-golden", "--edge-baseline-models=main",
                                        "--edge-report=r.json", "--edge-html=r.html")
    run.assert_outcomes(passed=1, failed=2)
    report = json.loads((project / "r.json").read_text())
    return {"output": run.stdout.str(), "project": project, "report": report,
            "records": {r["model"]["name"]: r for r in report["records"]}}


def test_one_ab_run_records_sizes_judges_their_budgets_and_gates_growth(pytester: pytest.Pytester) -> None:
    """One run (a pytest run costs a runtime import per measuring process): the record's fields,
    the size budgets' messages, the gate on a grown artifact."""
    ab_run = _ab_run(pytester)
    _records_carry_sizes_throughput_and_power(ab_run)
    _size_budgets_name_the_file_the_backend_and_both_figures(ab_run)
    _a_grown_artifact_fails_the_gate_and_an_unchanged_one_passes(ab_run)


def _records_carry_sizes_throughput_and_power(ab_run: dict[str, Any]) -> None:
    project, same, ext = ab_run["project"], ab_run["records"]["same"], ab_run["records"]["tiny_ext"]
    assert same["verdict"] == "passed", ab_run["output"]
    assert same["artifact_bytes"] == (project / "models" / "same.onnx").stat().st_size
    # External data counts: the app ships it with the model.
    assert ext["artifact_bytes"] == sum((project / "models" / n).stat().st_size
                                        for n in ("tiny_ext.onnx", "tiny_ext.onnx.data"))
    assert same["runtime_bytes"] == same["runtime"]["package"]["bytes"] == runtime_package("onnxruntime").bytes
    assert same["runtime_bytes"] > 0
    # Inferences per second over the timed runs: the pooled mean latency's inverse.
    assert same["throughput"] == pytest.approx(1000 / same["latency_ms"]["mean"])
    power = same["power_and_temperature"]
    assert power["tool"] == "linux-sysfs" and (power["steady"] is not None or power["reason"])
    page = (project / "r.html").read_text()
    assert "Size, throughput, power and temperature" in page and megabytes(same["artifact_bytes"]) in page
    # A merged report keeps the new fields as they are.
    merged = merge_reports([Report.from_json(ab_run["report"])] * 2).to_json()
    assert {r["artifact_bytes"] for r in merged["records"] if r["model"]["name"] == "same"} == {same["artifact_bytes"]}


def _size_budgets_name_the_file_the_backend_and_both_figures(ab_run: dict[str, Any]) -> None:
    ext = ab_run["records"]["tiny_ext"]
    assert ext["verdict"] == "failed"
    artifact, runtime = ext["violations"]
    assert artifact == (f"onnxruntime-cpu: artifact models/tiny_ext.onnx is {ext['artifact_bytes'] / 2**20:.4g} MB "
                        f"({ext['artifact_bytes']} bytes) > max_artifact_mb {3 / 1024:.4g} MB (3072 bytes)")
    assert runtime.startswith("onnxruntime-cpu: runtime package onnxruntime ")
    assert f"({ext['runtime_bytes']} bytes) > max_runtime_mb 1 MB" in runtime


def _a_grown_artifact_fails_the_gate_and_an_unchanged_one_passes(ab_run: dict[str, Any]) -> None:
    grown, same = ab_run["records"]["grown"], ab_run["records"]["same"]
    assert grown["verdict"] == "failed" and grown["baseline_check"]["mode"] == "ab"
    growth = grown["artifact_bytes"] / (ab_run["project"] / "main" / "grown.onnx").stat().st_size - 1
    assert 0.2 <= growth < 0.21
    size = [v for v in grown["violations"] if "artifact models/grown.onnx" in v]
    assert size and f"{growth:+.1%} against the baseline twin" in size[0] and "(allowed +10%)" in size[0], \
        grown["violations"]
    assert not any("artifact" in v for v in same["violations"]) and same["baseline_check"]["mode"] == "ab"
    # The stored gate judges the same way: this run's record against itself passes, 20 % bigger fails.
    assert check_baseline(GateFigures.from_json(same), GateFigures.from_json(same), 0.10) == []
    bigger = {**same, "artifact_bytes": int(same["artifact_bytes"] * 1.2) + 1}
    assert any("+20.0% against the baseline" in m for m in check_baseline(GateFigures.from_json(bigger),
                                                                          GateFigures.from_json(same), 0.10))
    # The pages show the change against the twin.
    assert "artifact size" in render_html(Report.from_json(ab_run["report"]))
