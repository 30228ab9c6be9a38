"""The budgets judged on what a deployment is, before any timing: the share of the model's operators
the delegate took (and the partitions), the memory and time an NPU compiler planned, the tensor
arena a microcontroller runtime reported (the sizes of the model's files and the runtime's package:
``check_sizes``, beside the table in :mod:`pytest_edge.checks`). Pure functions: figures and budgets in, findings out; each is given the rows of the table
it judges (:mod:`pytest_edge.checks` calls them so)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Sequence

from ..backends import Coverage
from .rows import Budgets, Finding, Rows, found, one_row

if TYPE_CHECKING:  # an NPU compiler's and a microcontroller runtime's results: their kinds' modules
    from ..backends.arena import TensorArena
    from ..backends.compiled import Compilation


def _allowed(coverage: Coverage, allowed: Sequence[str]) -> tuple[Counter[str], set[str], list[str]]:
    """What of the CPU's operators ``allowed`` names, by type (``CALL_ONCE``: every one of it) or by
    the id the record gives one (``ASSIGN_VARIABLE Variable [init]``): (how many per type, the ids,
    the names that match nothing)."""
    wanted = {name.casefold(): name for name in allowed}

    def kind_of(op: str) -> str:
        return next((k for k in coverage.fallback_op_names if op == k or op.startswith(k + " ")), op)

    by_type = {kind for kind in coverage.fallback_op_names if kind.casefold() in wanted}
    kinds: Counter[str] = Counter({kind: coverage.fallback_op_names[kind] for kind in by_type})
    ids = {op for op in coverage.fallback_reasons if kind_of(op) in by_type}
    for op in coverage.fallback_reasons:
        if op.casefold() in wanted and kind_of(op) not in by_type:  # one named by its id
            ids.add(op)
            kinds[kind_of(op)] += 1
    matched = {kind.casefold() for kind in by_type} | {op.casefold() for op in ids}
    return kinds, ids, [name for key, name in wanted.items() if key not in matched]


def check_coverage(coverage: Coverage | None, budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """``max_fallback`` and ``max_partitions`` against the delegate coverage the backend read;
    ``allowed_cpu_ops`` names operators expected on the CPU (a streaming model's CALL_ONCE), left out
    of the fraction ``max_fallback`` judges and named as allowed."""
    max_fallback, max_partitions = budgets.get("max_fallback"), budgets.get("max_partitions")
    allowed_names: Sequence[str] = budgets.get("allowed_cpu_ops") or ()  # type: ignore[assignment]
    if max_fallback is None and max_partitions is None:
        return []
    if coverage is None:
        keyword = "max_fallback" if max_fallback is not None else "max_partitions"
        return [found(rows, keyword, None, budgets[keyword],  # type: ignore[arg-type]
                      f"{backend}: delegate coverage cannot be read on this backend, so max_fallback/"
                      "max_partitions cannot be checked")]
    if coverage.total_ops == 0:  # a fraction of nothing is no 0 %: the budget judged nothing
        keyword = "max_fallback" if max_fallback is not None else "max_partitions"
        return [found(rows, keyword, None, budgets[keyword],  # type: ignore[arg-type]
                      f"{backend}: the runtime counted no operators in this model, so {keyword} judged nothing "
                      "(a graph without operators, or one the runtime did not read)")]
    problems = []
    how = " (predicted)" if coverage.method == "predicted" else ""
    how += " (approximate)" if coverage.approximate else ""
    kinds, allowed, unmatched = _allowed(coverage, allowed_names) if allowed_names else (Counter(), set(), [])
    excused = sum(kinds.values())
    fallback_ops, total_ops = coverage.fallback_ops - excused, coverage.total_ops - excused
    fallback = fallback_ops / total_ops if total_ops > 0 else 0.0
    if max_fallback is not None and fallback > max_fallback + 1e-12:
        counts = {name: count - kinds[name] for name, count in coverage.fallback_op_names.items()}
        ops = ", ".join(f"{name} x{count}" for name, count in
                        sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if count > 0)
        # An NPU compiler's placement names each operator it left on the CPU, with its reason.
        reasons = "".join(f"; {op}: {reason or 'no reason given'}" for op, reason in coverage.fallback_reasons.items()
                          if op not in allowed) if coverage.method == "compiler" else ""
        where = "left on the CPU by the NPU compiler" if coverage.method == "compiler" else "on default CPU kernels"
        let = ""
        if allowed_names:
            let = (f"; allowed on the CPU (allowed_cpu_ops, not counted): "
                   f"{', '.join(f'{kind} x{count}' for kind, count in sorted(kinds.items())) or 'none'}"
                   + (f" (allowed_cpu_ops names {', '.join(unmatched)}, which no CPU operator is)" if unmatched else ""))
        problems.append(found(rows, "max_fallback", fallback, max_fallback,
            f"{backend}: fallback {fallback:.1%}{how} ({fallback_ops} of "
            f"{total_ops} operators {where}{' besides those allowed' if excused else ''}) > max_fallback "
            f"{max_fallback:.1%}; fell back: {ops or 'none named'}{reasons}{let}"))
    if max_partitions is not None and coverage.partitions > max_partitions:
        problems.append(found(rows, "max_partitions", coverage.partitions, max_partitions,
                              f"{backend}: {coverage.partitions} delegate partitions{how} > max_partitions "
                              f"{max_partitions}"))
    return problems


def check_compiled(compiled: Compilation | None, budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """``max_sram_kb``, ``max_flash_kb``, ``max_dram_kb`` and ``max_npu_estimated_ms`` against an NPU
    compiler's result (a compile-time target's); on any other backend such a budget is a finding:
    nothing compiled it."""
    figures = {"max_sram_kb": (compiled.sram_kib, "SRAM used") if compiled else None,
               "max_flash_kb": (compiled.flash_kib, "off-chip flash used") if compiled else None,
               "max_dram_kb": (compiled.dram_kib, "DRAM used") if compiled else None,
               "max_npu_estimated_ms": (compiled.estimated_ms, "estimated NPU inference time") if compiled else None}
    problems = []
    for keyword, figure in figures.items():
        budget = budgets.get(keyword)
        if budget is None:
            continue
        if figure is None:
            problems.append(found(rows, keyword, None, budget,
                                  f"{backend}: {keyword}={budget:g} judges an NPU compiler's figure, and {backend} "
                                  "is no compile-time target (docs/npu.md): name one in backends="))
            continue
        value, what = figure
        assert compiled is not None
        by = f" ({compiled.compiler}, {compiled.settings.get('system_config') or 'default system'}, " \
             f"{compiled.settings.get('memory_mode') or 'default memory mode'})"
        if value is None:
            problems.append(found(rows, keyword, None, budget, f"{backend}: {compiled.compiler} reported no {what} "
                                                               f"({keyword}={budget:g})"))
        elif keyword == "max_npu_estimated_ms" and value > budget:
            problems.append(found(rows, keyword, value, budget,
                                  f"{backend}: {what} {value:.4g} ms ({compiled.estimated_cycles} cycles at "
                                  f"{(compiled.clock_hz or 0) / 1e6:g} MHz, an estimate{by}) > {keyword} {budget:g} ms"))
        elif keyword != "max_npu_estimated_ms" and value > budget:
            exact = {"max_sram_kb": compiled.sram_bytes, "max_flash_kb": compiled.flash_bytes,
                     "max_dram_kb": compiled.memories.get("dram")}[keyword]
            problems.append(found(rows, keyword, value, budget,
                                  f"{backend}: {what} {value:.2f} KiB ({exact} bytes){by} > {keyword} {budget:g} KiB "
                                  f"({round(budget * 1024)} bytes)"))
    return problems


def check_arena(arena: TensorArena | None, budgets: Budgets, backend: str, *, rows: Rows) -> list[Finding]:
    """``max_arena_kb``, its one row, against the tensor arena a microcontroller runtime reported for
    the model (its total: the RAM the device must give it); on a backend that reports none, a
    finding: nothing planned an arena there."""
    keyword = one_row(rows)
    budget = budgets.get(keyword)
    if budget is None:
        return []
    if arena is None:
        return [found(rows, keyword, None, budget,
                      f"{backend}: {keyword}={budget:g} judges the tensor arena a microcontroller runtime "
                      f"reports, and {backend} reports none: name such a backend in backends= "
                      "(docs/backends-more-runtimes.md)")]
    if arena.total_kib > budget:
        return [found(rows, keyword, arena.total_kib, budget,
                      f"{backend}: tensor arena {arena.total_kib:.2f} KiB ({arena.total_bytes} bytes: head "
                      f"{arena.head_bytes}, tail {arena.tail_bytes}; {arena.reported_by}) > {keyword} "
                      f"{budget:g} KiB ({round(budget * 1024)} bytes)")]
    return []
