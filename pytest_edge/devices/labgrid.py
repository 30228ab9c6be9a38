"""Board farms through labgrid: a device that is a farm place, by name (``labgrid:rpi4-01``) or by
tags (``labgrid:board=rpi4,ram=8g``, any free place that has them).

At a device's first use a session reserves a place at the coordinator (labgrid's own fair
scheduler picks it, so two sessions asking for the same tags get different places), waits for the
allocation up to ``edge_labgrid_wait`` seconds, acquires it, reads its ``NetworkService`` (address,
port, username) and starts the worker there over SSH, the SSH device path (artifacts travel by
content). It releases the place at the end of the session. A guard process of its own, started
in a session of its own and holding a pipe from this process, releases the place when this
process dies without doing so (SIGKILL, an OOM kill), so a killed CI job frees its board at once
instead of holding it until an admin kicks it.

An existing reservation is honoured: with ``LG_TOKEN`` set, the place allocated to that token is
used (and the reservation, the user's, is left to the user); with ``LG_PLACE`` set and the device
``labgrid:`` alone, that place. A place the user already acquired is used as it is and left
acquired.

labgrid is driven through ``labgrid-client`` (:mod:`.labgrid_client`).
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import string
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from ..measurement.machine import FarmPlace
from .kinds import DeviceKind
from .labgrid_client import FarmError, LabgridClient, PlaceState, identity

KIND = DeviceKind.LABGRID.value
DEFAULT_COORDINATOR = "127.0.0.1:20408"  # labgrid-client's own default
DEFAULT_WAIT_S = 300.0
# Runs the worker on the place's NetworkService; {address} {port} {username} {place} are filled in
# (shell-quoted). BatchMode: a farm board is reached with keys, never a password prompt.
DEFAULT_COMMAND = ("ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -p {port} {username}@{address} "
                   "python3 -m pytest_edge.worker --stdio")
PLACEHOLDERS = ("address", "port", "username", "place")
# labgrid's own rules for tag keys and values (labgrid.remote.common TAG_KEY / TAG_VAL).
_TAG_KEY = re.compile(r"^[a-z][a-z0-9_]+$")
_TAG_VALUE = re.compile(r"^[a-z0-9_]?[a-z0-9_-]*$")
_PLACE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")
EXTRA_HINT = "install the labgrid extra: pip install 'pytest-edge[labgrid]'"
_formatter = string.Formatter()


@dataclass(frozen=True)
class FarmRequest:
    """What a ``labgrid:`` device asks for: one place by name, or any place with these tags."""

    place: str | None = None
    tags: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, spec: str) -> "FarmRequest":
        body = spec.strip()[len(KIND):].strip()
        if not body:
            return cls()
        if "=" not in body:
            if not _PLACE_NAME.match(body):
                raise ValueError(f"{spec.strip()!r}: {body!r} is not a labgrid place name")
            return cls(place=body)
        tags = []
        for pair in body.split(","):
            key, sep, value = pair.strip().partition("=")
            if not sep or not _TAG_KEY.match(key) or not _TAG_VALUE.match(value):
                raise ValueError(f"{spec.strip()!r}: {pair.strip()!r} is not a labgrid tag KEY=VALUE (keys: "
                                 "lowercase letters, digits and _, starting with a letter; values: lowercase "
                                 "letters, digits, _ and -)")
            tags.append((key, value))
        return cls(tags=tuple(tags))

    def filters(self) -> list[str]:
        """``labgrid-client reserve`` filters (the coordinator gives every place the tag ``name``)."""
        return [f"name={self.place}"] if self.place else [f"{key}={value}" for key, value in self.tags]

    def describe(self) -> str:
        return f"place {self.place}" if self.place else "a place tagged " + ",".join(self.filters())


@dataclass(frozen=True)
class FarmSettings:
    coordinator: str = DEFAULT_COORDINATOR
    wait_s: float = DEFAULT_WAIT_S
    command: str = DEFAULT_COMMAND

    def __post_init__(self) -> None:
        try:
            unknown = {name for _, name, _, _ in _formatter.parse(self.command) if name} - set(PLACEHOLDERS)
        except ValueError as exc:
            raise ValueError(f"edge_labgrid_command: {exc}") from None
        if unknown:
            raise ValueError(f"edge_labgrid_command: unknown placeholder(s) {sorted(unknown)}; it may use "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        try:  # what parse() lets by: positional fields ("ssh {} {address}"), indexing, conversions
            self.command.format(**{p: "x" for p in PLACEHOLDERS})
        except (IndexError, KeyError, ValueError, AttributeError, TypeError) as exc:
            raise ValueError(f"edge_labgrid_command: {self.command!r} cannot be filled in ({type(exc).__name__}: "
                             f"{exc}); it may use {', '.join('{' + p + '}' for p in PLACEHOLDERS)} and no other "
                             "field (write a literal brace as {{ or }})") from None
        if not self.wait_s >= 0:  # also refuses NaN
            raise ValueError(f"edge_labgrid_wait: {self.wait_s!r} is not a number of seconds >= 0")


@dataclass
class Lease:
    """A place this session holds: where the board is and what the farm says of it."""

    coordinator: str
    place: str
    exporter: str
    tags: dict[str, str]
    address: str
    port: int
    username: str
    token: str | None = None  # our reservation (cancelled at release); None: the user's or none
    release_at_end: bool = True  # False: the user acquired it before the session
    guard: subprocess.Popen | None = field(default=None, repr=False)

    def command(self, template: str) -> str:
        values = {"address": self.address, "port": str(self.port), "username": self.username, "place": self.place}
        return template.format(**{key: shlex.quote(value) for key, value in values.items()})

    def describe(self) -> FarmPlace:
        """The record's ``farm`` block."""
        return FarmPlace("labgrid", self.coordinator, self.place, self.exporter, dict(self.tags))


