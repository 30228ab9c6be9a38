"""The machine a run measured on, typed: this machine (:func:`machine_info`), a device's as its
worker's hello says (the NumPy it runs with, ``emulated`` on qemu:aarch64) and a board farm's place
(``farm``); the report's ``machine`` block, a merged report's ``machines`` and a record's
``device.machine``.

A stored report's block is read leniently and written back as it was read: a key the block did
not hold is :data:`ABSENT` and stays out, where a null (``cores`` where ``os.cpu_count()`` knew
none) is None and stays a null; keys another version wrote are kept (``unknown``) and written after.
"""

from __future__ import annotations

import enum
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .. import codec


T = TypeVar("T")


class Absent(enum.Enum):
    """A key the block did not hold: never written, never read from JSON (each field reads its own
    type), and false, as a missing key reads."""

    KEY = "absent"

    def __bool__(self) -> bool:
        return False


ABSENT = Absent.KEY


def _absent(value: object) -> bool:
    return value is ABSENT


def _kept(kind: Any) -> Any:
    """A field written where the block has it, null included; ABSENT where its key was missing (or
    its value was of another type: a lenient read keeps no value it cannot type)."""
    return codec.json_field(default=ABSENT, omit=_absent, decode=codec.reader(kind))


def read_object(kind: type[T], value: Any, where: str) -> T | None:
    """A lenient block that a stored report holds as an object (or a null: None), read as ``kind``;
    ValueError for anything else, which a lenient reader takes as a key it cannot keep (a lenient
    class alone would read a string as its defaults)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    return codec.from_json(kind, value, where)


@dataclass(frozen=True)
class FarmPlace(codec.StoredBlock):
    """A board farm's place a device's worker ran on, as the farm says of it (a record's
    ``device.machine.farm``): the engine, its coordinator, the place, its exporter and tags."""

    engine: str | None | Absent = _kept(str | None)
    coordinator: str | None | Absent = _kept(str | None)
    place: str | None | Absent = _kept(str | None)
    exporter: str | None | Absent = _kept(str | None)
    tags: dict[str, str] | None | Absent = _kept(dict[str, str] | None)


@dataclass(frozen=True)
class Machine(codec.StoredBlock):
    """A machine's description, in the block's keys and order: this machine's figures
    (:func:`machine_info`), then a device's (``numpy``, ``emulated``, ``farm``), then the names a
    history (``name``) and a merged report (``label``) give it; another version's keys last."""

    cpu: str | None | Absent = _kept(str | None)
    arch: str | None | Absent = _kept(str | None)
    cores: int | None | Absent = _kept(int | None)
    memory_mb: int | None | Absent = _kept(int | None)
    os: str | None | Absent = _kept(str | None)
    python: str | None | Absent = _kept(str | None)
    numpy: str | None | Absent = _kept(str | None)  # a device worker's NumPy
    emulated: str | None | Absent = _kept(str | None)  # a device's emulator (qemu), only there
    farm: FarmPlace | None | Absent = codec.json_field(default=ABSENT, omit=_absent, decode=lambda value: read_object(
        FarmPlace, value, "a machine's farm"))  # what the board farm says of its place
    name: str | None | Absent = _kept(str | None)  # the machine a history keeps the run under
    label: str | None | Absent = _kept(str | None)  # a merged report's: how its records name it

    def named(self, name: str) -> "Machine":
        """This block with the ``name`` a history keeps its run under."""
        return replace(self, name=name)

    def labelled(self, label: str) -> "Machine":
        """This block with the ``label`` a merged report's records name it by."""
        return replace(self, label=label)

    def on_device(self, numpy: str, emulated: str | None) -> "Machine":
        """This machine as a device's worker describes it: with its NumPy, and the emulator where one
        runs it (the key only there)."""
        return replace(self, numpy=numpy, emulated=emulated or ABSENT)

    def on_farm(self, farm: FarmPlace) -> "Machine":
        """This device's block with what the board farm says of its place."""
        return replace(self, farm=farm)

    @classmethod
    def from_json(cls, data: Any, where: str = "a machine block") -> "Machine":
        """A block of a report or of a worker's hello, read leniently (never an error)."""
        return codec.from_json(cls, data, where)


def machine_info() -> Machine:
    """This machine: its CPU's model name, ISA, cores, memory, OS and Python (a figure it cannot
    read is None: written as a null)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_mb = None
    try:
        memory_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)
    except (ValueError, OSError, AttributeError):
        pass
    return Machine(cpu=cpu, arch=platform.machine(), cores=os.cpu_count(), memory_mb=memory_mb,
                   os=platform.platform(), python=platform.python_version())


__all__ = ["ABSENT", "Absent", "FarmPlace", "Machine", "machine_info", "read_object"]
