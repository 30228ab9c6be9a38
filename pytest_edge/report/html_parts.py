"""What the sections of the HTML page share: its stylesheet (inline: the page loads nothing from the
network), a table's opening and the id of a model's section."""

from __future__ import annotations

from typing import Sequence

from .charts import escape

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:16px 24px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:16px 0 6px}small,.muted{color:#57606a}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.chips span{display:inline-block;padding:3px 10px;margin:0 6px 6px 0;border-radius:12px;font-weight:600}
.passed{background:#dafbe1;color:#116329}.failed,.error{background:#ffebe9;color:#a40e26}
.skipped{background:#eaeef2;color:#57606a}.inconclusive{background:#fff8c5;color:#7d4e00}
td.bad{background:#ffebe9;color:#a40e26;font-weight:600}td.good{color:#116329}
.changed{background:#fff8c5;color:#7d4e00}td.changed{font-style:italic}
.convert{background:#eaeef2;color:#57606a}
.row{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
.card{border:1px solid #d0d7de;border-radius:6px;padding:8px 10px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#1b1f24}
svg .tick{fill:#57606a}svg .axis{fill:#57606a;font-size:11px}svg .val{fill:#1b1f24;font-size:10px}
svg .plot{fill:#fbfcfd;stroke:#d0d7de}svg .grid{stroke:#eaeef2}svg .guide{stroke:#afb8c1;stroke-dasharray:2 3}
ul.fail li{margin-bottom:4px}code{font-size:12px;background:#f6f8fa;padding:0 3px;border-radius:3px}
"""


def table_open(title_html: str, headers: Sequence[str]) -> str:
    """A section title (trusted HTML) and the opening of its table with escaped column headers."""
    return f"<h3>{title_html}</h3><table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr>"


def anchor(model: str) -> str:
    """The id of a model's section: its name, every character but letters, digits, '-' and '_' as '_'."""
    return "model-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in model)
