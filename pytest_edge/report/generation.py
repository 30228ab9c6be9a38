"""The generation figures of decoder LLM records (``@pytest.mark.edge_llm``), one row per measured
test and backend, as the Markdown summary and the HTML page show them beside the conformance
table (which has no column for them)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .table import figure

HEADERS = ["model", "backend", "prompt tokens", "TTFT P50 ms", "TPOT P50 ms", "prefill tokens/s",
           "decode tokens/s", "load ms", "peak MB", "KV estimate MB", "longest stable context", "verdict"]


def _shown(value: Any, fmt: str) -> str:
    """A figure, or a dash where the record holds none (or, from a hand-edited report, no number)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return figure(value if number else None, fmt)


def generation_rows(records: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Cells (text, not escaped) of each record whose ``llm`` block holds measured figures."""
    rows = []
    for record in records:
        llm = record.get("llm") if isinstance(record.get("llm"), Mapping) else None
        if not llm or not isinstance(llm.get("ttft_ms"), Mapping):
            continue
        context = llm.get("context") if isinstance(llm.get("context"), Mapping) else {}
        if not isinstance(llm.get("tpot_ms"), (Mapping, type(None))):
            continue
        rows.append([str(record["model"]["name"]), str(record["backend"]), _shown(llm.get("prompt_tokens"), ".0f"),
                     _shown(llm["ttft_ms"].get("p50"), ".3f"),
                     _shown((llm.get("tpot_ms") or {}).get("p50"), ".3f"),
                     _shown(llm.get("prefill_tokens_per_s"), ".0f"), _shown(llm.get("decode_tokens_per_s"), ".0f"),
                     _shown(llm.get("load_ms"), ".1f"), _shown(llm.get("peak_memory_mb"), ".1f"),
                     _shown(llm.get("kv_cache_estimate_mb"), ".4f"), _shown(context.get("longest_stable"), ".0f"),
                     str(record["verdict"])])
    return sorted(rows)


def generation_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One terminal line per measured decoder record: the generation figures the table lacks."""
    lines = []
    for record in records:
        llm = record.get("llm") or {}
        if not llm.get("ttft_ms"):
            continue
        context = llm.get("context") or {}
        longest = f", longest stable context {context.get('longest_stable')}" if context else ""
        decode = (f"{llm['decode_tokens_per_s']:.0f} ± {llm.get('decode_tokens_per_s_sd') or 0:.0f}"
                  if llm.get("decode_tokens_per_s") is not None else "—")
        lines.append(f"{record['test']}: TTFT P50 {llm['ttft_ms']['p50']:.3f} ms ({llm['prompt_tokens']} tokens), "
                     f"TPOT P50 {llm['tpot_ms']['p50']:.3f} ms, decode {decode} tokens/s{longest}")
    return lines
