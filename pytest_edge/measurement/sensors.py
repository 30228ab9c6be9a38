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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from .. import codec

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


def _cpu_mhz(root: Path) -> "CpuMhz | None":
    """Current frequency over the CPUs that report one: mean, min and max in MHz."""
    khz = [_number(f) for f in sorted((root / CPUS).glob("cpu[0-9]*/cpufreq/scaling_cur_freq"))]
    mhz = [k / 1000 for k in khz if k is not None]
    if not mhz:
        return None
    return CpuMhz(round(sum(mhz) / len(mhz), 1), min(mhz), max(mhz), len(mhz))


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


@dataclass(frozen=True)
class Reading:
    """One reading of every sensor found (:func:`read`), with the time it was taken: inside the worker
    only (a window of two readings is what leaves it)."""

    t_ns: int
    temperature_c: dict[str, float] | None = None
    cpu_mhz: CpuMhz | None = None
    power_w: dict[str, float] | None = None  # power_now, by supply
    energy_uj: dict[str, tuple[float, float | None]] | None = None  # RAPL: (counter, wrap-around range)

    def readings(self) -> "Readings | None":
        """What a record keeps of this reading (RAPL needs two); None where nothing was read."""
        if self.temperature_c is None and self.cpu_mhz is None and self.power_w is None:
            return None
        return Readings(self.temperature_c, self.cpu_mhz, self.power_w)


@dataclass(frozen=True)
class CpuMhz(codec.StoredBlock):
    """Current frequency over the CPUs that report one: mean, min and max in MHz, and how many
    (a figure a stored block lacks stays out of it)."""

    mean: float | None = codec.optional()
    min: float | None = codec.optional()
    max: float | None = codec.optional()
    cpus: int | None = codec.optional()


@dataclass(frozen=True)
class Readings(codec.StoredBlock):
    """The readings of a window's ``initial`` or ``steady``: each kind only where it was read."""

    temperature_c: dict[str, float] | None = codec.optional()
    cpu_mhz: CpuMhz | None = codec.optional()
    power_w: dict[str, float] | None = codec.optional()


@dataclass(frozen=True)
class SensorWindow(codec.StoredBlock):
    """The record's ``power_and_temperature``: the readings before the warm-up (``initial``) and at
    the end of the timed runs (``steady``, with RAPL power over the window), each None where nothing
    was read, and ``reason`` saying what could not be read (None when everything was)."""

    tool: str | None = None  # TOOL
    initial: Readings | None = None
    steady: Readings | None = None
    reason: str | None = None


def read(root: Path | str = "/") -> Reading:
    """One reading of every sensor found under ``root``: ``temperature_c``, ``cpu_mhz``,
    ``power_w`` (power_now), ``energy_uj`` (RAPL) and the time it was taken; empty parts None."""
    root = Path(root)
    t_ns = time.monotonic_ns()
    temperatures, mhz, power, energy = _temperatures(root), _cpu_mhz(root), _power_now_w(root), _energy_uj(root)
    return Reading(t_ns, temperatures or None, mhz, power or None, energy or None)


def _missing(root: Path, initial: Readings | None, steady: Readings | None) -> str | None:
    """What the machine does not expose, in words naming where it was looked for."""
    if not (root / "sys").is_dir():
        return f"no sysfs at {root / 'sys'} (not Linux): no temperature, frequency or power readings"
    found = [r for r in (initial, steady) if r is not None]
    missing = []
    if not any(r.temperature_c is not None for r in found):
        missing.append(f"no readable thermal zones in {root / THERMAL}")
    if not any(r.cpu_mhz is not None for r in found):
        missing.append(f"no CPU frequency in {root / CPUS}/cpu*/cpufreq/scaling_cur_freq")
    if not any(r.power_w is not None for r in found):
        missing.append(f"no power readings: neither a readable RAPL energy_uj in {root / POWERCAP} "
                       f"nor power_now in {root / POWER_SUPPLY}")
    return "; ".join(missing) or None


def window(before: Reading, after: Reading, root: Path | str = "/") -> SensorWindow:
    """The window of a run between two readings: the readings themselves (RAPL power, the mean over
    the window, is in ``steady``), and ``reason`` saying what could not be read (None when
    everything was). ``initial`` and ``steady`` are None when nothing was."""
    seconds = (after.t_ns - before.t_ns) / 1e9
    rapl = {}
    for name, (end, wrap) in (after.energy_uj or {}).items():
        start = (before.energy_uj or {}).get(name)
        if start is None or seconds <= 0:
            continue
        used = end - start[0]
        if used < 0 and wrap:  # the counter wrapped around once
            used += wrap
        if used >= 0:
            rapl[f"rapl {name}"] = round(used / 1e6 / seconds, 3)
    initial, steady = before.readings(), after.readings()
    if rapl:  # a counter has no figure before an interval
        steady = replace(steady or Readings(), power_w={**((steady and steady.power_w) or {}), **rapl})
    return SensorWindow(TOOL, initial, steady, _missing(Path(root), initial, steady))


def combine(windows: Sequence[SensorWindow | None]) -> SensorWindow | None:
    """One figure for the measuring processes, taken one after another: the first one's initial
    readings and the last one's steady readings (the machine over the whole measurement)."""
    seen = [w for w in windows if w is not None]
    if not seen:
        return None
    first, last = seen[0], seen[-1]
    return SensorWindow(last.tool, first.initial, last.steady, last.reason)
