"""The golden store: round trip, staleness, atomic writes (golden.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.errors import GoldenError
from pytest_edge.golden import GoldenCase, GoldenStore, atomic_write

# ---------------------------------------------------------------- golden store


def _case() -> GoldenCase:
    return GoldenCase({"x": np.arange(4, dtype=np.float32)}, {"y": np.arange(4, dtype=np.float32) * 2})


def _meta(artifact: Path) -> dict:
    from pytest_edge.golden import sha256_file

    return {"model": "m", "artifacts": {artifact.name: sha256_file(artifact)},
            "reference": {"backend": "onnxruntime-cpu", "artifact": artifact.name},
            "signature": {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
                          "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}]}}


def test_golden_roundtrip_stale_and_missing(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model v1")
    store = GoldenStore(tmp_path / "golden")
    with pytest.raises(GoldenError, match="--edge-update-golden"):
        store.load("m")
    store.write("m", _meta(artifact), [_case(), _case()])
    golden = store.load("m")
    assert len(golden.cases) == 2 and golden.stale_reason(artifact) is None
    assert golden.cases[1].outputs["y"].tolist() == [0, 2, 4, 6]
    artifact.write_bytes(b"model v2")
    reason = golden.stale_reason(artifact)
    assert reason is not None and "stale" in reason and golden.meta["artifacts"]["m.onnx"] in reason
    before = {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()}
    store.write("m", _meta(artifact), [_case()])
    after = {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()}
    assert sorted(after) == sorted(n for n in before if n.startswith("case_000-")) + ["meta.json"]
    store.write("m", _meta(artifact), [_case()])
    assert {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()} == after, \
        "refreshing an unchanged golden must not change a byte"


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "meta.json"
    target.write_text("old")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, b"new")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_concurrent_golden_writes_never_expose_a_partial_file(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    store.write("m", _meta(artifact), [_case()])
    errors: list[Exception] = []

    def writer() -> None:
        for _ in range(20):
            store.write("m", _meta(artifact), [_case()])

    def reader() -> None:
        for _ in range(50):
            try:
                assert store.load("m").cases[0].outputs["y"].tolist() == [0, 2, 4, 6]
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_corrupt_meta_names_file(tmp_path: Path) -> None:
    (tmp_path / "golden/m").mkdir(parents=True)
    (tmp_path / "golden/m/meta.json").write_text("{not json")
    with pytest.raises(GoldenError, match=r"corrupt golden file .*meta\.json"):
        GoldenStore(tmp_path / "golden").load("m")


