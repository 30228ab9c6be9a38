"""Temperature, CPU frequency and power around a timed run, read from Linux sysfs where the
machine exposes them (docs/measurement.md, "Power and temperature").

Plain functions over a root folder (``/`` on a real machine), so the parsing is tested on a
folder laid out like sysfs. The worker reads once before the warm-up (``initial``) and once after
the timed runs (``steady``); power from a RAPL energy counter is the mean over that window, since
a counter needs an interval. Where a machine exposes none of them, the record says so with the
reason instead of a number.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

TOOL = "linux-sysfs"
THERMAL = "sys/class/thermal"
CPUS = "sys/devices/system/cpu"
POWERCAP = "sys/class/powercap"
POWER_SUPPLY = "sys/class/power_supply"


def _number(path: Path) -> float | None:
    """The integer in a sysfs file; None where it is absent, unreadable (RAPL is often root-only)
    or not a number (a zone whose sensor is off answers EIO or ENODATA)."""
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _temperatures(root: Path) -> dict[str, float]:
    """°C per thermal zone, by its type (with the zone's name where two share a type)."""
    found: dict[str, float] = {}
    for zone in sorted((root / THERMAL).glob("thermal_zone*")):
        millidegrees = _number(zone / "temp")
        if millidegrees is None:
            continue
        kind = _text(zone / "type") or zone.name
        name = kind if kind not in found else f"{kind} ({zone.name})"
        found[name] = round(millidegrees / 1000, 3)
    return found


def _cpu_mhz(root: Path) -> dict[str, float] | None:
    """Current frequency over the CPUs that report one: mean, min and max in MHz."""
    khz = [_number(f) for f in sorted((root / CPUS).glob("cpu[0-9]*/cpufreq/scaling_cur_freq"))]
    mhz = [k / 1000 for k in khz if k is not None]
    if not mhz:
        return None
    return {"mean": round(sum(mhz) / len(mhz), 1), "min": min(mhz), "max": max(mhz), "cpus": len(mhz)}


def _energy_uj(root: Path) -> dict[str, tuple[float, float | None]]:
    """RAPL energy counters (µJ) with their wrap-around range, by domain name (package-0, core...)."""
    found = {}
    for domain in sorted((root / POWERCAP).glob("intel-rapl*")):
        energy = _number(domain / "energy_uj")
        if energy is None:
            continue
        name = _text(domain / "name") or domain.name
        found[name if name not in found else f"{name} ({domain.name})"] = (energy, _number(domain / "max_energy_range_uj"))
    return found


def _power_now_w(root: Path) -> dict[str, float]:
    """Instantaneous power of the power supplies that report it (batteries: phones, laptops), in W."""
    found = {}
    for supply in sorted((root / POWER_SUPPLY).glob("*")):
        microwatts = _number(supply / "power_now")
        if microwatts is not None:
            found[supply.name] = round(microwatts / 1e6, 3)
    return found


def read(root: Path | str = "/") -> dict[str, Any]:
    """One reading of every sensor found under ``root``: ``temperature_c``, ``cpu_mhz``,
    ``power_w`` (power_now), ``energy_uj`` (RAPL) and the time it was taken; empty parts left out."""
    root = Path(root)
    reading: dict[str, Any] = {"t_ns": time.monotonic_ns()}
    temperatures, mhz, power, energy = _temperatures(root), _cpu_mhz(root), _power_now_w(root), _energy_uj(root)
    if temperatures:
        reading["temperature_c"] = temperatures
    if mhz:
        reading["cpu_mhz"] = mhz
    if power:
        reading["power_w"] = power
    if energy:
        reading["energy_uj"] = {k: list(v) for k, v in energy.items()}
    return reading


def _missing(root: Path, found: dict[str, Any]) -> str | None:
    """What the machine does not expose, in words naming where it was looked for."""
    if not (root / "sys").is_dir():
        return f"no sysfs at {root / 'sys'} (not Linux): no temperature, frequency or power readings"
    missing = []
    if "temperature_c" not in found:
        missing.append(f"no readable thermal zones in {root / THERMAL}")
    if "cpu_mhz" not in found:
        missing.append(f"no CPU frequency in {root / CPUS}/cpu*/cpufreq/scaling_cur_freq")
    if "power_w" not in found:
        missing.append(f"no power readings: neither a readable RAPL energy_uj in {root / POWERCAP} "
                       f"nor power_now in {root / POWER_SUPPLY}")
    return "; ".join(missing) or None


def window(before: dict[str, Any], after: dict[str, Any], root: Path | str = "/") -> dict[str, Any]:
    """``{"tool", "initial", "steady", "reason"}`` of a run between two readings: the readings
    themselves (RAPL power, the mean over the window, is in ``steady``), and ``reason`` saying what
    could not be read (None when everything was). ``initial`` and ``steady`` are None when nothing was."""
    initial = {k: v for k, v in before.items() if k in ("temperature_c", "cpu_mhz", "power_w")}
    steady = {k: v for k, v in after.items() if k in ("temperature_c", "cpu_mhz", "power_w")}
    seconds = (after["t_ns"] - before["t_ns"]) / 1e9
    rapl = {}
    for name, (end, wrap) in (after.get("energy_uj") or {}).items():
        start = (before.get("energy_uj") or {}).get(name)
        if start is None or seconds <= 0:
            continue
        used = end - start[0]
        if used < 0 and wrap:  # the counter wrapped around once
            used += wrap
        if used >= 0:
            rapl[f"rapl {name}"] = round(used / 1e6 / seconds, 3)
    if rapl:
        steady["power_w"] = {**steady.get("power_w", {}), **rapl}  # a counter has no figure before an interval
    found = {**initial, **steady}
    return {"tool": TOOL, "initial": initial or None, "steady": steady or None, "reason": _missing(Path(root), found)}


def combine(windows: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One figure for the measuring processes, taken one after another: the first one's initial
    readings and the last one's steady readings (the machine over the whole measurement)."""
    seen = [w for w in windows if isinstance(w, dict)]
    if not seen:
        return None
    first, last = seen[0], seen[-1]
    return {"tool": last.get("tool"), "initial": first.get("initial"), "steady": last.get("steady"),
            "reason": last.get("reason")}