def lease(request: FarmRequest, settings: FarmSettings, progress: Callable[[str], None],
          env: dict[str, str] | None = None) -> Lease:
    """Reserve, wait for and acquire a place for ``request`` and read its NetworkService (FarmError
    with the reason when the farm cannot give one in time)."""
    try:
        importlib.import_module("labgrid")
    except ImportError:
        raise FarmError(f"labgrid is not installed in this environment: {EXTRA_HINT}") from None
    env = dict(os.environ if env is None else env)
    client = LabgridClient(settings.coordinator, env)
    user_token = env.get("LG_TOKEN")
    token: str | None = None
    allocated: PlaceState | None = None  # ``show`` of the place, where read already: _acquire reads no second
    if user_token:
        place = f"+{user_token}"
        allocated = client.show(place)  # ``-p +TOKEN show`` names the place allocated to the reservation
        if allocated.name is None:
            raise FarmError(f"LG_TOKEN={user_token}: that reservation has no place allocated at "
                            f"{settings.coordinator}")
    elif request.place is None and not request.tags:
        place = env.get("LG_PLACE") or ""
        if not place:
            raise FarmError("labgrid: names no place and no tags, and LG_PLACE is not set")
    else:
        started = time.monotonic()
        token, allocated_in_time = client.reserve(
            request.filters(), settings.wait_s,
            lambda reservation: progress(f"labgrid: waiting up to {settings.wait_s:g} s for {request.describe()} at "
                                         f"{settings.coordinator} (reservation {reservation})"))
        if not allocated_in_time:
            _quietly(client.cancel, token)
            raise FarmError(f"no free {request.describe().removeprefix('a ')} at {settings.coordinator} within "
                            f"{settings.wait_s:g} s (edge_labgrid_wait){_who_holds(client, request)}")
        place = f"+{token}"
        allocated = client.show(place)
        progress(f"labgrid: {allocated.name or ''} allocated after {time.monotonic() - started:.1f} s")
    try:
        return _acquire(client, place, token, settings, env, allocated)
    except (FarmError, ValueError) as exc:
        if token:
            _quietly(client.cancel, token)  # else labgrid holds the allocated place for a minute more
        raise FarmError(str(exc)) from None


