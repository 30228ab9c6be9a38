"""The compile-time targets' figures in the reports (docs/npu.md): a compiler's placement, memory and
estimated NPU time per record (nothing executed: an estimate, never a measurement), the model x
accelerator target matrix a team chooses a chip by, and the terminal's note on them."""

from __future__ import annotations

from typing import Iterable

from ..core.record import COMPILE_ONLY, Record
from .table import DASH, figure, timing_policy, worst_per

# The compile-time targets' own columns (docs/npu.md): what the conformance table has none for.
COMPILED_HEADERS = ("model", "target", "compiler", "system config", "memory mode", "NPU ops", "CPU ops", "SRAM KiB",
                    "off-chip flash KiB", "DRAM KiB", "estimated NPU ms", "estimated cycles", "verdict")


def compiled_rows(records: Iterable[Record]) -> list[list[str]]:
    """One row per compile-time target's record: the compiler's placement, memory and estimate."""
    rows = []
    for record in records:
        npu = record.npu
        if timing_policy(record) is not COMPILE_ONLY or npu is None:
            continue
        coverage, settings = record.coverage, npu.settings or {}
        dram = npu.memories.get("dram")
        kib = [figure(npu.sram_kib, ".2f"), figure(npu.flash_kib, ".2f"),
               figure(dram / 1024 if isinstance(dram, (int, float)) else None, ".2f")]
        rows.append([record.model.name, record.backend, str(npu.compiler),
                     str(settings.get("system_config") or DASH), str(settings.get("memory_mode") or DASH),
                     figure(coverage.delegated_ops if coverage else None, "d"),
                     figure(coverage.fallback_ops if coverage else None, "d"), *kib,
                     figure(npu.estimated_ms, ".4g"), figure(npu.estimated_cycles, "d"), str(record.verdict)])
    return rows


def target_matrix(records: Iterable[Record]) -> tuple[list[str], list[str], dict[tuple[str, str], str]]:
    """Model x accelerator target (the records with a compiler's ``npu`` block): per cell the share of
    operators the accelerator runs, the SRAM the compiler planned and the verdict, the worst record
    where several tests check one pair. What a team chooses a chip by: one network fully on one NPU
    and half on the CPU on another. ``(models, targets, cells)``; no targets, no matrix."""
    chosen = [r for r in records if r.npu is not None]
    worst = worst_per(chosen, lambda r: (r.model.name, r.backend))
    cells = {}
    for (model, target), record in worst.items():
        coverage, npu = record.coverage, record.npu
        assert npu is not None  # chosen for it
        total, placed = (coverage.total_ops, coverage.delegated_ops) if coverage else (None, None)
        share = (f"{placed / total:.0%} on the NPU ({placed} of {total})"
                 if isinstance(total, int) and isinstance(placed, int) and total > 0 else "placement unknown")
        sram = npu.sram_bytes
        memory = f"SRAM {sram / 1024:.2f} KiB" if isinstance(sram, (int, float)) else "SRAM —"
        cells[(model, target)] = f"{share}, {memory}, {record.verdict}"
    return sorted({m for m, _ in cells}), sorted({t for _, t in cells}), cells


def compiled_lines(records: Iterable[Record]) -> list[str]:
    """The compile-time targets' figures (docs/npu.md), apart from the measured columns: nothing
    executed, and the time is the compiler's estimate."""
    compiled = [(r, r.npu) for r in records if timing_policy(r) is COMPILE_ONLY and r.npu is not None]
    if not compiled:
        return []
    lines = [f"note: {', '.join(sorted({r.backend for r, _ in compiled}))}: compile-time target(s): the compiler ran, "
             "nothing executed (no outputs compared, no latency measured); its figures, estimates for the time:"]
    for record, npu in compiled[:8]:
        clock = npu.clock_hz
        dram = npu.memories.get("dram")
        memory = f"SRAM {figure(npu.sram_kib, '.2f')} KiB, off-chip flash {figure(npu.flash_kib, '.2f')} KiB" + (
            f", DRAM {figure(dram / 1024, '.2f')} KiB" if isinstance(dram, (int, float)) and dram else "")
        cycles = npu.estimated_cycles
        estimate = ("no estimate" if npu.estimated_ms is None or cycles is None else
                    f"estimated NPU time {figure(npu.estimated_ms, '.4g')} ms ({cycles} cycles at "
                    f"{figure(clock and clock / 1e6, 'g')} MHz)")
        lines.append(f"  {record.model.name} on {record.backend} ({npu.compiler}, "
                     f"{(npu.settings or {}).get('system_config') or 'its delegate'}): {memory}, {estimate}")
    if len(compiled) > 8:
        lines.append(f"  ... and {len(compiled) - 8} more (the report's npu blocks)")
    return lines
