"""Counting work under Valgrind's callgrind: the command a counted measuring process runs under,
the client requests that switch instrumentation on around the timed runs only, and the dump's
totals. No pytest here.

The client requests are Valgrind's documented "special instruction" sequences (valgrind.h):
rotations that cancel out, then a marker instruction. A native process executes them as no-ops;
Valgrind's JIT recognises them and runs the request. We place the few bytes of one tiny function
in an executable page and call it with ctypes, so counting needs no compiler and no package of its
own: Valgrind on PATH is all (docs/design.md, "Counted mode").
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .protocol import CountedRuns

# callgrind.h: VG_USERREQ_TOOL_BASE('C','T') and the requests after it; valgrind.h: RUNNING_ON_VALGRIND.
_CALLGRIND_BASE = (ord("C") << 24) | (ord("T") << 16)
DUMP_STATS, ZERO_STATS, TOGGLE_COLLECT, DUMP_STATS_AT, START_INSTRUMENTATION, STOP_INSTRUMENTATION = (
    _CALLGRIND_BASE + i for i in range(6))
RUNNING_ON_VALGRIND = 0x1001

# ``uint64 request(uint64 *args)``: the request block (request code, 5 arguments) in, the reply out
# (0 natively). x86_64 (System V): rax = args, rdx = default 0, preamble, xchg rbx,rbx, return rdx.
_AMD64 = bytes.fromhex(
    "4889f8"  # mov rax, rdi
    "31d2"  # xor edx, edx
    "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"  # rol rdi, 3 / 13 / 61 / 51: the preamble
    "4887db"  # xchg rbx, rbx: rdx = request(rax)
    "4889d0"  # mov rax, rdx
    "c3")  # ret
# aarch64: x4 = args, x3 = default 0, preamble (ror x12 by 3, 13, 51, 61), orr x10,x10,x10, return x3.
_ARM64 = b"".join(word.to_bytes(4, "little") for word in (
    0xAA0003E4,  # mov x4, x0
    0xD2800003,  # mov x3, #0
    0x93CC0D8C, 0x93CC358C, 0x93CCCD8C, 0x93CCF58C,  # the preamble
    0xAA0A014A,  # orr x10, x10, x10
    0xAA0303E0,  # mov x0, x3
    0xD65F03C0))  # ret
_CODE = {"x86_64": _AMD64, "AMD64": _AMD64, "aarch64": _ARM64, "arm64": _ARM64}

TOOL = "callgrind"
INSTALL_HINT = "install it: apt-get install valgrind (Debian/Ubuntu), dnf install valgrind (Fedora)"
# Where a counted worker writes its dumps; set by the parent in the worker's environment.
OUT_DIR_ENV = "PYTEST_EDGE_CALLGRIND_DIR"


class ClientRequests:
    """Valgrind client requests from Python; every call is a no-op outside Valgrind."""

    def __init__(self) -> None:
        code = _CODE.get(platform.machine())
        if code is None:
            raise OSError(f"counting instructions is not supported on {platform.machine()} (x86_64 and aarch64 are)")
        self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._page.write(code)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        self._call = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64))(address)

    def request(self, code: int, *args: int) -> int:
        block = (ctypes.c_uint64 * 6)(code, *args, *[0] * (5 - len(args)))
        return int(self._call(block))

    def running_on_valgrind(self) -> int:
        return self.request(RUNNING_ON_VALGRIND)

    def instrument(self, on: bool) -> None:
        """Instrumentation on (from here the JIT adds counting code) or off (native-like speed)."""
        self.request(START_INSTRUMENTATION if on else STOP_INSTRUMENTATION)

    def toggle_collect(self) -> None:
        self.request(TOGGLE_COLLECT)

    def dump(self, label: str) -> None:
        """Write what was collected since the last dump to a dump file now, and zero it."""
        text = ctypes.create_string_buffer(label.encode())
        self.request(DUMP_STATS_AT, ctypes.addressof(text))


def valgrind_path() -> str | None:
    return shutil.which("valgrind")


def valgrind_version(executable: str) -> str:
    try:
        return subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "valgrind"


def command_prefix(executable: str, out_dir: Path, cache_sim: bool = True) -> list[str]:
    """The argv before ``python -m pytest_edge.worker ...``: callgrind with instrumentation and
    collection off until the worker's client requests switch them on around the counted runs."""
    return [executable, f"--tool={TOOL}", "--instr-atstart=no", "--collect-atstart=no",
            f"--cache-sim={'yes' if cache_sim else 'no'}", "--quiet",
            f"--callgrind-out-file={out_dir}/callgrind.%p.out"]


_DUMP_HEAD, _DUMP_TAIL = 16384, 4096


