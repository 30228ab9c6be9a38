"""Escape bytes from a file's contents never reach the terminal (issue 42): text from an artifact, a
golden, a configuration, an accept file or a runtime's message is shown with its control and escape
characters written as Python escapes (``errors.visible``), in failure messages, skip reasons, the
terminal summary and the CLI's output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edge_helpers import FIXTURES

from pytest_edge.errors import EdgeUsageError, visible

ESC = "\x1b"
# A screen clear, a color, a window title (OSC ... BEL), a carriage return over the line, a C1 CSI,
# a right-to-left override and a zero-width space: each would act on a terminal or hide text.
PLANTED = "\x1b[2J\x1b[31mred\x1b]0;title\x07\rover\x9b1m\u202eevil\u200b"


def test_visible_escapes_controls_and_keeps_printable_text_of_any_script() -> None:
    shown = visible(PLANTED)
    assert shown == "\\x1b[2J\\x1b[31mred\\x1b]0;title\\x07\\x0dover\\x9b1m\\u202eevil\\u200b"
    assert visible("P50 → 1.5 µs, naïve 模型 🙂") == "P50 → 1.5 µs, naïve 模型 🙂"
    assert visible("a\nb\tc") == "a\\x0ab\\x09c" and visible("a\nb\tc", lines=True) == "a\nb\tc"
    assert visible("\ud800 \u2028") == "\\ud800 \\u2028"  # a lone surrogate (an undecodable byte), a line separator
    assert visible("x" * 100, most=10) == "x" * 10 + "… (90 more characters)"


def test_an_edge_error_shows_its_file_text_escaped() -> None:
    assert str(EdgeUsageError(f"m.json: it has name='{PLANTED}'\nsecond line")).count(ESC) == 0
    assert "\nsecond line" in str(EdgeUsageError(f"{PLANTED}\nsecond line"))


SESSION = f"""
import pytest

@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
def test_fails(edge_model):
    assert False, {PLANTED!r}

@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
def test_skips(edge_model):
    pytest.skip({PLANTED!r})

@pytest.mark.edge_llm(model="models/decoder", prompts=[[1, 2, 3]], new_tokens=3, backends=["onnxruntime-cpu"])
def test_bad_config(edge_llm):
    pass
"""


def test_planted_escapes_in_a_session_reach_the_terminal_escaped(pytester: pytest.Pytester) -> None:
    """A test's assertion message, a skip reason, and a genai_config.json field quoted in a
    configuration error: each is shown, none acts on the terminal (its raw ESC never printed)."""
    models = pytester.path / "models"
    models.mkdir()
    shutil.copy(FIXTURES / "tiny_mlp.onnx", models / "tiny_mlp.onnx")
    shutil.copytree(FIXTURES / "llm" / "genai_llama", models / "decoder")
    config = json.loads((models / "decoder" / "genai_config.json").read_text())
    config["model"]["decoder"]["num_hidden_layers"] = PLANTED
    (models / "decoder" / "genai_config.json").write_text(json.dumps(config))
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    pytester.makepyfile(test_planted=SESSION)
    result = pytester.runpytest_inprocess("--edge-update-golden", "-rA", "--junitxml=j.xml")
    result.assert_outcomes(failed=1, skipped=1, errors=1)
    text = "\n".join(result.outlines + result.errlines)
    assert ESC not in text and "\x07" not in text and "\u202e" not in text
    assert text.count("\\x1b[2J\\x1b[31mred") >= 3  # the failure, the skip and the configuration's field
    assert "num_hidden_layers='\\x1b[2J" in text
    assert ESC not in (pytester.path / "j.xml").read_text()


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_edge", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_cli_shows_a_goldens_metadata_and_an_accept_reason_escaped(tmp_path: Path) -> None:
    """`pytest-edge golden list` prints a golden's meta.json fields; `pytest-edge accept` echoes the
    reason it was given (kept as typed in the file, escaped on the screen)."""
    from pytest_edge.core.acceptance import read_acceptances

    (tmp_path / "pytest.ini").write_text("[pytest]\nedge_model_dirs = models\n")
    (tmp_path / "models").mkdir()
    shutil.copy(FIXTURES / "tiny_mlp.onnx", tmp_path / "models" / "tiny_mlp.onnx")
    shutil.copytree(FIXTURES.parent / "golden" / "tiny_mlp", tmp_path / "golden" / "tiny_mlp")
    meta_path = tmp_path / "golden" / "tiny_mlp" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["reference"]["backend"] = PLANTED
    meta_path.write_text(json.dumps(meta))
    listed = _cli(tmp_path, "golden", "list")
    assert listed.returncode == 0, listed.stderr
    assert "\\x1b[2J\\x1b[31mred" in listed.stdout and ESC not in listed.stdout + listed.stderr

    accepted = _cli(tmp_path, "accept", "tiny_mlp", "--reason", PLANTED)
    assert accepted.returncode == 0, accepted.stderr
    assert "\\x1b[2J\\x1b[31mred" in accepted.stdout and ESC not in accepted.stdout + accepted.stderr
    (acceptance,) = read_acceptances(tmp_path / "edge-accept.toml")
    assert acceptance.reason == PLANTED  # the file keeps what was typed
