"""The units budgets and settings are written in, parsed: times ("12ms", "1.5s"), sizes ("1.5GB"),
fractions ("5%"), drift ratios ("10%" slower), percentages and counts. Each refusal names what was
being parsed (the keyword or option) and what it expected."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from .errors import EdgeUsageError

_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")
_TIME_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}
_SIZE_UNITS = {"": 1.0, "mb": 1.0, "mib": 1.0, "kb": 1 / 1024, "kib": 1 / 1024, "gb": 1024.0,
               "gib": 1024.0, "b": 1 / 2**20}


def parse_value(value: Any, units: Mapping[str, float], what: str, default_unit: str) -> float:
    if isinstance(value, bool):
        raise EdgeUsageError(f"{what}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int past a float's range (10**400): refused by name, not a traceback
            raise EdgeUsageError(f"{what}: {shown(value)} is beyond a float's range; expected a finite "
                                 "number >= 0") from None
    else:
        match = _UNIT.match(str(value))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in units:
            if not default_unit:  # a plain number, no unit to suggest
                raise EdgeUsageError(f"{what}: cannot parse {value!r}; expected a number >= 0")
            raise EdgeUsageError(f"{what}: cannot parse {value!r}; use a number of {default_unit} "
                                 f"or a string such as '12{default_unit}'")
        number = float(match.group(1)) * units[unit]
    if not math.isfinite(number) or number < 0:
        raise EdgeUsageError(f"{what}: {shown(value)} must be a finite number >= 0")
    return number


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a message, at most ``limit`` characters: an int of 5000 digits has no repr
    (Python refuses to convert it) and one of 400 would bury the message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def parse_ms(value: Any, what: str = "time") -> float:
    return parse_value(value, _TIME_UNITS, what, "ms")


def parse_mb(value: Any, what: str = "memory") -> float:
    return parse_value(value, _SIZE_UNITS, what, "MB")


def parse_kb(value: Any, what: str = "memory") -> float:
    """A size in KiB (1024 bytes, as NPU compilers report memory): 256, "256KB", "0.5MB"."""
    return parse_value(value, {unit: factor * 1024 for unit, factor in _SIZE_UNITS.items()}, what, "KB")


def parse_number(value: Any, what: str) -> float:
    """A finite number >= 0 without a unit (a tolerance, a rate)."""
    return parse_value(value, {"": 1.0}, what, "")


def parse_fraction(value: Any, what: str = "fraction") -> float:
    """0.05, "0.05" or "5%"."""
    if isinstance(value, str) and value.strip().endswith("%"):
        number = parse_value(value.strip()[:-1], {"": 1.0}, what, "%") / 100
    else:
        number = parse_value(value, {"": 1.0}, what, "")
    if number > 1:
        raise EdgeUsageError(f"{what}: {value!r} is above 1 (use 0.05 or '5%')")
    return number


def parse_drift(value: Any, what: str = "drift") -> float:
    """A drift budget as a ratio > 1: ``1.10``, ``"1.10"`` or ``"10%"`` (10 % slower at the end)."""
    # One message for every refusal (a ratio of 1 or less would fail every run that got no faster).
    refused = EdgeUsageError(f"{what}: {value!r} must be a ratio above 1 (1.10, or '10%' for 10 % slower "
                             "at the end of the timed runs than at their start)")
    try:
        if isinstance(value, str) and value.strip().endswith("%"):
            ratio = 1 + parse_value(value.strip()[:-1], {"": 1.0}, what, "%") / 100
        else:
            ratio = parse_value(value, {"": 1.0}, what, "")
    except EdgeUsageError:
        raise refused from None
    if not ratio > 1:
        raise refused
    return ratio


def parse_int(value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EdgeUsageError(f"{what}: expected an integer >= {minimum}, got {shown(value)}")
    return value


def parse_bounded_int(value: Any, what: str, minimum: int, maximum: int, why: str) -> int:
    """:func:`parse_int` within ``[minimum, maximum]``; above it refused naming the bound and ``why``."""
    number = parse_int(value, what, minimum)
    if number > maximum:
        raise EdgeUsageError(f"{what}: {shown(number)} is above {maximum:,} ({why})")
    return number



def parse_percent(value: Any, what: str = "--edge-max-regression") -> float:
    """'10%' or 0.1 -> 0.1; regressions may exceed 100 %."""
    text = str(value).strip()
    if text.endswith("%"):
        return parse_value(text[:-1], {"": 1.0}, what, "%") / 100
    return parse_value(text, {"": 1.0}, what, "")


def parse_names(value: Any, what: str) -> list[str] | None:
    """Backend names: "a, b" (an option, an ini value) or a list (a marker's keyword); None: not given."""
    if value is None:
        return None
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [str(v) for v in value]
    raise EdgeUsageError(f"{what}: expected a name or a list of names, got {value!r}")
