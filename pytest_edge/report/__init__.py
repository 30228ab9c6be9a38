"""Reports: the JSON report (:mod:`.json_report`), the terminal table (:mod:`.table`), the HTML page
(:mod:`.html`, its charts in :mod:`.charts`) and the Markdown summary (:mod:`.markdown`); the
changes against a baseline they show (:mod:`.changes`)."""

from .json_report import SCHEMA, build_report, compare_reports, find_baseline, load_report, merge_reports, write_report
from .table import format_table, gate_summary, matrix_lines, table_footer, table_rows

__all__ = ["SCHEMA", "build_report", "compare_reports", "find_baseline", "format_table", "gate_summary", "load_report",
           "matrix_lines", "merge_reports", "table_footer", "table_rows", "write_report"]
