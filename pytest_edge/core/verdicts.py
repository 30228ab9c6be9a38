"""A record's verdicts and its timing policy, as the report spells them (SPEC §6): what
:class:`~pytest_edge.core.record.Record` concludes, what the merge gate says, and why timing is
not judged. Apart from record.py so the blocks that carry a policy (a decoder's, core/
generation_record.py) need not import the record that holds them."""

from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..measurement.machine import Machine

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (requires-python): 3.11's StrEnum, whose str() and format() are the value
    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


class Verdict(StrEnum):
    """A record's verdict, decided by :meth:`Record.conclude` and the constructors. The values are the
    report's strings (SPEC §6), so a member equals what a stored report holds: a report read as JSON
    is compared with members without converting it."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    DOES_NOT_CONVERT = "does not convert"  # a borrowed artifact the backend's frontend cannot convert

    @classmethod
    def from_json(cls, value: Any, where: str) -> "Verdict":
        """The member a report's ``verdict`` names; ValueError naming ``where`` (the file and record)
        for anything else: a stored report is untrusted input."""
        return _member(cls, value, where, "verdict")


class GateVerdict(StrEnum):
    """The merge gate's verdict on a record (``baseline_check["verdict"]``) and on each figure it
    judged (a finding's ``verdict``: failed, inconclusive, or accepted by an acceptance)."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    ACCEPTED = "accepted"  # a failure that an acceptance (core/acceptance.py) passes, with its reason

    @classmethod
    def from_json(cls, value: Any, where: str) -> "GateVerdict":
        """As :meth:`Verdict.from_json`, for a gate's or a finding's verdict."""
        return _member(cls, value, where, "gate verdict")


def _member(enum: Any, value: Any, where: str, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(repr(m.value) for m in enum)
        raise ValueError(f"{where}: unknown {what} {str(value)[:60]!r} (known: {known})") from None


class TimingNotJudged(Enum):
    """Why a record's timing and memory are not judged, as a policy: code compares members; the
    sentence the report shows (its ``timing_not_judged``) is the member's :attr:`reason`, read back
    by :meth:`from_json`. Not a str, so a member written to JSON as it is fails instead of writing a
    name no report has."""

    # An emulated device (edge_emulated_timing = off | record | judge): recorded, or not even measured.
    NOT_JUDGED = "recorded, not judged"
    NOT_MEASURED = "not measured"
    # A compile-time target (an NPU compiler, docs/npu.md).
    COMPILE_ONLY = "compile only"

    @property
    def reason(self) -> str:
        """The report's sentence for this policy (docs/devices-emulated-arm.md and docs/npu.md quote it)."""
        return _TIMING_REASONS[self]

    def __str__(self) -> str:
        return self.reason

    @classmethod
    def from_json(cls, value: Any, where: str) -> "TimingNotJudged | None":
        """The policy a report's ``timing_not_judged`` says (None for none); ValueError naming
        ``where`` for a sentence of no policy: a stored report is untrusted input."""
        try:
            return cls.read(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def read(cls, value: Any) -> "TimingNotJudged | None":
        """:meth:`from_json` without the place (the codec adds it)."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str) and value in _BY_REASON:
            return _BY_REASON[value]
        raise ValueError(f"unknown timing_not_judged {str(value)[:60]!r} (expected null or one of the "
                         "sentences pytest-edge writes: an emulated device's, recorded or not measured, or a "
                         "compile-time target's)")


_TIMING_REASONS = {
    TimingNotJudged.NOT_JUDGED: "emulated device: timing and memory are not the target's",
    TimingNotJudged.NOT_MEASURED: ("emulated device: timing and memory are not the target's, so they were not measured "
                                   "(edge_emulated_timing = record measures them)"),
    TimingNotJudged.COMPILE_ONLY: ("compile-time target: the compiler ran here and nothing executed, so no output was "
                                   "compared and no latency, load time or memory was measured (the compiler's estimate "
                                   "is the record's npu block)"),
}
_BY_REASON = {reason: member for member, reason in _TIMING_REASONS.items()}
NOT_JUDGED, NOT_MEASURED, COMPILE_ONLY = TimingNotJudged.NOT_JUDGED, TimingNotJudged.NOT_MEASURED, \
    TimingNotJudged.COMPILE_ONLY


def timing_not_judged(machine: Machine | None, emulated_timing: str) -> TimingNotJudged | None:
    """Why budgets and the baseline gate are not judged on this machine (``NOT_MEASURED``: not even
    measured, the default on an emulated device; ``NOT_JUDGED``: recorded), or None. ``machine``: a
    device's (None: this machine)."""
    if machine is None or not machine.emulated or emulated_timing == "judge":
        return None
    return NOT_MEASURED if emulated_timing == "off" else NOT_JUDGED
