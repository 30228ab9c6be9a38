"""What an ``edge_devices`` entry is, read from its command in one place: a command that starts a
worker there (``ssh pi5 python3 -m pytest_edge.worker --stdio``, ``adb shell ...``), an emulated
machine this host provisions (``qemu:aarch64``, :mod:`.qemu`) or a board-farm place
(``labgrid:rpi4-01``, ``labgrid:board=rpi4``, :mod:`.labgrid`). Code elsewhere asks
:func:`device_kind`, never the command's text."""

from __future__ import annotations

from enum import Enum


class DeviceKind(Enum):
    """A device's kind; a kind's value is the prefix that names it in a command (none for a plain
    command)."""

    COMMAND = ""
    QEMU = "qemu:"
    LABGRID = "labgrid:"


def device_kind(command: str) -> DeviceKind:
    spec = command.strip()
    for kind in (DeviceKind.QEMU, DeviceKind.LABGRID):
        if spec.startswith(kind.value):
            return kind
    return DeviceKind.COMMAND
