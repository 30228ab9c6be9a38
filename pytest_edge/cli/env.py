"""``pytest-edge env make [BACKEND ...]``, ``pytest-edge env list`` and ``pytest-edge env
requirements BACKEND``: the environments pytest-edge makes for backends whose runtime cannot live in
the main environment (devices/backend_env.py): made ahead of time (a CI cache step), listed, and
their requirements printed (to download the wheels for an offline CI)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..backends import all_backends, get_backend
from ..devices import backend_env
from ..errors import EdgeError
from ..report.table import format_table


def add_arguments(commands: Any) -> None:
    env = commands.add_parser("env", help="the environments pytest-edge makes for backends whose runtime cannot live "
                                          "in this one: make them now, list them, print their requirements")
    env_commands = env.add_subparsers(dest="env_command", required=True)
    where = {"help": f"where the environments are kept (default: ${backend_env.ENVS_VARIABLE}, else "
                     "~/.cache/pytest-edge/envs)"}
    make = env_commands.add_parser("make", help="make the environments of these backends (default: every one that has "
                                                "its own) now, e.g. in a CI cache step")
    make.add_argument("backends", nargs="*", metavar="BACKEND")
    make.add_argument("--dir", **where)
    make.set_defaults(func=make_command)
    listing = env_commands.add_parser("list", help="each environment: its backends, state and folder")
    listing.add_argument("--dir", **where)
    listing.set_defaults(func=list_command)
    requirements = env_commands.add_parser("requirements", help="print what a backend's environment installs "
                                                                "(pip download -r it into a wheelhouse for offline CI)")
    requirements.add_argument("backend", metavar="BACKEND")
    requirements.add_argument("--no-deps", action="store_true", help="the part installed without dependencies")
    requirements.set_defaults(func=requirements_command)


def _by_folder(names: list[str]) -> dict[Path, list[str]]:
    """Requirement folders and the backends that run in each; an EdgeError for a name that has none."""
    folders: dict[Path, list[str]] = {}
    for name in names or [n for n, b in all_backends().items() if b.environment is not None]:
        folder = get_backend(name).environment
        if folder is None:
            raise EdgeError(f"{name} runs in this environment: it has none of its own")
        folders.setdefault(Path(folder), []).append(name)
    return folders


def _root(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else backend_env.default_root()


def _progress(line: str) -> None:
    print(f"pytest-edge: {line}", flush=True)


def make_command(args: argparse.Namespace) -> int:
    try:
        folders = _by_folder(args.backends)
    except EdgeError as exc:
        print(f"pytest-edge env make: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for folder, names in folders.items():
        try:
            made = backend_env.make(folder, _root(args), _progress, label=", ".join(names))
        except backend_env.EnvironmentUnmade as exc:
            print(f"{', '.join(names)}: cannot be made: {exc}", file=sys.stderr)
            failed += 1
            continue
        facts = made.facts()
        print(f"{', '.join(names)}: ready ({len(facts.get('installed') or [])} packages, made in "
              f"{facts.get('made_s', '?')} s): {made.folder}")
    return 1 if failed else 0


def list_command(args: argparse.Namespace) -> int:
    try:
        folders = _by_folder([])
    except EdgeError as exc:
        print(f"pytest-edge env list: {exc}", file=sys.stderr)
        return 2
    if not folders:
        print("no registered backend has an environment of its own")
        return 0
    rows = []
    for folder, names in folders.items():
        try:
            state, target = backend_env.state(folder, _root(args))
        except (OSError, ValueError) as exc:  # a requirements file that cannot be read: said in its row
            rows.append([", ".join(names), f"unreadable: {exc}", str(folder / backend_env.REQUIREMENTS), "-"])
            continue
        if state == "absent":
            state = "absent (made on first use or by `pytest-edge env make`)"
        rows.append([", ".join(names), state, str(folder / backend_env.REQUIREMENTS), str(target)])
    for line in format_table(rows, ["backends", "state", "requirements", "where"]):
        print(line)
    return 0


def requirements_command(args: argparse.Namespace) -> int:
    try:
        folders = _by_folder([args.backend])
    except EdgeError as exc:
        print(f"pytest-edge env requirements: {exc}", file=sys.stderr)
        return 2
    folder = next(iter(folders))
    path = folder / (backend_env.NO_DEPS if args.no_deps else backend_env.REQUIREMENTS)
    print(path.read_text() if path.is_file() else "", end="")
    return 0
