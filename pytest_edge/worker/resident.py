"""A forked child's memory baseline (worker/zygote.py): fork() does not copy the page-table
entries of file-backed pages, so the child maps the runtime's resident code and read-only data
again and its resident set starts where a spawned worker's does after the same import."""

from __future__ import annotations

import os

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MADV_POPULATE_READ = 22  # Linux 5.14


def resident_file_pages() -> list[tuple[int, int]]:
    """(address, length) runs of this process's file-backed pages that are resident (mapped in its
    page tables). fork() does not copy those page-table entries (the child faults them in again
    from the page cache), so a forked child's resident set starts smaller than its parent's by
    the runtime's code and read-only data: the child maps them again (:func:`populate`) so that
    its memory baseline is what a spawned worker's is after the same import."""
    import numpy as np

    runs: list[tuple[int, int]] = []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
            for line in maps:
                fields = line.split()
                if len(fields) < 6 or int(fields[4]) == 0 or "r" not in fields[1] or fields[5].startswith("["):
                    continue  # anonymous (copied by fork), unreadable or special
                start, end = (int(v, 16) for v in fields[0].split("-"))
                pagemap.seek(start // PAGE * 8)
                entries = np.frombuffer(pagemap.read((end - start) // PAGE * 8), dtype=np.uint64)
                present = np.concatenate(([0], (entries >> np.uint64(63)).astype(np.int8), [0]))
                edges = np.flatnonzero(np.diff(present))
                runs += [(start + int(a) * PAGE, int(b - a) * PAGE) for a, b in zip(edges[::2], edges[1::2])]
    except (OSError, ValueError):
        return []
    return runs


def populate(runs: list[tuple[int, int]]) -> None:
    """Map these pages into this process's page tables again (MADV_POPULATE_READ: no copy, no
    write; where the kernel lacks it the resident set just starts smaller)."""
    import ctypes

    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for address, length in runs:
        madvise(address, length, MADV_POPULATE_READ)
