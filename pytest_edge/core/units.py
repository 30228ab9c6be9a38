"""The units budgets and settings are written in, parsed: times ("12ms", "1.5s"), sizes ("1.5GB"),
fractions ("5%"), drift ratios ("10%" slower), percentages and counts. Each refusal names what was
being parsed (the keyword or option) and what it expected."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ..errors import EdgeUsageError

_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")
_TIME_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}
_SIZE_UNITS = {"": 1.0, "mb": 1.0, "mib": 1.0, "kb": 1 / 1024, "kib": 1 / 1024, "gb": 1024.0,
               "gib": 1024.0, "b": 1 / 2**20}


def parse_value(value: Any, units: Mapping[str, float], what: str, default_unit: str) -> float:
    if isinstance(value, bool):
        raise EdgeUsageError(f"{what}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
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
        raise EdgeUsageError(f"{what}: {value!r} must be a finite number >= 0")
    return number


def parse_ms(value: Any, what: str = "time") -> float:
    return parse_value(value, _TIME_UNITS, what, "ms")


def parse_mb(value: Any, what: str = "memory") -> float:
    return parse_value(value, _SIZE_UNITS, what, "MB")


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


def parse_drift(value: Any, what: str = "max_drift") -> float:
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
        raise EdgeUsageError(f"{what}: expected an integer >= {minimum}, got {value!r}")
    return value



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
