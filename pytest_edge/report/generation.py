"""The generation figures of decoder LLM records (``@pytest.mark.edge_llm``), as the Markdown summary
and the HTML page show them: one row per measured test and backend beside the conformance table
(which has no column for them), the TTFT and TPOT distributions, memory against context, and the
decoder's quality figures for the accuracy table.

The one place the reports read a decoder's block of a record (``Record.generation``, the JSON
report's ``llm``): :func:`generation_of`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .. import codec
from ..checks import BUDGET, TPOT_BUDGET, TTFT_BUDGET
from ..core.generation_figures import GenerationFigures, TimingPercentiles
from ..core.record import GenerationRecord, Record
from ..judging.figures import GateFigures
from .table import figure

HEADERS = ["test", "model", "backend", "prompt tokens", "TTFT P50 ms", "TPOT P50 ms", "prefill tokens/s",
           "decode tokens/s", "load ms", "peak MB", "KV estimate MB", "longest stable context", "verdict"]
# The decoder's quality columns of the accuracy table: (header, the record's accuracy key, format)
QUALITY = (("token agreement", "token_agreement", ".3f"), ("top-1 agreement", "top1_agreement", ".3f"),
           ("KLD mean", "kld_mean", ".2e"))


def _block_key(keyword: str) -> str:
    """The llm block's key of the timed figure the budget ``keyword`` judges (where its row keeps it:
    ``llm``, the key, ``p50``)."""
    kept = BUDGET[keyword].kept
    assert kept is not None, keyword
    return kept.paths[0][1]


# The measured figures' fields of the TTFT and TPOT percentiles (the llm block's keys).
TTFT, TPOT = _block_key(TTFT_BUDGET), _block_key(TPOT_BUDGET)


def generation_of(record: Record) -> GenerationRecord | None:
    """The decoder's block of a record (configuration, prompts, measured figures, context sweep);
    None for a tensor model's record."""
    return record.generation


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any, fmt: str) -> str:
    """A figure, or a dash where the record holds none (or, from a hand-edited report, no finite number)."""
    return figure(value if _number(value) else None, fmt)


def _percentiles(figures: GenerationFigures, figure_name: str) -> TimingPercentiles | None:
    """``"ttft"`` or ``"tpot"``'s percentiles (the field its budget row names)."""
    return getattr(figures, {"ttft": TTFT, "tpot": TPOT}[figure_name])


def measured(record: Record) -> GenerationFigures | None:
    """The decoder's measured figures where it holds them (TTFT at least); None otherwise."""
    block = generation_of(record)
    if block is None or block.measured is None or _percentiles(block.measured, "ttft") is None:
        return None
    return block.measured


def _longest_stable(block: GenerationRecord) -> int | None:
    return block.context.longest_stable if block.context is not None else None


def generation_rows(records: Sequence[Record]) -> list[list[str]]:
    """Cells (text, not escaped) of each record whose decoder block holds measured figures."""
    rows = []
    for record in records:
        found = measured(record)
        if found is None or record.generation is None:
            continue
        ttft, tpot = _percentiles(found, "ttft"), _percentiles(found, "tpot")
        rows.append([record.test, record.model.name, record.backend,
                     _shown(found.prompt_tokens, ".0f"),
                     _shown(ttft.p50 if ttft else None, ".3f"), _shown(tpot.p50 if tpot else None, ".3f"),
                     _shown(found.prefill_tokens_per_s, ".0f"), _shown(found.decode_tokens_per_s, ".0f"),
                     _shown(found.load_ms, ".1f"), _shown(found.peak_memory_mb, ".1f"),
                     _shown(found.kv_cache_estimate_mb, ".4f"), _shown(_longest_stable(record.generation), ".0f"),
                     str(record.verdict)])
    return sorted(rows, key=lambda row: (row[1], row[2], row[0]))


@dataclass(frozen=True)
class Distribution:
    """One timed figure's distribution over the timed generations, in ms: its 0th..100th
    percentiles where the record keeps them (None in an older report) and its P50/P90."""

    quantiles: list[float] | None
    marks: dict[str, float]


