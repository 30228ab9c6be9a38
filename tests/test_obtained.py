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
    result = pytester.runpytest_subprocess("--edge-update-golden")
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
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(failed=1)
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
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=1)
    with open(models / "tiny_mlp.tflite", "ab") as handle:
        handle.write(b"\0" * 8)  # the .tflite changed since its golden was recorded
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "golden", "list"], cwd=pytester.path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("tiny_mlp"))
    assert "onnxruntime-cpu" in row and "tiny_mlp.onnx: current" in row and "tiny_mlp.tflite: stale" in row
