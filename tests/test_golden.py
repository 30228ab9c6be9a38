"""The golden store: round trip, staleness, atomic writes (golden.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import golden_meta

from pytest_edge.errors import GoldenError
from pytest_edge.files import atomic_write
from pytest_edge.golden import GoldenCase, GoldenStore

# Also run by tox -e tflite-runtime: golden files NumPy 1.x writes and reads there.
pytestmark = pytest.mark.tflite_runtime_lane

# ---------------------------------------------------------------- golden store


def _case() -> GoldenCase:
    return GoldenCase({"x": np.arange(4, dtype=np.float32)}, {"y": np.arange(4, dtype=np.float32) * 2})


def test_golden_roundtrip_stale_and_missing(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model v1")
    store = GoldenStore(tmp_path / "golden")
    with pytest.raises(GoldenError, match="--edge-update-golden"):
        store.load("m")
    store.write("m", golden_meta(artifact), [_case(), _case()])
    golden = store.load("m")
    assert len(golden.cases) == 2 and golden.stale_reason(artifact) is None
    assert golden.cases[1].outputs["y"].tolist() == [0, 2, 4, 6]
    artifact.write_bytes(b"model v2")
    reason = golden.stale_reason(artifact)
    assert reason is not None and "stale" in reason and golden.meta.artifacts["m.onnx"] in reason
    before = {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()}
    store.write("m", golden_meta(artifact), [_case()])
    after = {p.name: p.read_bytes() for p in (tmp_path / "golden/m").iterdir()}
    assert sorted(after) == sorted(n for n in before if n.startswith("case_000-")) + ["meta.json"]
    store.write("m", golden_meta(artifact), [_case()])
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
    store.write("m", golden_meta(artifact), [_case()])
    errors: list[Exception] = []

    def writer() -> None:
        for _ in range(20):
            store.write("m", golden_meta(artifact), [_case()])

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



# ---------------------------------------------------------------- input sets


def test_input_key_is_the_content_of_the_inputs() -> None:
    from pytest_edge.golden import input_key

    x, m = np.arange(4, dtype=np.float32), np.ones((2, 2), np.int8)
    key = input_key([{"x": x, "m": m}])
    assert len(key) == 12 and set(key) <= set("0123456789abcdef")
    assert input_key([{"m": m.copy(), "x": x.copy()}]) == key, "dict order and array identity do not matter"
    others = [
        [{"x": x.astype(np.float64), "m": m}],   # dtype
        [{"x": x.reshape(2, 2), "m": m}],        # shape
        [{"y": x, "m": m}],                      # name
        [{"x": x + 1, "m": m}],                  # values
        [{"x": x, "m": m}, {"x": x, "m": m}],    # number of cases
        [{"x": x}],                              # inputs left out
    ]
    assert len({key, *(input_key(cases) for cases in others)}) == len(others) + 1
    a, b = {"x": x}, {"x": x * 2}
    assert input_key([a, b]) != input_key([b, a]), "cases keep their order"
    assert input_key([{"x": [1, 2]}]) == input_key([{"x": np.array([1, 2])}])


def test_set_keys_are_validated_before_paths_are_built(tmp_path: Path) -> None:
    from pytest_edge.golden import DEFAULT_SET, check_set_key

    store = GoldenStore(tmp_path)
    assert store.folder("m") == store.folder("m", DEFAULT_SET) == tmp_path / "m"
    assert store.folder("m", "0123456789ab") == tmp_path / "m/inputs-0123456789ab"
    for bad in ("../../etc", "0123456789AB", "0123456789a", "inputs-0123456789ab", "", "0123456789ab/"):
        with pytest.raises(GoldenError, match="not a golden input set key"):
            check_set_key(bad)
        with pytest.raises(GoldenError):
            store.folder("m", bad)


def test_sets_are_stored_apart_and_written_apart(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    other = GoldenCase({"x": np.full(4, 7, np.float32)}, {"y": np.full(4, 14, np.float32)})
    store.write("m", golden_meta(artifact), [_case()])
    store.write("m", golden_meta(artifact), [other], key="0123456789ab")
    folder = tmp_path / "golden/m"
    assert store.sets("m") == ["default", "0123456789ab"]
    assert store.load("m").cases[0].outputs["y"].tolist() == [0, 2, 4, 6]
    loaded = store.load("m", "0123456789ab")
    assert loaded.key == "0123456789ab" and loaded.cases[0].outputs["y"].tolist() == [14] * 4
    assert loaded.folder == folder / "inputs-0123456789ab" and loaded.meta.input_set == "0123456789ab"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and "inputs-" not in str(p)}
    store.write("m", golden_meta(artifact), [other, other], key="0123456789ab")
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and "inputs-" not in str(p)} == before
    store.write("m", golden_meta(artifact), [_case()])  # the default set's refresh keeps the other set's files
    assert len(store.load("m", "0123456789ab").cases) == 2
    with pytest.raises(GoldenError, match=r"no golden outputs for model 'm', input set abcdefabcdef .*"
                                          r"inputs-abcdefabcdef/meta\.json.*--edge-update-golden"):
        store.load("m", "abcdefabcdef")


def _store_with_one_set(tmp_path: Path) -> tuple[GoldenStore, Path, Path]:
    """A golden store holding input set 0123456789ab of model m: the store, the artifact, m's folder."""
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    store.write("m", golden_meta(artifact), [_case()], key="0123456789ab")
    return store, artifact, tmp_path / "golden/m"


