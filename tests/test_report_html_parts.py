"""report/html_parts.py: what the HTML page's sections share: the stylesheet (inline, nothing from
the network), a table's opening (headers escaped, the title trusted) and a model section's id."""

from __future__ import annotations

import re

from pytest_edge.report.html_parts import CSS, anchor, table_open


def test_the_stylesheet_loads_nothing_from_the_network() -> None:
    assert "url(" not in CSS and "@import" not in CSS and "//" not in CSS


def test_table_open_escapes_headers_and_keeps_the_trusted_title() -> None:
    opened = table_open("Figures <small>(P50)</small>", ["backend", "max |Δ|", "<script>x</script>"])
    assert opened == ("<h3>Figures <small>(P50)</small></h3><table><tr><th>backend</th><th>max |Δ|</th>"
                      "<th>&lt;script&gt;x&lt;/script&gt;</th></tr>")


def test_anchor_is_an_id_of_letters_digits_dashes_and_underscores() -> None:
    assert anchor("vision/mobilenet-v2_int8") == "model-vision_mobilenet-v2_int8"
    hostile = anchor('"><script>alert(1)</script>')
    assert hostile == "model-___script_alert_1___script_"
    assert re.fullmatch(r"[\w-]+", hostile)
    assert anchor("модель") == "model-модель"  # letters of any script are kept
