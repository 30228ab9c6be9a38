"""An external compiler or toolkit run as a child process, bounded and confined (docs/npu.md).

Every tool the product runs on a user's file (vela today; rknn-toolkit2's and TFLM's workers, converters
later) goes through :func:`run_tool`:

- **memory**: the child's address space is limited in the child itself (``RLIMIT_AS`` set in
  ``preexec_fn``), 2 GiB unless ``PYTEST_EDGE_TOOL_MEMORY`` says otherwise ("4GB", "512MB", "0" for no
  limit): a 5.5 KB model that declares a tensor of 2**31 elements makes the tool fail for want of
  memory, named as such, instead of taking the machine;
- **time**: the timeout; past it the child's whole process group is killed;
- **output**: kept up to :data:`MAX_OUTPUT_BYTES`; where the tool failed, its own last error line is
  the message (whole, not a cut tail), and the whole output is the error's cause (``pytest
  --fulltrace`` shows it);
- **signals** are named as signals ("vela was killed by SIGSEGV");
- **files** the tool is handed (a model, a configuration) are checked first by :func:`checked_file`:
  a regular file (a FIFO is never opened: it would block), under a size cap.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping, Sequence

from ..errors import MAX_LINE, BackendError, error_line  # noqa: F401 - error_line: the tools' modules import it here

MEMORY_VARIABLE = "PYTEST_EDGE_TOOL_MEMORY"
DEFAULT_MEMORY_BYTES = 2 * 2**30
# What is kept of a tool's standard output and error together; beyond it the rest is read and dropped.
MAX_OUTPUT_BYTES = 32 * 2**20
_OUT_OF_MEMORY = re.compile(r"MemoryError|bad_alloc|[Cc]annot allocate memory|out of memory|Unable to allocate")


class ToolFailed(BackendError):
    """A tool ended without doing its work: ``ended`` how ("exit status 1", "signal SIGSEGV",
    "timeout", "memory limit"), ``output`` all it printed (also the error's cause)."""

    def __init__(self, message: str, ended: str, output: str) -> None:
        super().__init__(message)
        self.ended, self.output = ended, output


class ToolOutput(Exception):
    """The whole output of a tool that failed: the cause of its :class:`ToolFailed`, shown by
    ``pytest --fulltrace``."""


@dataclass(frozen=True)
class ToolRun:
    """A finished run: what the tool printed (standard output then error) and the peak resident
    memory of its process (bytes; None where the system does not say)."""

    output: str
    peak_rss_bytes: int | None


def memory_limit() -> int | None:
    """The address-space limit of a tool's process in bytes (``PYTEST_EDGE_TOOL_MEMORY``; default
    2 GiB; None for none: "0")."""
    from ..units import parse_mb

    value = os.environ.get(MEMORY_VARIABLE, "").strip()
    if not value:
        return DEFAULT_MEMORY_BYTES
    megabytes = parse_mb(value, MEMORY_VARIABLE)
    return None if megabytes == 0 else int(megabytes * 2**20)


def checked_file(path: Path, what: str, max_bytes: int) -> int:
    """The size of ``path``, a regular file of at most ``max_bytes``; else a BackendError naming it.
    Nothing is opened: ``os.stat`` tells a FIFO or a device (whose read would block or never end)."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise BackendError(f"{what} {path}: cannot be read ({error.strerror or error})") from None
    if not stat.S_ISREG(info.st_mode):
        raise BackendError(f"{what} {path}: not a regular file (a FIFO, device or folder is not read)")
    if info.st_size > max_bytes:
        raise BackendError(f"{what} {path}: {info.st_size} bytes, more than the {max_bytes} bytes allowed")
    return info.st_size


def _limited(limit: int | None):  # type: ignore[no-untyped-def]
    def limit_the_child() -> None:  # runs in the child, between fork and exec
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return limit_the_child


def _drain(stream: IO[bytes], kept: bytearray) -> None:
    for chunk in iter(lambda: stream.read(65536), b""):
        room = MAX_OUTPUT_BYTES - len(kept)
        if room > 0:
            kept += chunk[:room]


def _size(limit: int) -> str:
    return f"{limit / 2**30:g} GiB" if limit % 2**30 == 0 else f"{limit / 2**20:g} MiB"


def run_tool(command: Sequence[str], *, tool: str, subject: str, timeout_s: float,
             memory_bytes: int | None | str = "default", env: Mapping[str, str] | None = None) -> ToolRun:
    """Run ``command`` (the tool ``tool``, e.g. "vela", on ``subject``: "model.tflite (ethos-u55-128)")
    bounded by ``timeout_s`` and ``memory_bytes`` (the default: :func:`memory_limit`); its output, or a
    :class:`ToolFailed` naming the subject, the tool and how it ended, with its own error line."""
    limit = memory_limit() if memory_bytes == "default" else memory_bytes
    assert limit is None or isinstance(limit, int)
    try:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, preexec_fn=_limited(limit), start_new_session=True,
                                   env=None if env is None else {**os.environ, **env})
    except OSError as error:
        raise BackendError(f"{subject}: {tool} could not start ({error})") from None
    out, err = bytearray(), bytearray()
    readers = [threading.Thread(target=_drain, args=(stream, kept), daemon=True)
               for stream, kept in ((process.stdout, out), (process.stderr, err))]
    for reader in readers:
        reader.start()
    fired: list[bool] = []
    timer = threading.Timer(timeout_s, _kill, (process.pid, fired))
    timer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    except BaseException:  # interrupted (Ctrl-C): the tool does not outlive the run
        _kill(process.pid, [])
        os.waitpid(process.pid, 0)
        raise
    finally:
        timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here (wait4): Popen must not wait again
    for reader in readers:
        reader.join()
    for stream in (process.stdout, process.stderr):
        assert stream is not None
        stream.close()
    output = (bytes(out) + bytes(err)).decode("utf-8", "replace")
    peak = usage.ru_maxrss * 1024 if usage is not None else None
    code = process.returncode
    if fired:
        raise ToolFailed(f"{subject}: {tool} did not finish in {timeout_s:g} s (edge_timeout); it was stopped",
                         "timeout", output) from ToolOutput(output)
    if code == 0:
        return ToolRun(output, peak)
    hungry = _OUT_OF_MEMORY.search(output) is not None
    if hungry or (limit is not None and code in (-signal.SIGKILL, -signal.SIGABRT, -signal.SIGSEGV)
                  and peak is not None and peak > limit * 0.5):
        how = "memory limit"
        said = (f"{subject}: {tool} ran out of memory under its limit of {_size(limit)} ({MEMORY_VARIABLE} sets it)"
                if limit is not None else f"{subject}: {tool} ran out of memory")
        said += f": {error_line(output)}" if output.strip() else ""
    elif code < 0:
        how = f"signal {_signal_name(-code)}"
        said = f"{subject}: {tool} was killed by {_signal_name(-code)}" + (
            f"; it printed: {error_line(output)}" if output.strip() else "")
    else:
        how = f"exit status {code}"
        said = f"{subject}: {tool} failed (exit status {code}): {error_line(output)}"
    raise ToolFailed(said, how, output) from ToolOutput(output)


def _kill(pid: int, fired: list[bool]) -> None:
    fired.append(True)
    try:
        os.killpg(pid, signal.SIGKILL)  # its own session: the tool and whatever it started
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