def distribution(record: Record, figure_name: str) -> Distribution | None:
    """``"ttft"`` or ``"tpot"`` of a measured decoder record; None where it holds none."""
    found = measured(record)
    if found is None:
        return None
    stats = _percentiles(found, figure_name)
    marks = {k: float(v) for k, v in (("p50", stats.p50), ("p90", stats.p90)) if _number(v)} if stats else {}
    kept = getattr(found, f"{figure_name}_quantiles_ms")
    quantiles = list(kept) if kept and all(_number(v) for v in kept) else None
    return Distribution(quantiles, marks) if quantiles or marks else None


@dataclass(frozen=True)
class ContextPoint:
    tokens: int
    peak_memory_mb: float | None
    kv_cache_estimate_mb: float | None
    status: str


def context_points(record: Record) -> list[ContextPoint]:
    """The context sweep's lengths of a decoder record, shortest first, with the peak memory and the
    KV-cache estimate at each (None where not measured) and the length's status."""
    block = generation_of(record)
    sweep = block.context if block is not None else None
    found = [ContextPoint(point.tokens, point.peak_memory_mb if _number(point.peak_memory_mb) else None,
                          point.kv_cache_estimate_mb if _number(point.kv_cache_estimate_mb) else None, point.status)
             for point in (sweep.points if sweep is not None else ())]
    return sorted(found, key=lambda p: p.tokens)


def is_decoder(record: Record) -> bool:
    return generation_of(record) is not None


def quality_cells(record: Record) -> list[str]:
    """The decoder's quality figures of a record's accuracy (free-running token agreement,
    teacher-forced top-1 agreement and mean KL divergence), dashes where not measured."""
    return [_shown(getattr(record.accuracy, key, None), fmt) for _, key, fmt in QUALITY]


def decoder_gate_figures(record: Record, source: str = "") -> GateFigures | None:
    """A decoder record as the merge gate reads one (judging.regressions): its per-process TTFT and
    TPOT P50s, peak memory and artifact size, and whether an emulator's timing is not judged; None
    for a tensor model's record. Given to the gate's own parser as the JSON it reads, so a page
    judges a record exactly as the gate does."""
    block = generation_of(record)
    if block is None:
        return None
    processes = block.measured.processes if block.measured is not None else ()
    return GateFigures.from_json({"backend": record.backend, "model": record.model.to_json(),
                                  "processes": codec.to_json(processes), "peak_memory_mb": record.peak_memory_mb,
                                  "artifact_bytes": record.artifact_bytes,
                                  "timing_not_judged": block.timing_not_judged is not None}, source=source)


def median_ms(record: Record, figure_name: str) -> float | None:
    """``"ttft"`` or ``"tpot"`` P50 of a measured decoder record, in ms; None otherwise."""
    found = distribution(record, figure_name)
    return found.marks.get("p50") if found is not None else None


def generation_lines(records: Sequence[Record]) -> list[str]:
    """One terminal line per measured decoder record: the generation figures the table lacks."""
    lines = []
    for record in records:
        found = measured(record)
        if found is None or record.generation is None:
            continue
        ttft, tpot = _percentiles(found, "ttft"), _percentiles(found, "tpot")
        context = record.generation.context
        longest = f", longest stable context {_shown(context.longest_stable, 'd')}" if context is not None else ""
        decode = (f"{found.decode_tokens_per_s:.0f} ± {found.decode_tokens_per_s_sd or 0:.0f}"
                  if found.decode_tokens_per_s is not None else "—")
        # No TPOT sample (one new token) is a null P50: a dash, not a TypeError losing the summary.
        tpot_p50 = tpot.p50 if tpot is not None else None
        shown_tpot = f"{tpot_p50:.3f} ms" if _number(tpot_p50) else _shown(None, "")
        lines.append(f"{record.test}: TTFT P50 {ttft.p50:.3f} ms ({found.prompt_tokens} tokens), "  # type: ignore[union-attr]
                     f"TPOT P50 {shown_tpot}, decode {decode} tokens/s{longest}")
    return lines
