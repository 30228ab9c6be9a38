"""pytest_edge.installed: a distribution's version and RECORD from its .dist-info folder, as
importlib.metadata reads them, and importlib.metadata's answer where there is no such folder."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

from pytest_edge import installed
from pytest_edge.core.sizes import runtime_package


@pytest.mark.parametrize("distribution", ["numpy", "onnxruntime", "pytest", "ai-edge-litert", "PyYAML", "typing_extensions"])
def test_as_importlib_metadata_reads_an_installed_distribution(distribution: str) -> None:
    expected = importlib.metadata.distribution(distribution)
    assert installed.version(distribution) == expected.version
    root, entries = installed.recorded_files(distribution)
    assert Path(root) == Path(expected.locate_file(""))
    assert entries == [str(entry) for entry in expected.files]


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    return site


def test_a_folder_first_on_sys_path_wins_and_names_compare_normalized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path, monkeypatch)
    info = site / "My_Runtime-2.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-runtime\nVersion: 2.1.post3\n\nVersion: 9\n")
    (info / "RECORD").write_text('my_runtime/__init__.py,sha256=x,10\n"my_runtime/a,b.so",,\nMy_Runtime-2.1.dist-info/RECORD,,\n')
    (site / "my_runtime").mkdir()
    (site / "my_runtime" / "__init__.py").write_bytes(b"x" * 10)
    (site / "my_runtime" / "a,b.so").write_bytes(b"y" * 7)
    later = tmp_path / "later"
    (later / "my_runtime-9.9.dist-info").mkdir(parents=True)
    (later / "my_runtime-9.9.dist-info" / "METADATA").write_text("Name: my-runtime\nVersion: 9.9\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])  # after the first: not the one found
    assert installed.version("my.runtime") == "2.1.post3"  # the header, not the body nor the folder's name
    assert installed.recorded_files("MY-RUNTIME") == (str(site), ["my_runtime/__init__.py", "my_runtime/a,b.so",
                                                                  "My_Runtime-2.1.dist-info/RECORD"])
    runtime_package.cache_clear()
    package = runtime_package("my-runtime")
    assert (package.bytes, package.native_bytes) == (10 + 7 + os.path.getsize(info / "RECORD"), 7)


def test_a_folder_without_record_or_version_falls_back_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path, monkeypatch)
    (site / "bare_runtime-1.0.dist-info").mkdir()
    (site / "bare_runtime-1.0.dist-info" / "METADATA").write_text("Name: bare-runtime\n")
    # importlib.metadata finds the same folder and reads no version and no files from it
    assert installed.version("bare-runtime") is None
    assert installed.recorded_files("bare-runtime") is None
    runtime_package.cache_clear()
    assert "without a file list" in runtime_package("bare-runtime").reason


def test_not_installed(tmp_path: Path) -> None:
    assert installed.version("no-such-runtime-here") is None
    with pytest.raises(installed.NotInstalled):
        installed.recorded_files("no-such-runtime-here")
    assert installed.dist_info("no-such-runtime-here") is None


def test_installed_is_seen_at_once_and_an_egg_info_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path, monkeypatch)
    assert not installed.is_installed("onnxruntime-gpu-lookalike")
    before = site.stat().st_mtime_ns
    (site / "onnxruntime_gpu_lookalike-1.0.dist-info").mkdir()
    # An install changes the folder's mtime, which keys its listing (as importlib.metadata's is keyed).
    # A kernel with a coarse directory clock may not have moved it within microseconds: moved here.
    os.utime(site, ns=(before, before + 10**9))
    assert installed.is_installed("onnxruntime-gpu-lookalike")
    (site / "legacy_thing-0.1-py3.11.egg-info").mkdir()
    (site / "legacy_thing-0.1-py3.11.egg-info" / "PKG-INFO").write_text("Name: legacy-thing\nVersion: 0.1\n")
    os.utime(site, ns=(before, before + 2 * 10**9))
    assert installed.is_installed("Legacy.Thing") and installed.dist_info("legacy-thing") is None
    assert installed.version("legacy-thing") == "0.1"  # importlib.metadata reads what this does not
