"""How pytest-edge talks to a labgrid coordinator: ``labgrid-client``, labgrid's command line (the
interface farm admins and CI scripts use), run with this interpreter so the ``labgrid`` extra
installed beside pytest-edge is the one used, and what its ``show`` prints, read."""

from __future__ import annotations

import ast
import os
import re
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, TypedDict

CLIENT_TIMEOUT_S = 60.0  # one labgrid-client call (a coordinator that does not answer)


class FarmError(Exception):
    """The farm cannot give this session a place (said as the device's reason)."""


class LabgridClient:
    """``labgrid-client -x COORDINATOR ...`` run with this interpreter."""

    def __init__(self, coordinator: str, env: dict[str, str] | None = None) -> None:
        self.coordinator = coordinator
        self.env = env

    def run(self, *args: str, timeout_s: float = CLIENT_TIMEOUT_S) -> str:
        command = [sys.executable, "-c", "from labgrid.remote.client import main; main()",
                   "-x", self.coordinator, *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=self.env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise FarmError(f"labgrid-client {' '.join(args)}: no answer from the coordinator at "
                            f"{self.coordinator} within {timeout_s:g} s") from None
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise FarmError(f"labgrid-client {' '.join(args)} (coordinator {self.coordinator}): "
                            f"{said[-1] if said else f'exit status {done.returncode}'}")
        return done.stdout

    def reserve(self, filters: list[str], wait_s: float, reserved: Callable[[str], None]) -> tuple[str, bool]:
        """Reserve a place matching ``filters`` and wait up to ``wait_s`` for its allocation, in one
        ``labgrid-client reserve --wait`` (it prints the token, then waits, polling to keep the
        reservation alive): (token, allocated in time). ``reserved(token)`` is called as soon as the
        token is printed. One process where a reserve and a wait were two: 0.4 s of CPU fewer."""
        command = [sys.executable, "-u", "-c", "from labgrid.remote.client import main; main()",
                   "-x", self.coordinator, "reserve", "--wait", "--shell", *filters]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                   stdin=subprocess.DEVNULL)
        try:
            token = _token(process, CLIENT_TIMEOUT_S)
            if token is None:
                process.kill()
                out, err = process.communicate()
                said = (err.decode(errors="replace").strip() or out.decode(errors="replace").strip()).splitlines()
                raise FarmError(f"labgrid-client reserve (coordinator {self.coordinator}): "
                                f"{said[-1] if said else 'printed no token'}")
            reserved(token)
            try:
                _, err = process.communicate(timeout=max(wait_s, 0.1))
            except subprocess.TimeoutExpired:
                return token, False
            if process.returncode != 0:
                said = err.decode(errors="replace").strip().splitlines()
                raise FarmError(f"labgrid-client reserve --wait (coordinator {self.coordinator}): "
                                f"{said[-1] if said else f'exit status {process.returncode}'}")
            return token, True
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()

    def cancel(self, token: str) -> None:
        self.run("cancel-reservation", token)

    def acquire(self, place: str) -> None:
        self.run("-p", place, "acquire")

    def release(self, place: str) -> None:
        self.run("-p", place, "release")

    def show(self, place: str) -> "PlaceState":
        return PlaceState.parse(self.run("-p", place, "show"))


def _token(process: subprocess.Popen, timeout_s: float) -> str | None:
    """The token in ``reserve --shell``'s first line (``export LG_TOKEN=...``), read within
    ``timeout_s``; None where the process printed none (it ended, or the coordinator did not answer)."""
    line = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        while not line.endswith(b"\n") and selector.select(max(deadline - time.monotonic(), 0)):
            chunk = os.read(process.stdout.fileno(), 1)  # type: ignore[union-attr]
            if not chunk:
                break
            line += chunk
    match = re.search(rb"LG_TOKEN=(\S+)", line)
    return match.group(1).decode() if match else None


class NetworkServiceParams(TypedDict, total=False):
    """A NetworkService resource's ``params`` as ``labgrid-client show`` prints them (labgrid's
    ``NetworkService`` attrs: a Python dict, read with ast.literal_eval): the keys the SSH command
    reads. Untrusted text: each is checked where it is used (the port's range)."""

    address: str
    port: int
    username: str


@dataclass
class PlaceState:
    """``labgrid-client -p PLACE show``, read: its tags, who holds it, its network services."""

    name: str | None
    tags: dict[str, str]
    acquired: str | None
    services: list[tuple[str, NetworkServiceParams]]  # (exporter, its NetworkService's params)

    @classmethod
    def parse(cls, text: str) -> "PlaceState":
        name = re.search(r"^Place '([^']+)':", text, re.M)
        tags_line = re.search(r"^\s+tags:\s*(.*)$", text, re.M)
        tags = {}
        for pair in (tags_line.group(1).split(", ") if tags_line and tags_line.group(1).strip() else []):
            key, _, value = pair.partition("=")
            tags[key.strip()] = value.strip()
        acquired = re.search(r"^\s+acquired:\s*(\S+)\s*$", text, re.M)
        services = []
        # "Acquired resource 'NAME' (EXPORTER/GROUP/CLS/NAME):" (or "Matching resource"), then its
        # dict as Python's pprint writes it, indented.
        blocks = re.finditer(r"^(?:Acquired|Matching) resource '[^']*' \(([^/]+)/[^/]+/NetworkService/[^)]*\):\n"
                             r"((?:[ \t]+.*\n?)+)", text, re.M)
        for block in blocks:
            try:
                resource = ast.literal_eval(block.group(2).strip())
            except (ValueError, SyntaxError):
                continue
            if isinstance(resource, dict) and isinstance(resource.get("params"), dict):
                services.append((block.group(1), resource["params"]))
        return cls(name=name.group(1) if name else None, tags=tags,
                   acquired=None if not acquired or acquired.group(1) == "None" else acquired.group(1),
                   services=services)


def identity(env: dict[str, str] | None = None) -> str:
    """``HOST/USER`` as labgrid records an acquisition (LG_HOSTNAME, LG_USERNAME override)."""
    import getpass
    import socket

    env = os.environ if env is None else env
    return f"{env.get('LG_HOSTNAME') or socket.gethostname()}/{env.get('LG_USERNAME') or getpass.getuser()}"