def dump_totals(path: Path) -> dict[str, int]:
    """Event name -> total of a callgrind dump (its ``events:`` line, and its ``totals:`` line, else
    its ``summary:``). ``events:``/``summary:`` open the file and ``totals:`` ends it: only the head and
    the tail are read, since a dump holds every function seen (~12,000 lines for ONNX Runtime), and
    reading it whole under Valgrind took 0.3 s a run, 80 % of a counted process's counting."""
    with open(path, "rb") as dump:
        size = dump.seek(0, os.SEEK_END)
        dump.seek(0)
        if size <= _DUMP_HEAD + _DUMP_TAIL:
            lines = dump.read().decode("utf-8", "replace").splitlines()
        else:
            head = dump.read(_DUMP_HEAD).decode("utf-8", "replace").splitlines()
            dump.seek(size - _DUMP_TAIL)
            tail = dump.read().decode("utf-8", "replace").splitlines()
            # The head's last line may end, and the tail's first begin, mid-line: neither is read.
            lines = head[:-1] + tail[1:]
    events: list[str] = []
    totals: list[int] | None = None
    for line in lines:
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("totals:", "summary:")):
            totals = [int(v) for v in line.split()[1:]]
    if not events or totals is None:
        raise ValueError(f"{path}: not a callgrind dump with totals")
    return {name: totals[i] if i < len(totals) else 0 for i, name in enumerate(events)}


def per_inference(totals: dict[str, float], runs: int) -> tuple[float, dict[str, float]]:
    """Instructions (Ir) and, with the cache simulation, data reads/writes and simulated misses by
    name ({} without it) per inference, from event counts over ``runs`` inferences (1: the median
    run's own)."""
    names = {"Dr": "data_reads", "Dw": "data_writes", "D1mr": "l1_read_misses", "D1mw": "l1_write_misses",
             "I1mr": "l1_instruction_misses", "DLmr": "ll_read_misses", "DLmw": "ll_write_misses"}
    cache = {names[k]: round(v / runs, 1) for k, v in totals.items() if k in names}
    return round(totals.get("Ir", 0) / runs, 1), cache


def worker_env() -> dict[str, str]:
    """Environment of a counted worker: a fixed hash seed, so dict and set orders (and the work
    they cost) are the same in every process."""
    return {"PYTHONHASHSEED": "0"}


def out_dir_from_env() -> Path | None:
    value = os.environ.get(OUT_DIR_ENV)
    return Path(value) if value else None


def count_runs(infer: Callable[[], Any], warmup: int, runs: int) -> CountedRuns:
    """In a worker under callgrind: ``warmup`` uncounted runs, then ``runs`` runs counted one by one;
    the figures are the median run's. One run alone may do extra work now and then (a runtime's
    allocator growing, a lazily built cache: seen as +3.8 % on a 10-run total of ONNX Runtime once in
    six processes); the median run does not see it. The cost of switching collection on and off (a
    few ctypes calls) is counted with no run in between and subtracted.

    Each window's dump is written when it closes and read only once instrumentation is off again:
    read between the runs, the reading ran instrumented (and cache-simulated), 70 ms a dump, two
    thirds of a counted process's counting, and its file reads stood between the runs."""
    out_dir = out_dir_from_env()
    requests = ClientRequests()
    if out_dir is None or not requests.running_on_valgrind():
        raise RuntimeError(f"count: this worker does not run under Valgrind's {TOOL} (counted mode starts it so)")
    for _ in range(warmup):
        infer()
    for stale in _own_dumps(out_dir):  # an earlier count's in this process, left by its failure
        stale.unlink()
    requests.instrument(True)
    requests.request(ZERO_STATS)  # nothing instrumenting cost is in the first window

    def window(body: Callable[[], Any], label: str) -> None:
        requests.toggle_collect()
        body()
        requests.toggle_collect()
        requests.dump(label)

    window(lambda: None, "pytest-edge: switching only")
    for i in range(runs):
        window(infer, f"pytest-edge: run {i + 1}")
    requests.instrument(False)
    dumps = _own_dumps(out_dir)
    if len(dumps) != runs + 1:
        raise RuntimeError(f"count: {TOOL} wrote {len(dumps)} dumps into {out_dir}, not the {runs + 1} asked")
    overhead, *per_run = [_read_once(d) for d in dumps]
    events = {name for totals in per_run for name in totals}
    median = {name: max(0.0, float(np.median([t.get(name, 0) for t in per_run])) - overhead.get(name, 0))
              for name in events}
    instructions = [t.get("Ir", 0) - overhead.get("Ir", 0) for t in per_run]
    figure, cache = per_inference(median, 1)
    return CountedRuns(runs=runs, warmup_runs=warmup, instructions=figure, cache=cache,
                       run_spread=round(max(instructions) / min(instructions) - 1, 4) if min(instructions) > 0 else None,
                       run_instructions=instructions)


def _own_dumps(out_dir: Path) -> list[Path]:
    """This process's dumps in the order written (callgrind numbers them ``callgrind.<pid>.out.<n>``)."""
    dumps = [p for p in out_dir.glob(f"callgrind.{os.getpid()}.out.*") if p.name.rsplit(".", 1)[1].isdigit()]
    return sorted(dumps, key=lambda p: int(p.name.rsplit(".", 1)[1]))


def _read_once(dump: Path) -> dict[str, int]:
    totals = dump_totals(dump)
    dump.unlink()  # read once; the folder holds only what is still to read
    return totals