def test_sets_ignore_other_names_and_refuse_links(tmp_path: Path) -> None:
    store, artifact, folder = _store_with_one_set(tmp_path)
    for junk in ("inputs-zzzzzzzzzzzz", "notes", "inputs-0123456789ab.bak"):
        (folder / junk).mkdir()
        (folder / junk / "meta.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "meta.json").write_text("{}")
    (folder / "inputs-abcdefabcdef").symlink_to(elsewhere)
    assert store.sets("m") == ["0123456789ab"], "no default set, junk and links are not sets"
    assert store.all_sets() == [("m", "0123456789ab")]
    with pytest.raises(GoldenError, match=r"corrupt golden file .*inputs-abcdefabcdef: .*symbolic link"):
        store.load("m", "abcdefabcdef")
    with pytest.raises(GoldenError, match="symbolic link"):
        store.remove("m", "abcdefabcdef")
    with pytest.raises(GoldenError, match="symbolic link"):
        store.write("m", golden_meta(artifact), [_case()], key="abcdefabcdef")
    assert (elsewhere / "meta.json").read_text() == "{}" and sorted(p.name for p in elsewhere.iterdir()) == ["meta.json"]


def test_a_model_folder_that_is_a_link_is_refused_like_a_set_folder(tmp_path: Path) -> None:
    """golden/m linked to a folder elsewhere (a pull request can add one): neither read nor
    written, nor are stray files there deleted by a refresh."""
    store, artifact, folder = _store_with_one_set(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    (elsewhere / "case_000-0123456789ab.npz").write_bytes(b"the user's own file")
    before = sorted(p.name for p in elsewhere.iterdir())
    for action in (lambda: store.load("m", "0123456789ab"), lambda: store.load("m"),
                   lambda: store.write("m", golden_meta(artifact), [_case()]),
                   lambda: store.remove("m", "0123456789ab")):
        with pytest.raises(GoldenError, match=r"golden/m: a model's golden folder must be a plain folder, not a "
                                              r"symbolic link"):
            action()
    assert sorted(p.name for p in elsewhere.iterdir()) == before


def test_a_set_copied_under_another_key_is_refused(tmp_path: Path) -> None:
    import shutil

    store, _, folder = _store_with_one_set(tmp_path)
    shutil.copytree(folder / "inputs-0123456789ab", folder / "inputs-abcdefabcdef")
    with pytest.raises(GoldenError, match=r"corrupt golden file .*inputs-abcdefabcdef/meta\.json: 'input_set' is "
                                          r"'0123456789ab', but the folder holds input set 'abcdefabcdef'"):
        store.load("m", "abcdefabcdef")
    for name in ("meta.json", *(p.name for p in (folder / "inputs-0123456789ab").glob("case_*"))):
        shutil.copy(folder / "inputs-0123456789ab" / name, folder / name)
    with pytest.raises(GoldenError, match=r"m/meta\.json: 'input_set' is '0123456789ab', but the folder holds "
                                          r"input set 'default'"):
        store.load("m")


def test_remove_deletes_one_set_and_keeps_foreign_files(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    folder = tmp_path / "golden/m"
    store.write("m", golden_meta(artifact), [_case()])
    store.write("m", golden_meta(artifact), [_case()], key="0123456789ab")
    store.write("m", golden_meta(artifact), [_case()], key="abcdefabcdef")
    (folder / "inputs-abcdefabcdef/README").write_text("mine")
    kept = {p: p.read_bytes() for p in (folder / "inputs-0123456789ab").iterdir()}

    removed = store.remove("m")
    assert folder / "meta.json" in removed and not list(folder.glob("case_*")) and not (folder / "meta.json").exists()
    assert store.sets("m") == ["0123456789ab", "abcdefabcdef"]
    assert {p: p.read_bytes() for p in (folder / "inputs-0123456789ab").iterdir()} == kept
    store.remove("m", "abcdefabcdef")
    assert [p.name for p in (folder / "inputs-abcdefabcdef").iterdir()] == ["README"], "not ours: kept"
    assert store.sets("m") == ["0123456789ab"]
    (folder / "inputs-abcdefabcdef/README").unlink()
    (folder / "inputs-abcdefabcdef").rmdir()
    assert store.remove("m", "0123456789ab")[-1] == folder, "the last set takes the model's folder with it"
    assert not folder.exists() and store.all_sets() == [] and store.remove("m") == []


def test_unused_sets() -> None:
    from pytest_edge.golden import set_label, unused_sets

    stored = [("b", "default"), ("a", "0123456789ab"), ("a", "default")]
    assert unused_sets(stored, {("a", "default"), ("c", "default")}) == [("a", "0123456789ab"), ("b", "default")]
    assert unused_sets(stored, set(stored)) == []
    assert set_label("a", "0123456789ab") == "a/0123456789ab"
