"""``pytest-edge device prepare [NAME]`` and ``pytest-edge device list``: provision emulated devices
ahead of time (a CI cache step) and show every configured device, its kind, state and runtimes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..devices import qemu as qemu_device
from ..devices.folder import size_mb
from ..devices.kinds import DeviceKind, device_kind
from ..errors import EdgeError
from ..report.table import format_table


def add_arguments(commands: Any) -> None:
    device = commands.add_parser("device", help="devices of edge_devices: prepare emulated ones, list them all")
    device_commands = device.add_subparsers(dest="device_command", required=True)
    prepare = device_commands.add_parser(
        "prepare", help="provision the project's emulated devices (qemu:aarch64) now, e.g. in a CI cache step")
    prepare.add_argument("name", nargs="?", help="only this device of edge_devices")
    prepare.add_argument("--kind", help="provision this device kind (qemu:aarch64) without a project")
    prepare.add_argument("--cache", help="the device cache folder (default: the project's edge_device_cache)")
    prepare.add_argument("--verify", action="store_true",
                         help="check every file's sha256 against the manifest (default: sizes), rebuild if damaged")
    prepare.set_defaults(func=prepare_command)
    listing = device_commands.add_parser("list", help="each configured device: kind, state, runtimes")
    listing.add_argument("--cache", help="the device cache folder (default: the project's edge_device_cache)")
    listing.set_defaults(func=list_command)


def _project() -> tuple[dict[str, str], Path]:
    from .project import project_settings

    settings = project_settings()
    return settings.devices, settings.device_cache


def _progress(line: str) -> None:
    print(f"pytest-edge: {line}", flush=True)


def prepare_command(args: argparse.Namespace) -> int:
    try:
        if args.kind:
            qemu_device.parse_kind(args.kind)
            devices, cache = {args.kind: args.kind}, Path(args.cache) if args.cache else qemu_device.default_cache()
        else:
            devices, cache = _project()
            cache = Path(args.cache) if args.cache else cache
    except (EdgeError, ValueError) as exc:
        print(f"pytest-edge device prepare: {exc}", file=sys.stderr)
        return 2
    if args.name:
        if args.name not in devices:
            print(f"pytest-edge device prepare: no device {args.name!r} in edge_devices (known: "
                  f"{', '.join(devices) or 'none'})", file=sys.stderr)
            return 2
        devices = {args.name: devices[args.name]}
    emulated = {name: command for name, command in devices.items() if device_kind(command) is DeviceKind.QEMU}
    for name in devices.keys() - emulated.keys():
        print(f"{name}: a command device ({devices[name]}): nothing to prepare here")
    if not emulated:
        if not devices:
            print("no devices in edge_devices; `pytest-edge device prepare --kind qemu:aarch64` provisions one anyway")
        return 0
    failed = 0
    for name, command in emulated.items():
        try:
            device = qemu_device.provision(cache, qemu_device.parse_kind(command), _progress, verify=args.verify)
        except (qemu_device.ProvisionError, OSError) as exc:
            print(f"{name}: cannot be provisioned: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: ready ({command.strip()}, qemu-user {device.qemu_version}, "
              f"{size_mb(device.folder):.0f} MB): {device.folder}")
    return 1 if failed else 0


def list_command(args: argparse.Namespace) -> int:
    try:
        devices, cache = _project()
    except EdgeError as exc:
        print(f"pytest-edge device list: {exc}", file=sys.stderr)
        return 2
    cache = Path(args.cache) if args.cache else cache
    if not devices:
        print("no devices in edge_devices")
        return 0
    rows = []
    for name, command in devices.items():
        if device_kind(command) is not DeviceKind.QEMU:
            rows.append([name, "command", "-", "what its worker reports", command])
            continue
        try:
            recipe = qemu_device.recipe_for(qemu_device.parse_kind(command))
        except ValueError as exc:
            rows.append([name, command.strip(), f"unknown kind: {exc}", "-", "-"])
            continue
        state = qemu_device.host_problem() or qemu_device.state(cache, recipe)
        if state == "absent":
            state = "absent (provisioned on first use or by `pytest-edge device prepare`)"
        runtimes = ", ".join(f"{d} {v}" for d, v in recipe.wheels)
        rows.append([name, command.strip(), state, f"Python {recipe.python}: {runtimes}", str(cache / recipe.key)])
    for line in format_table(rows, ["device", "kind", "state", "runtimes", "where"]):
        print(line)
    return 0
