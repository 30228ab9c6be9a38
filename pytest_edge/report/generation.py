"""The generation figures of decoder LLM records (``@pytest.mark.edge_llm``), as the Markdown summary
and the HTML page show them: one row per measured test and backend beside the conformance table
(which has no column for them), the TTFT and TPOT distributions, memory against context, and the
decoder's quality figures for the accuracy table.

The one place the reports read a decoder's block of a record (``record["llm"]`` in the JSON report
today): :func:`generation_of`. Every other reader here goes through it, so moving the block (to a
typed ``Record.generation``) changes this function only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..checks import BUDGET, TPOT_BUDGET, TTFT_BUDGET
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


# The TTFT and TPOT percentiles ({"p50": ...}) in the llm block.
TTFT, TPOT = _block_key(TTFT_BUDGET), _block_key(TPOT_BUDGET)


def generation_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The decoder's block of a record (configuration, prompts, measured figures, context sweep);
    None for a tensor model's record or one whose block is not a mapping."""
    block = record.get("llm")
    return block if isinstance(block, Mapping) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any, fmt: str) -> str:
    """A figure, or a dash where the record holds none (or, from a hand-edited report, no number)."""
    return figure(value if _number(value) else None, fmt)


def measured(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The decoder's block where it holds measured figures (TTFT at least); None otherwise."""
    llm = generation_of(record)
    if not llm or not isinstance(llm.get(TTFT), Mapping) or not isinstance(llm.get(TPOT), (Mapping, type(None))):
        return None
    return llm


def generation_rows(records: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Cells (text, not escaped) of each record whose decoder block holds measured figures."""
    rows = []
    for record in records:
        llm = measured(record)
        if llm is None:
            continue
        context = llm.get("context") if isinstance(llm.get("context"), Mapping) else {}
        rows.append([str(record.get("test", "")), str(record["model"]["name"]), str(record["backend"]),
                     _shown(llm.get("prompt_tokens"), ".0f"),
                     _shown(llm[TTFT].get("p50"), ".3f"),
                     _shown((llm.get(TPOT) or {}).get("p50"), ".3f"),
                     _shown(llm.get("prefill_tokens_per_s"), ".0f"), _shown(llm.get("decode_tokens_per_s"), ".0f"),
                     _shown(llm.get("load_ms"), ".1f"), _shown(llm.get("peak_memory_mb"), ".1f"),
                     _shown(llm.get("kv_cache_estimate_mb"), ".4f"), _shown(context.get("longest_stable"), ".0f"),
                     str(record["verdict"])])
    return sorted(rows, key=lambda row: (row[1], row[2], row[0]))


@dataclass(frozen=True)
class Distribution:
    """One timed figure's distribution over the timed generations, in ms: its 0th..100th
    percentiles where the record keeps them (None in an older report) and its P50/P90."""

    quantiles: list[float] | None
    marks: dict[str, float]


def distribution(record: Mapping[str, Any], figure_name: str) -> Distribution | None:
    """``"ttft"`` or ``"tpot"`` of a measured decoder record; None where it holds none."""
    llm = measured(record)
    if llm is None:
        return None
    stats = llm.get(f"{figure_name}_ms") if isinstance(llm.get(f"{figure_name}_ms"), Mapping) else {}
    marks = {k: float(v) for k, v in stats.items() if k in ("p50", "p90", "p99") and _number(v)}
    quantiles = llm.get(f"{figure_name}_quantiles_ms")
    if not (isinstance(quantiles, list) and quantiles and all(_number(v) for v in quantiles)):
        quantiles = None
    return Distribution(quantiles, marks) if quantiles or marks else None


@dataclass(frozen=True)
class ContextPoint:
    tokens: int
    peak_memory_mb: float | None
    kv_cache_estimate_mb: float | None
    status: str


def context_points(record: Mapping[str, Any]) -> list[ContextPoint]:
    """The context sweep's lengths of a decoder record, shortest first, with the peak memory and the
    KV-cache estimate at each (None where not measured) and the length's status."""
    llm = generation_of(record) or {}
    sweep = llm.get("context") if isinstance(llm.get("context"), Mapping) else {}
    points = sweep.get("points") if isinstance(sweep.get("points"), list) else []
    found = []
    for point in points:
        if isinstance(point, Mapping) and _number(point.get("tokens")):
            found.append(ContextPoint(int(point["tokens"]),
                                      point["peak_memory_mb"] if _number(point.get("peak_memory_mb")) else None,
                                      point["kv_cache_estimate_mb"] if _number(point.get("kv_cache_estimate_mb"))
                                      else None, str(point.get("status", ""))))
    return sorted(found, key=lambda p: p.tokens)


def is_decoder(record: Mapping[str, Any]) -> bool:
    return generation_of(record) is not None


def quality_cells(record: Mapping[str, Any]) -> list[str]:
    """The decoder's quality figures of a record's accuracy (free-running token agreement,
    teacher-forced top-1 agreement and mean KL divergence), dashes where not measured."""
    accuracy = record.get("accuracy") if isinstance(record.get("accuracy"), Mapping) else {}
    return [_shown(accuracy.get(key), fmt) for _, key, fmt in QUALITY]


def gate_view(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """A decoder record as the merge gate reads one (judging.regressions): its per-process TTFT
    and TPOT P50s (``processes``), peak memory and artifact size; None for a tensor model's record."""
    llm = generation_of(record)
    if llm is None:
        return None
    return {"test": record.get("test"), "backend": record.get("backend"), "model": record.get("model"),
            "processes": llm.get("processes") if isinstance(llm.get("processes"), list) else [],
            "peak_memory_mb": record.get("peak_memory_mb"), "artifact_bytes": record.get("artifact_bytes"),
            **({"timing_not_judged": llm["timing_not_judged"]} if llm.get("timing_not_judged") else {})}


def median_ms(record: Mapping[str, Any], figure_name: str) -> float | None:
    """``"ttft"`` or ``"tpot"`` P50 of a measured decoder record, in ms; None otherwise."""
    found = distribution(record, figure_name)
    return found.marks.get("p50") if found is not None else None


def generation_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One terminal line per measured decoder record: the generation figures the table lacks."""
    lines = []
    for record in records:
        llm = generation_of(record) or {}
        if not llm.get(TTFT):
            continue
        context = llm.get("context") or {}
        longest = f", longest stable context {_shown(context.get('longest_stable'), 'd')}" if context else ""
        decode = (f"{llm['decode_tokens_per_s']:.0f} ± {llm.get('decode_tokens_per_s_sd') or 0:.0f}"
                  if llm.get("decode_tokens_per_s") is not None else "—")
        # No TPOT sample (one new token) is a null P50: a dash, not a TypeError losing the summary.
        tpot = (llm.get(TPOT) or {}).get("p50")
        tpot = f"{tpot:.3f} ms" if _number(tpot) else _shown(None, "")
        lines.append(f"{record['test']}: TTFT P50 {llm[TTFT]['p50']:.3f} ms ({llm['prompt_tokens']} tokens), "
                     f"TPOT P50 {tpot}, decode {decode} tokens/s{longest}")
    return lines
