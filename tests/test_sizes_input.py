"""Sizes that cannot be read as usual (pytest_edge/core/sizes.py): an artifact removed or replaced while
its test measured, an ONNX model whose external data went missing (the record gets ``null`` with the
reason and a size budget says why it could not be judged, instead of the check ending in a
FileNotFoundError), and a runtime installed under another distribution name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from edge_helpers import FIXTURES

from pytest_edge.checks import check_sizes
from pytest_edge import codec
from pytest_edge.core.sizes import RuntimePackage, artifact_size, runtime_package


def test_an_artifact_removed_after_loading_has_no_size_and_says_why(tmp_path: Path) -> None:
    model = tmp_path / "tiny_mlp.onnx"
    shutil.copy(FIXTURES / "tiny_mlp.onnx", model)
    assert artifact_size(model, "onnxruntime-cpu") == (model.stat().st_size, None)
    model.unlink()
    size, reason = artifact_size(model, "onnxruntime-cpu")
    assert size is None
    assert reason == f"its size could not be read after it was loaded (No such file or directory: {model})"
    budget = check_sizes("models/tiny_mlp.onnx", size, "onnxruntime 1.0", 10, {"max_artifact_mb": 1.0},
                         "onnxruntime-cpu", None, reason)
    assert [f.message for f in budget] == [f"onnxruntime-cpu: artifact models/tiny_mlp.onnx: {reason} (max_artifact_mb=1)"]


def test_external_data_removed_after_loading_names_the_missing_file(tmp_path: Path) -> None:
    for name in ("tiny_ext.onnx", "tiny_ext.onnx.data"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    whole = sum((tmp_path / n).stat().st_size for n in ("tiny_ext.onnx", "tiny_ext.onnx.data"))
    assert artifact_size(tmp_path / "tiny_ext.onnx", "onnxruntime-cpu") == (whole, None)
    (tmp_path / "tiny_ext.onnx.data").unlink()
    size, reason = artifact_size(tmp_path / "tiny_ext.onnx", "onnxruntime-cpu")
    assert size is None and "onnxruntime-cpu" in reason
    assert f"external data file {tmp_path / 'tiny_ext.onnx.data'}, which is missing" in reason


def _install(site: Path, distribution: str, module: str) -> int:
    """A distribution as pip leaves it in site-packages (dist-info with METADATA and RECORD) that
    provides ``module``: a Python file and a native library. Its summed size."""
    package = site / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VERSION = '1.0'\n")
    (package / "_runtime.so").write_bytes(b"\x7fELF" + bytes(4092))
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"{module}/__init__.py,,\n{module}/_runtime.so,,\n{info.name}/METADATA,,\n"
                                 f"{info.name}/RECORD,,\n")
    return sum(p.stat().st_size for p in [*package.iterdir(), info / "METADATA", info / "RECORD"])


def test_a_runtime_installed_under_another_distribution_name_is_summed_and_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``onnxruntime-gpu`` provides the ``onnxruntime`` module: its size is the runtime's, said as
    such; a runtime module no distribution provides is null with the reason, never an exception."""
    total = _install(tmp_path, "probe-rt-gpu", "probe_rt")
    monkeypatch.syspath_prepend(str(tmp_path))
    package = runtime_package("probe-rt", "probe_rt")
    assert package == RuntimePackage(total, 4, 4096, distribution="probe-rt-gpu")
    assert codec.to_json(package) == {"bytes": total, "files": 4, "native_bytes": 4096, "distribution": "probe-rt-gpu"}
    missing = runtime_package("probe-rt-absent", "probe_rt_absent")
    assert codec.to_json(missing) == {"bytes": None,
                                      "reason": "probe-rt-absent is not installed as a Python distribution here"}
