"""Small things a new user met in their first hour (issue 15): inspect of one artifact file, and
verdicts the terminal table never cuts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from edge_helpers import installed

from pytest_edge.core.record import Record
from pytest_edge.report import format_table, table_rows

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_inspect_of_a_file_inspects_that_artifact(tmp_path: Path) -> None:
    """`inspect models/kws.tflite` beside kws.onnx: the .tflite's backends, no "no .onnx" rows."""
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "inspect", str(FIXTURES / "tiny_cnn.tflite")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:]}
    # Every backend of the .tflite (TensorFlow Lite Micro's interpreter too, where it is installed).
    assert sorted(rows) == ["litert", "litert-ref", *(["tflite-micro"] if installed("tflite-micro") else [])], done.stdout
    assert "5/6 delegated" in rows["litert"] and "CUMSUM x1" in rows["litert"]
    assert "skipped" not in done.stdout


def test_verdicts_are_never_cut() -> None:
    long_model = "keyword_spotting_crnn_int8_per_channel_v3"
    records = []
    for backend in ("onnxruntime-cpu@raspberry-pi-5-lab-rack-3", "litert@raspberry-pi-5-lab-rack-3"):
        records.append({"test": f"t.py::t[{long_model}-{backend}]", "model": {"name": long_model},
                        "backend": backend, "verdict": "passed", "warnings": ["P50 +30% while busy"],
                        "coverage": {"fallback": 0.0, "partitions": 1}, "load_ms": 1234.5,
                        "latency_ms": {"p50": 1234.5678, "p99": 2345.6789}, "peak_memory_mb": 1024.5,
                        "accuracy": {"max_abs_err": 1e-6}})
    lines = format_table(table_rows([Record.from_json(r) for r in records]))
    assert all(line.rstrip().endswith("passed (gate inconclusive)") for line in lines[2:]), lines
    assert all("1234.568" in line and "2345.679" in line for line in lines[2:])
    assert any("…" in line for line in lines[2:])  # the names gave way instead


def test_inspect_of_a_file_no_selected_backend_reads_names_those_that_do(tmp_path: Path) -> None:
    """`inspect --backends litert m.pte`: no row to show, said with the backends that read a .pte
    (an empty table told nothing)."""
    import pytest

    from pytest_edge.cli.inspect import inspect_rows
    from pytest_edge.core.settings import Settings
    from pytest_edge.errors import EdgeUsageError

    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, backends=["litert"])
    with pytest.raises(EdgeUsageError, match=r"tiny_mlp_ethos_u55\.pte: --backends litert selects no backend that "
                                             r"reads a \.pte file; those that do: executorch, ethos-u55-128, "):
        inspect_rows(str(FIXTURES / "npu" / "tiny_mlp_ethos_u55.pte"), settings)
