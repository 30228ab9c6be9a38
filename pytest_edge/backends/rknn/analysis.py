"""rknn-toolkit2's per-layer accuracy analysis (``RKNN.accuracy_analysis``), read from the file the
toolkit writes (``error_analysis.txt``): for each layer of the built graph, the cosine and Euclidean
distance between the float model and the quantized simulator, accumulated from the input
(``entire``) and of the layer alone on the float model's inputs (``single``). Plain text parsing,
no toolkit import: tests/test_rknn_analysis.py reads real and damaged files without the toolkit.

A line the toolkit writes without figures is a layer fused into the next one (a Conv whose Relu
carries the figures); any other line that is not a layer with four figures makes the file garbled,
an error naming the file and the line, never a layer silently dropped."""

from __future__ import annotations

import re
from pathlib import Path

from ..intermediates import LayerRow

ANALYSIS_FILE = "error_analysis.txt"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the toolkit colours a poor figure
_LAYER = re.compile(r"^\[(?P<op>[^\]]+)\]\s+(?P<name>\S+)\s*(?P<figures>.*)$")
_NUMBER = r"(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
_FIGURES = re.compile(rf"^{_NUMBER}\s*\|\s*{_NUMBER}\s+{_NUMBER}\s*\|\s*{_NUMBER}$", re.IGNORECASE)


class AnalysisUnreadable(ValueError):
    """The toolkit's analysis file is missing, empty or not in the layout it writes."""


# One layer of the toolkit's analysis: the per-layer row every "layers" backend reports (the
# Intermediates' LayerAnalysis.layers).
AnalysisRow = LayerRow


def parse_analysis(text: str, path: Path | str) -> list[AnalysisRow]:
    """Every layer of ``text`` (the content of ``path``, named in errors), in the toolkit's order."""
    rows: list[AnalysisRow] = []
    table = False
    for number, raw in enumerate(_ANSI.sub("", text).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("---"):
            table = True  # the header's rule: layers follow
            continue
        if not table:
            continue  # the header's column names
        layer = _LAYER.match(line)
        if layer is None:
            raise AnalysisUnreadable(f"{path}: line {number} is not a layer of the toolkit's table: {line[:120]!r}")
        figures = layer["figures"].strip()
        if not figures:
            rows.append(AnalysisRow(layer["name"], layer["op"], None, None, None, None))
            continue
        found = _FIGURES.match(figures)
        if found is None:
            raise AnalysisUnreadable(f"{path}: line {number}, layer {layer['name']!r}: figures {figures[:80]!r} are not "
                                     "'cos | euc  cos | euc'")
        entire_cos, entire_euc, cos, euc = (float(value) for value in found.groups())
        rows.append(AnalysisRow(layer["name"], layer["op"], cos, euc, entire_cos, entire_euc))
    if not table:
        raise AnalysisUnreadable(f"{path}: no layer table (no '---' rule under the column names)")
    if not any(row.cosine is not None for row in rows):
        raise AnalysisUnreadable(f"{path}: the layer table has no layer with figures")
    return rows


def read_analysis(folder: Path) -> list[AnalysisRow]:
    """The analysis the toolkit wrote into ``folder``; AnalysisUnreadable naming the file if it is
    missing or garbled."""
    path = folder / ANALYSIS_FILE
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise AnalysisUnreadable(f"{path}: the toolkit wrote no analysis file ({exc.strerror or exc})") from None
    if not text.strip():
        raise AnalysisUnreadable(f"{path}: the toolkit's analysis file is empty")
    return parse_analysis(text, path)
