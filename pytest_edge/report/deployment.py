"""The record's deployment figures as text for the pages: artifact and runtime sizes, throughput,
and power and temperature around the timed runs (or why the machine gave none)."""

from __future__ import annotations

from typing import Any, Mapping

from ..core.record import Record, is_finite_number
from ..measurement.sensors import Readings, SensorWindow
from .charts import DASH, escape, significant

HEADERS = ["backend", "artifact MB", "runtime MB", "throughput /s", "temperature °C", "CPU MHz", "power W"]


def megabytes(value: Any) -> str:
    """Bytes as MB (2**20) to three significant digits: a 3 KB test model is not "0.003"."""
    return DASH if not isinstance(value, (int, float)) else significant(value / 2**20)


def _span(initial: Any, steady: Any) -> str:
    """``initial → steady`` of one reading (a number), or what there is of it."""
    shown = [significant(v) for v in (initial, steady) if isinstance(v, (int, float))]
    if isinstance(initial, (int, float)) and isinstance(steady, (int, float)):
        return f"{shown[0]} → {shown[1]}"
    return shown[0] if shown else DASH


def _per_sensor(readings: Readings | None, kind: str) -> dict[str, float]:
    """One kind of reading (``temperature_c``, ``power_w``) by sensor; empty where none was read."""
    return (getattr(readings, kind) or {}) if readings is not None else {}


def _readings(sensors: SensorWindow, kind: str) -> str:
    """Each sensor of ``kind`` (per zone, per supply) as initial → steady."""
    initial, steady = _per_sensor(sensors.initial, kind), _per_sensor(sensors.steady, kind)
    names = list(dict.fromkeys([*initial, *steady]))
    return "<br>".join(f"{escape(n)}: {_span(initial.get(n), steady.get(n))}" for n in names) or DASH


def _mean_mhz(readings: Readings | None) -> float | None:
    return readings.cpu_mhz.mean if readings is not None and readings.cpu_mhz is not None else None


def has_figures(record: Record) -> bool:
    return any(value is not None for value in (record.artifact_bytes, record.runtime_bytes, record.throughput,
                                               record.power_and_temperature))


def invalid_field(record: Mapping[str, Any]) -> str | None:
    """What is wrong with the record's deployment figures (for load_report's message), or None:
    sizes and throughput are null or a number >= 0; power_and_temperature is null or an object
    whose ``initial`` and ``steady`` map each reading (temperature_c, cpu_mhz, power_w) to
    {sensor: number or null}. Reports older than these fields have none of them: that is fine."""
    for key in ("artifact_bytes", "runtime_bytes", "throughput"):
        value = record.get(key)
        if value is not None and not (is_finite_number(value) and value >= 0):
            return f"{key!r} must be a finite number >= 0 or null, got {repr(value)[:60]}"
    sensors = record.get("power_and_temperature")
    if sensors is None:
        return None
    if not isinstance(sensors, Mapping):
        return f"'power_and_temperature' must be an object or null, got {sensors!r}"
    for key in ("tool", "reason"):
        if sensors.get(key) is not None and not isinstance(sensors[key], str):
            return f"'power_and_temperature.{key}' must be a string or null, got {sensors[key]!r}"
    for when in ("initial", "steady"):
        readings = sensors.get(when)
        if readings is not None and not isinstance(readings, Mapping):
            return f"'power_and_temperature.{when}' must be an object or null, got {readings!r}"
        for kind, values in (readings or {}).items():
            if values is not None and not (isinstance(values, Mapping) and all(
                    v is None or is_finite_number(v) for v in values.values())):
                return (f"'power_and_temperature.{when}.{kind}' must be an object of numbers (one per sensor), "
                        f"got {values!r}")
    return None


def row_cells(record: Record) -> list[str]:
    """The HTML cells after the backend's: sizes, throughput, temperature, frequency, power."""
    package = record.runtime.package if record.runtime is not None else None
    runtime_reason = package.reason if package else None
    cells = [f'<td class="n">{megabytes(record.artifact_bytes)}</td>',
             f'<td class="n" title="{escape(runtime_reason or "")}">{megabytes(record.runtime_bytes)}</td>',
             f'<td class="n">{significant(record.throughput)}</td>']
    sensors = record.power_and_temperature
    if sensors is None:
        return cells + [f'<td class="muted">{DASH}</td>'] * 3
    if not sensors.initial and not sensors.steady:
        return cells + [f'<td colspan="3" class="muted">{escape(sensors.reason or "not exposed")}</td>']
    return cells + [f"<td>{_readings(sensors, 'temperature_c')}</td>",
                    f'<td class="n">{_span(_mean_mhz(sensors.initial), _mean_mhz(sensors.steady))}</td>',
                    f"<td>{_readings(sensors, 'power_w')}</td>"]
