"""Reports: the JSON report (:mod:`.json_report`), the terminal table (:mod:`.table`), the HTML page
(:mod:`.html`, its charts in :mod:`.charts`) and the Markdown summary (:mod:`.markdown`); the
changes against a baseline they show (:mod:`.changes`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .json_report import (SCHEMA, Report, build_report, compare_reports, find_baseline, load_report, merge_reports,
                              read_report, write_report)
    from .table import format_table, gate_summary, matrix_lines, table_footer, table_rows

__all__ = ["SCHEMA", "Report", "build_report", "compare_reports", "find_baseline", "format_table", "gate_summary", "load_report",
           "matrix_lines", "merge_reports", "read_report", "table_footer", "table_rows",
           "write_report"]
_TABLE = ("format_table", "gate_summary", "matrix_lines", "table_footer", "table_rows")


def __getattr__(name: str) -> Any:
    # On first use: a session's summary table (.table) needs no report reader and no gate.
    if name in _TABLE:
        from . import table

        return getattr(table, name)
    if name in __all__:
        from . import json_report

        return getattr(json_report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
