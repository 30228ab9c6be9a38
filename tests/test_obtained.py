"""Obtained outputs beside the golden on a mismatch, and what golden diff makes of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_edge.golden import GoldenStore
from pytest_edge.golden.obtained import diff_lines


def test_mismatch_writes_obtained_outputs_and_diff_reads_them(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["onnxruntime-cpu", "litert"], atol=0, rtol=0)
        def test_exact(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, failed=1)  # the reference matches itself bit for bit; XNNPACK does not
    result.stdout.fnmatch_lines(["*litert: obtained outputs of case 0 written to .edge/obtained/tiny_cnn/"
                                 "litert-case_000.npz (compare: pytest-edge golden diff tiny_cnn)*"])
    obtained = pytester.path / ".edge/obtained/tiny_cnn"
    assert [p.name for p in obtained.iterdir()] == ["litert-case_000.npz"]
    lines = diff_lines(GoldenStore(pytester.path / "golden"), "tiny_cnn", obtained)
    assert lines[0].startswith("litert case 0 ") and "max |Δ|" in lines[0] and "cosine 1.0" in lines[0] and "SNR 1" in lines[0]
    assert len(lines) == 4 and lines[1].strip().startswith("at [0, ")
    assert diff_lines(GoldenStore(pytester.path / "golden"), "tiny_cnn", pytester.path / "nothing") == []


def test_golden_diff_command(pytester: pytest.Pytester, models: Path) -> None:
    import subprocess
    import sys

    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["litert"], atol=0, rtol=0)
        def test_exact(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(failed=1)
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "golden", "diff", "tiny_cnn"], cwd=pytester.path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("litert case 0 y: max |Δ|") and "    at [0, " in done.stdout
    # Plain numbers that tell the two values apart, not NumPy scalar reprs.
    worst = re.search(r"    at \[0, \d+\]: golden (\S+), litert (\S+)", done.stdout)
    assert worst and "np." not in done.stdout and float(worst[1]) != float(worst[2]), done.stdout
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "golden", "diff", "tiny_mlp"], cwd=pytester.path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no golden outputs for model 'tiny_mlp'" in done.stderr


def test_golden_list_shows_cases_and_staleness(pytester: pytest.Pytester, models: Path) -> None:
    import subprocess
    import sys

    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
        def test_mlp(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    with open(models / "tiny_mlp.tflite", "ab") as handle:
        handle.write(b"\0" * 8)  # the .tflite changed since its golden was recorded
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "golden", "list"], cwd=pytester.path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("tiny_mlp"))
    assert "onnxruntime-cpu" in row and "tiny_mlp.onnx: current" in row and "tiny_mlp.tflite: stale" in row


def test_a_failing_decoder_saves_its_tokens_and_golden_diff_shows_where_they_part(pytester: pytest.Pytester) -> None:
    """edge_llm on the tiny decoder (fixtures/llm, ONNX Runtime): goldens recorded, then one prompt's
    golden edited at new token 5 (as a golden from another export would differ). The check fails that
    prompt, and the teacher-forced top-1 budget over both, and saves what the backend generated in the
    golden's format (both prompts': the budget is over both); ``pytest-edge golden diff`` shows, per
    prompt, the token agreement and the first differing position with both tokens, the first step's
    logits, and the teacher-forced top-1 over the golden's tokens."""
    import json
    import shutil
    import subprocess
    import sys

    from pytest_edge.golden.tokens import TokenGolden, golden_path, read_golden, write_golden
    from pytest_edge.golden.obtained import token_diff_lines

    llm = Path(__file__).resolve().parent.parent / "fixtures" / "llm"
    (pytester.path / "models").mkdir()
    for name in ("tiny_llm.onnx", "tiny_llm.json"):
        shutil.copy(llm / name, pytester.path / "models" / name)
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3, 4, 5], [7, 8]], new_tokens=8,
                              backends=["onnxruntime-cpu"], min_top1_agreement=1)
        def test_generate(edge_llm):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    path = golden_path(pytester.path / "golden", "tiny_llm", [7, 8])
    recorded = read_golden(path, [7, 8])
    edited = list(recorded.tokens)
    edited[5] = (edited[5] + 1) % 64
    write_golden(path, TokenGolden(recorded.prompt, edited, recorded.first_logits, recorded.meta,
                                   recorded.distributions))

    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(failed=1)
    obtained = pytester.path / ".edge/obtained/tiny_llm/llm"
    saved = f"onnxruntime-cpu-{path.name}"
    passed = f"onnxruntime-cpu-{golden_path(pytester.path, 'x', [1, 2, 3, 4, 5]).name}"
    assert sorted(p.name for p in obtained.iterdir()) == sorted([saved, passed])
    result.stdout.fnmatch_lines([f"*onnxruntime-cpu: prompt [[]7, 8[]]: token agreement 0.875 < 1: first difference at "
                                 f"new token 5 *; obtained tokens written to .edge/obtained/tiny_llm/llm/{saved} "
                                 "(compare: pytest-edge golden diff tiny_llm)",
                                 "*onnxruntime-cpu: teacher-forced top-1 agreement * is under the budget "
                                 "min_top1_agreement=1*; obtained tokens of every prompt written to "
                                 ".edge/obtained/tiny_llm/llm (compare: pytest-edge golden diff tiny_llm)"])
    assert "2 check(s) failed" in result.stdout.str()  # the obtained files are notes, not checks
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    assert [f["message"] for f in record["budget_findings"]] == record["violations"][1:]  # the finding, note and all
    generated = record["llm"]["prompts"][1]["tokens"]
    assert generated[5] == recorded.tokens[5] != edited[5]

    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "golden", "diff", "tiny_llm"], cwd=pytester.path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("onnxruntime-cpu prompt [1, 2, 3, 4, 5]: "))
    assert lines[first].endswith("token agreement 1.000 (8 of 8 new tokens)")  # no difference to name
    assert "top-1 agreement 1.000 (8 of 8)" in lines[first + 4] and "difference" not in lines[first + 4]
    del lines[first:first + 5]
    assert lines[0] == (f"onnxruntime-cpu prompt [7, 8]: token agreement 0.875 (7 of 8 new tokens), first difference "
                        f"at new token 5: golden {edited[5]}, onnxruntime-cpu {generated[5]}"), done.stdout
    assert lines[1] == f"    golden          {edited}" and lines[2] == f"    onnxruntime-cpu {generated}"
    assert lines[3].startswith("    first-step logits: max |Δ| 0, cosine 1.000000, top token golden ")
    # Fed the golden's tokens, the backend's top token parts from the edited one at 5 too.
    assert lines[4].startswith("    teacher-forced over the golden's tokens: top-1 agreement ") and \
        f"first difference at new token 5: golden {edited[5]}, onnxruntime-cpu's top {generated[5]}" in lines[4]
    assert lines[5].startswith(f"    at new token 5, golden's most likely: {generated[5]} (p ")
    path.unlink()  # a golden gone since: the obtained file is named stale
    stale = token_diff_lines(GoldenStore(pytester.path / "golden"), "tiny_llm", obtained)
    assert [line for line in stale if "no golden" in line and "stale file" in line] == \
        [f"onnxruntime-cpu prompt [7, 8]: no golden {path} for that prompt now; stale file {obtained / saved}"]