def _acquire(client: LabgridClient, place: str, token: str | None, settings: FarmSettings,
             env: dict[str, str], state: PlaceState | None = None) -> Lease:
    """Acquire ``place`` (a name, or ``+TOKEN``: the place allocated to that reservation) unless this
    user holds it already, and read its NetworkService. ``state``: its ``show``, where read already
    (each labgrid-client call is a fresh Python importing grpc: 0.4 s of CPU)."""
    state = state or client.show(place)
    name = state.name or place
    release_at_end = True
    guard = None
    if state.acquired is None:
        # The guard first: a session killed between the acquisition and a guard started after it
        # (a labgrid-client call, a second or so) held the board until someone released it by hand.
        guard = _start_guard(settings.coordinator, name, token, env)
        try:
            client.acquire(place)
        except FarmError:
            _stand_down(guard)
            raise
    elif state.acquired == identity(env):
        release_at_end = False  # acquired by the user before the session: theirs to release
    else:
        raise FarmError(f"place {name} is acquired by {state.acquired}")
    try:
        acquired = client.show(name)
        if not acquired.services:
            raise FarmError(f"place {name} has no NetworkService resource: pytest-edge reaches a board over SSH "
                            "(add one to the exporter's configuration and match it to the place)")
        exporter, params = acquired.services[0]
        port = params.get("port") or 22
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise FarmError(f"place {name}: its NetworkService's port {port!r} is not a TCP port")
        held = Lease(coordinator=settings.coordinator, place=name, exporter=exporter, tags=acquired.tags,
                     address=str(params.get("address", "")), port=port,
                     username=str(params.get("username") or ""), token=token, release_at_end=release_at_end)
    except FarmError:
        if release_at_end:
            _quietly(client.release, name)
        if guard is not None:
            _stand_down(guard)
        raise
    held.guard = guard
    return held


def release(held: Lease, env: dict[str, str] | None = None) -> list[str]:
    """Give the place back (and cancel our reservation); what went wrong, said (never raised: this
    runs at the session's end)."""
    problems = []
    client = LabgridClient(held.coordinator, dict(os.environ if env is None else env))
    if held.release_at_end:
        try:
            client.release(held.place)
        except FarmError as exc:
            problems.append(str(exc))
    if held.token:
        try:
            client.cancel(held.token)
        except FarmError:
            pass  # an acquired-then-released reservation may be gone already
    if held.guard is not None:
        _stand_down(held.guard)
    return problems


def _stand_down(guard: subprocess.Popen) -> None:
    """Tell the guard the place was released (or never acquired): it exits without releasing."""
    if guard.poll() is not None:
        return
    try:
        guard.stdin.write(b"released\n")  # type: ignore[union-attr]
        guard.stdin.close()  # type: ignore[union-attr]
        guard.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        guard.kill()


def _start_guard(coordinator: str, place: str, token: str | None, env: dict[str, str]) -> subprocess.Popen:
    """A process in a session of its own that releases ``place`` (and cancels ``token``) when our end
    of its pipe closes without a "released" line: this process died holding, or acquiring, the board."""
    args = [sys.executable, "-m", "pytest_edge.devices.labgrid", "--guard", coordinator, place, token or ""]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True, close_fds=True)


def _guard(coordinator: str, place: str, token: str) -> int:
    said = sys.stdin.buffer.read()  # until the session's end of the pipe closes
    if b"released" in said:
        return 0
    client = LabgridClient(coordinator)
    _quietly(client.release, place)
    if token:
        _quietly(client.cancel, token)
    return 0


def _quietly(action: Callable[[str], None], argument: str) -> None:
    try:
        action(argument)
    except FarmError:
        pass


def _who_holds(client: LabgridClient, request: FarmRequest) -> str:
    """``; matching places: rpi-1 acquired by ci/job-4, ...`` for a wait that timed out, where it
    can be read (``labgrid-client -v places``: every place with its tags and holder)."""
    try:
        listing = client.run("-v", "places")
    except FarmError:
        return ""
    wanted = request.tags or (("name", request.place or ""),)
    held = []
    for block in re.split(r"^(?=Place ')", listing, flags=re.M):
        state = PlaceState.parse(block)
        if state.name is None:
            continue
        tags = {**state.tags, "name": state.name}
        if all(tags.get(key) == value for key, value in wanted):
            held.append(f"{state.name} acquired by {state.acquired}" if state.acquired else f"{state.name} reserved")
    return f"; matching places: {', '.join(held)}" if held else "; no place matches"


if __name__ == "__main__" and sys.argv[1:2] == ["--guard"]:
    sys.exit(_guard(*sys.argv[2:5]))
