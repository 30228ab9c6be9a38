"""Bad input of every kind gives an error that names the file, keyword or backend: golden files
(untrusted: they arrive in pull requests), reports, marker keywords, user inputs, artifacts."""

from __future__ import annotations

import fcntl
import io
import json
import math
import os
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_edge.backends import TensorSpec, get_backend
from pytest_edge.backends.executorch.backend import explain_error
from pytest_edge.accuracy.compare import (ScopedTolerances, Tolerance, ToleranceOverride, compare_output,
                                          needed_tolerances)
from pytest_edge.errors import BackendError, EdgeUsageError, GoldenError
from pytest_edge.golden.store import tidy_leftovers
from pytest_edge.golden import Golden, GoldenCase, GoldenStore
from pytest_edge.golden.layout import case_file, npz_bytes
from pytest_edge.accuracy.inputs import check_case, check_shapes, generate_case, user_cases
from pytest_edge.core.marker import parse_marker
from pytest_edge.core.record import NOT_JUDGED, Record
from pytest_edge.report import SCHEMA as REPORT_SCHEMA
from pytest_edge.report import build_report, load_report, merge_reports, write_report
from pytest_edge.worker import BackendWorker
from pytest_edge.measurement.machine import Machine

from edge_helpers import FIXTURES, golden_meta, record

# Also run by tox -e tflite-runtime: hostile files NumPy 1.x and tflite-runtime 2.14 read there.
pytestmark = pytest.mark.tflite_runtime_lane


# ---------------------------------------------------------------- golden files


def _case(y: np.ndarray | None = None) -> GoldenCase:
    x = np.arange(4, dtype=np.float32)
    return GoldenCase({"x": x}, {"y": x * 2 if y is None else y})


@pytest.fixture
def golden(tmp_path: Path) -> tuple[GoldenStore, Path, Path]:
    """A valid golden for model 'm' (from a copy of a fixture model): store, folder, artifact."""
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes((FIXTURES / "tiny_mlp.onnx").read_bytes())
    store = GoldenStore(tmp_path / "golden")
    store.write("m", golden_meta(artifact), [_case()])
    return store, tmp_path / "golden" / "m", artifact


def _edit_meta(folder: Path, **changes: Any) -> dict[str, Any]:
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(changes)
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def _put_case(folder: Path, arrays: dict[str, np.ndarray], index: int = 0) -> str:
    """A case file with a correct content-hash name, listed in meta.json."""
    blob = npz_bytes(arrays)
    name = case_file(index, blob)
    (folder / name).write_bytes(blob)
    _edit_meta(folder, cases=[name])
    return name


@pytest.mark.parametrize("content, detail", [
    ("[1, 2]", "expected a JSON object, got list"),
    ('"golden"', "expected a JSON object, got str"),
    ("null", "expected a JSON object, got NoneType"),
    ("\udcff", "corrupt golden file"),  # not UTF-8 once written with surrogateescape
    ("[" * 100_000, "corrupt golden file"),  # deeper than the interpreter's recursion limit
])
def test_meta_json_that_is_no_object(golden, content: str, detail: str) -> None:
    store, folder, _ = golden
    (folder / "meta.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(GoldenError, match="corrupt golden file") as error:
        store.load("m")
    message = str(error.value)
    assert str(folder / "meta.json") in message and detail in message and "regenerate it with" in message


@pytest.mark.parametrize("changes, detail", [
    ({"cases": "case_000-0123456789ab.npz"}, "'cases' must be a list of case file names"),
    ({"cases": [1, 2]}, "'cases' must be a list of case file names"),
    ({"cases": []}, "'cases' is empty"),
    ({"schema": "pytest-edge/golden/0"}, "schema 'pytest-edge/golden/0'"),
    ({"signature": []}, "'signature' must be an object"),
    ({"signature": {"inputs": {}, "outputs": []}}, "signature.inputs must be a list"),
    ({"signature": {"inputs": [{"name": "x", "shape": [4]}], "outputs": []}}, "signature.inputs[0].dtype"),
    ({"signature": {"inputs": [{"name": "x", "shape": [4.5], "dtype": "float32"}], "outputs": []}},
     "signature.inputs[0].shape"),
    ({"signature": {"inputs": [{"name": "x", "shape": [4], "dtype": "object"}], "outputs": []}},
     "signature.inputs[0].dtype must name a bool, integer or float dtype"),
    ({"signature": {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}], "outputs": "y"}},
     "signature.outputs must be a list"),
    ({"reference": "onnxruntime-cpu"}, "'reference' must be an object with a 'backend'"),
    ({"reference": {"backend": "onnxruntime-cpu", "artifact": "../../m.onnx"}},
     "'reference.artifact' must be a plain file name"),
    ({"artifacts": ["m.onnx"]}, "'artifacts' must map artifact names"),
])
def test_meta_json_of_the_wrong_shape(golden, changes: dict, detail: str) -> None:
    store, folder, _ = golden
    _edit_meta(folder, **changes)
    with pytest.raises(GoldenError) as error:
        store.load("m")
    message = str(error.value)
    assert f"corrupt golden file {folder / 'meta.json'}: " in message and detail in message, message
    assert "regenerate it with pytest --edge-update-golden" in message


@pytest.mark.parametrize("name", [
    "../../etc/passwd", "/etc/passwd", "../case_000-0123456789ab.npz", "sub/case_000-0123456789ab.npz",
    "case_000-0123456789ab.npz/../../x", "case_000-0123456789AB.npz", "case_000-0123456789ab.npz\0",
    "meta.json", "", ".", "case_000-0123456789ab.npy",
])
def test_case_names_are_confined_to_the_model_folder(golden, name: str) -> None:
    store, folder, _ = golden
    _edit_meta(folder, cases=[name])
    with pytest.raises(GoldenError, match="is not a case file name of this folder") as error:
        store.load("m")
    assert str(folder / "meta.json") in str(error.value) and "escape" in str(error.value)


def test_nothing_outside_the_model_folder_is_opened(golden) -> None:
    """A valid case file one level up, named with its right hash: the old reader would load it."""
    store, folder, _ = golden
    blob = npz_bytes({"inputs/x": np.ones(4, np.float32), "outputs/y": np.full(4, 7, np.float32)})
    outside = folder.parent / case_file(0, blob)
    outside.write_bytes(blob)
    _edit_meta(folder, cases=[f"../{outside.name}"])
    with pytest.raises(GoldenError, match="escape"):
        store.load("m")
    # Through a symbolic link inside the folder: refused too, not followed.
    (folder / outside.name).symlink_to(outside)
    _edit_meta(folder, cases=[outside.name])
    with pytest.raises(GoldenError, match="symbolic link") as error:
        store.load("m")
    assert str(folder / outside.name) in str(error.value)


def test_special_files_are_not_read(golden) -> None:
    store, folder, _ = golden
    name = "case_000-0123456789ab.npz"
    os.mkfifo(folder / name)  # reading a FIFO would block forever
    _edit_meta(folder, cases=[name])
    with pytest.raises(GoldenError, match="not a regular file"):
        store.load("m")


def test_missing_case_file_is_named(golden) -> None:
    store, folder, _ = golden
    _edit_meta(folder, cases=["case_000-0123456789ab.npz"])
    with pytest.raises(GoldenError,
                       match=r"case_000-0123456789ab\.npz: the file is missing \(named by .*meta\.json\)"):
        store.load("m")


def test_content_hash_is_verified(golden) -> None:
    store, folder, _ = golden
    (name,) = json.loads((folder / "meta.json").read_text())["cases"]
    other = {"inputs/x": np.ones(4, np.float32), "outputs/y": np.ones(4, np.float32)}
    (folder / name).write_bytes(npz_bytes(other))
    with pytest.raises(GoldenError, match="content does not match its hash") as error:
        store.load("m")
    assert str(folder / name) in str(error.value) and name[9:21] in str(error.value)


@pytest.mark.parametrize("bad, counts", [(np.nan, "3 NaN and 0 Inf"), (np.inf, "0 NaN and 3 Inf")])
def test_non_finite_golden_outputs_are_refused_on_read(golden, bad: float, counts: str) -> None:
    store, folder, _ = golden
    y = np.array([1, bad, bad, bad], np.float32)
    name = _put_case(folder, {"inputs/x": np.ones(4, np.float32), "outputs/y": y})
    with pytest.raises(GoldenError) as error:
        store.load("m")
    message = str(error.value)
    assert f"golden output 'y' in {folder / name} (case 0) contains {counts}" in message
    assert "refresh it with" in message


def test_inputs_may_hold_inf_but_not_nan(golden) -> None:
    store, folder, _ = golden
    mask = np.array([0, -np.inf, 0, 0], np.float32)  # an additive attention mask
    _put_case(folder, {"inputs/x": mask, "outputs/y": np.ones(4, np.float32)})
    assert np.isneginf(store.load("m").cases[0].inputs["x"][1])
    _put_case(folder, {"inputs/x": np.array([np.nan] * 4, np.float32), "outputs/y": np.ones(4, np.float32)})
    with pytest.raises(GoldenError, match="golden input 'x' in .* contains 4 NaN"):
        store.load("m")


def test_writing_a_non_finite_golden_is_refused(tmp_path: Path) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    with pytest.raises(GoldenError, match=r"refusing to write the golden for 'm'.*case 1: golden output 'y' "
                                          r"contains 1 NaN"):
        store.write("m", golden_meta(artifact), [_case(), _case(np.array([0, np.nan, 1, 2], np.float32))])
    assert not (tmp_path / "golden/m/meta.json").exists()


@pytest.mark.parametrize("arrays, detail", [
    ({"inputs/x": np.ones(4, np.float32)}, "its outputs [] do not match the signature's outputs ['y']"),
    ({"inputs/x": np.ones(4, np.float32), "outputs/y": np.ones(4, np.float32), "outputs/z": np.ones(1)},
     "its outputs ['y', 'z'] do not match"),
    ({"inputs/x": np.ones(4, np.float32), "outputs/y": np.array(["a", "b"])}, "holds dtype <U1"),
    ({"inputs/x": np.ones(4, np.float32), "outputs/y": np.ones(4, np.complex64)}, "holds dtype complex64"),
    ({"x": np.ones(4, np.float32)}, "unexpected member 'x.npy'"),
])
def test_case_contents_are_checked(golden, arrays: dict, detail: str) -> None:
    store, folder, _ = golden
    name = _put_case(folder, arrays)
    with pytest.raises(GoldenError) as error:
        store.load("m")
    assert f"corrupt golden file {folder / name}" in str(error.value) and detail in str(error.value)


def test_case_with_a_lying_array_header_is_refused_before_allocating(golden) -> None:
    """A header claiming 10^12 floats over 16 bytes of data must not make the reader allocate 4 TB."""
    store, folder, _ = golden
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("inputs/x.npy", npz_member(np.ones(4, np.float32)))
        archive.writestr("outputs/y.npy", header.getvalue() + bytes(16))
    name = case_file(0, buffer.getvalue())
    (folder / name).write_bytes(buffer.getvalue())
    _edit_meta(folder, cases=[name])
    with pytest.raises(GoldenError, match=r"member 'outputs/y.npy' declares shape \[1000000000000\], which the "
                                          r"signature's \[4\] in meta.json cannot hold") as error:
        store.load("m")
    assert f"corrupt golden file {folder / name}" in str(error.value)
    # Where the signature leaves the size open, the header's size must still match the data held.
    meta = json.loads((folder / "meta.json").read_text())
    meta["signature"]["outputs"][0]["shape"] = ["n"]
    _edit_meta(folder, signature=meta["signature"])
    with pytest.raises(GoldenError, match=r"member 'outputs/y.npy' declares 4000000000000 bytes \(shape "
                                          r"\[1000000000000\] of float32\), more than the 268435456 bytes"):
        store.load("m")


def test_a_small_case_file_that_inflates_to_a_gigabyte_is_refused_before_inflating(golden) -> None:
    """About a megabyte of deflated zeros that inflates to 1 GiB, under a signature that leaves the
    size open: refused from its header, the data never inflated (the old reader took 3.2 GB)."""
    import resource

    store, folder, _ = golden
    meta = json.loads((folder / "meta.json").read_text())
    meta["signature"]["outputs"][0]["shape"] = ["n", 4]
    header = io.BytesIO()
    rows = 2**28 // 4
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (rows, 4)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("inputs/x.npy", npz_member(np.ones(4, np.float32)))
        with archive.open("outputs/y.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            zeros = bytes(2**24)
            for _ in range(2**30 // len(zeros)):
                member.write(zeros)
    assert len(buffer.getvalue()) < 2 * 2**20
    name = case_file(0, buffer.getvalue())
    (folder / name).write_bytes(buffer.getvalue())
    _edit_meta(folder, cases=[name], signature=meta["signature"])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(GoldenError, match=r"declares 1073741824 bytes \(shape \[67108864, 4\] of float32\), "
                                          r"more than the 268435456 bytes a golden array may hold"):
        store.load("m")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KB: nothing inflated


def npz_member(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


# Fixed bytes (not os.urandom): pytest-xdist workers must collect the same test ids.
@pytest.mark.parametrize("payload", [b"", b"PK\x03\x04 truncated", b"\x93NUMPY not a zip",
                                     np.random.default_rng(7).bytes(64)], ids=["empty", "truncated-zip",
                                                                                "npy-not-zip", "random"])
def test_case_bytes_that_are_no_npz(golden, payload: bytes) -> None:
    store, folder, _ = golden
    name = case_file(0, payload)
    (folder / name).write_bytes(payload)
    _edit_meta(folder, cases=[name])
    with pytest.raises(GoldenError, match=f"corrupt golden file {folder / name}"):
        store.load("m")


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_written_files_follow_the_umask_and_keep_an_existing_mode(tmp_path: Path, umask: None) -> None:
    artifact = tmp_path / "m.onnx"
    artifact.write_bytes(b"model")
    store = GoldenStore(tmp_path / "golden")
    store.write("m", golden_meta(artifact), [_case()])
    folder = tmp_path / "golden/m"
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {
        p.name: 0o640 for p in folder.iterdir()}, "0o666 & ~umask, not mkstemp's 0600"
    (folder / "meta.json").chmod(0o664)
    store.write("m", golden_meta(artifact), [_case(np.ones(4, np.float32))])
    assert stat.S_IMODE((folder / "meta.json").stat().st_mode) == 0o664, "a replaced file keeps its mode"
    write_report(tmp_path / "r.json", build_report([], {}))
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o640


def test_temporaries_of_an_interrupted_refresh_are_removed_by_the_next_check_or_refresh(golden) -> None:
    store, folder, artifact = golden
    names = [".case_000-0123456789ab.npz.k2j3h4.tmp", ".meta.json.x8y9z0.tmp"]
    unrelated = [folder / ".notes.tmp", folder / "README.md"]
    for path in unrelated:
        path.write_bytes(b"mine")

    def leave_leftovers() -> list[Path]:
        for name in names:
            (folder / name).write_bytes(b"partial")
        return [folder / name for name in names]

    # A refresh running now (it holds the model folder's exclusive lock): a check leaves its files.
    leftovers = leave_leftovers()
    holder = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        # (load itself would wait for its shared lock; its tidy step must not wait, nor remove)
        tidy_leftovers(folder, folder)  # flock conflicts between open files, as between processes
        assert all(p.exists() for p in leftovers)
    finally:
        os.close(holder)
    # No refresh running: the next check tidies (a SIGKILLed refresh left them), the user's files stay.
    store.load("m")
    assert not any(p.exists() for p in leftovers) and all(p.exists() for p in unrelated)
    leftovers = leave_leftovers()
    store.write("m", golden_meta(artifact), [_case()])
    assert not any(p.exists() for p in leftovers) and all(p.exists() for p in unrelated)


# ---------------------------------------------------------------- golden fuzz: GoldenError or a valid load


def _valid_load_or_golden_error(store: GoldenStore, artifact: Path) -> None:
    try:
        golden = store.load("m")
    except GoldenError:
        return
    # A golden that loads is one the session can use without tripping on it.
    assert isinstance(golden, Golden) and isinstance(golden.reference_backend, str)
    inputs, outputs = golden.inputs_spec, golden.outputs_spec
    assert golden.cases
    for case in golden.cases:
        assert set(case.inputs) == {s.name for s in inputs} and set(case.outputs) == {s.name for s in outputs}
        for array in case.outputs.values():
            assert array.dtype.kind in "biuf" and (array.dtype.kind != "f" or np.all(np.isfinite(array)))
    reason = golden.stale_reason(artifact)
    assert reason is None or isinstance(reason, str)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**40) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
META_PATHS = [("cases",), ("cases", 0), ("schema",), ("signature",), ("signature", "inputs"),
              ("signature", "inputs", 0), ("signature", "inputs", 0, "shape"), ("signature", "inputs", 0, "dtype"),
              ("signature", "inputs", 0, "name"), ("signature", "outputs", 0, "name"), ("reference",),
              ("reference", "backend"), ("reference", "artifact"), ("artifacts",), ("artifacts", "m.onnx")]


def _fresh_golden(root: Path) -> tuple[GoldenStore, Path, Path]:
    artifact = root / "m.onnx"
    artifact.write_bytes(b"model bytes")
    store = GoldenStore(root / "golden")
    store.write("m", golden_meta(artifact), [_case()])
    return store, root / "golden" / "m", artifact


def _mutate(data: bytes, draw: Any) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        action = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if action == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "delete" and out:
            del out[at: at + draw(st.integers(1, 16))]
        elif action == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del out[at:]
    return bytes(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_meta_json(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as root:
        store, folder, artifact = _fresh_golden(Path(root))
        original = (folder / "meta.json").read_bytes()
        how = data.draw(st.sampled_from(["random", "bytes", "structure"]))
        if how == "random":
            content = data.draw(st.binary(max_size=200))
        elif how == "bytes":
            content = _mutate(original, data.draw)
        else:
            meta = json.loads(original)
            path = data.draw(st.sampled_from(META_PATHS))
            parent = meta
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()):
                parent[path[-1]] = data.draw(json_values)
            else:
                del parent[path[-1]]
            content = json.dumps(meta).encode()
        (folder / "meta.json").write_bytes(content)
        _valid_load_or_golden_error(store, artifact)


npz_arrays = st.dictionaries(
    st.sampled_from(["inputs/x", "outputs/y", "outputs/z", "x", "inputs/x/y"]),
    st.one_of(
        st.builds(lambda n, v: np.full(n, v, np.float32), st.integers(0, 5), st.floats(width=32)),
        st.builds(lambda n: np.arange(n, dtype=np.int8), st.integers(0, 5)),
        st.builds(lambda n: np.array(["s"] * n), st.integers(1, 3))),
    max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_case_npz(data: st.DataObject) -> None:
    """Mutated bytes named with their own hash, so they reach the .npz parser itself."""
    with tempfile.TemporaryDirectory() as root:
        store, folder, artifact = _fresh_golden(Path(root))
        how = data.draw(st.sampled_from(["bytes", "arrays"]))
        if how == "bytes":
            (name,) = json.loads((folder / "meta.json").read_text())["cases"]
            blob = _mutate((folder / name).read_bytes(), data.draw)
        else:
            blob = npz_bytes(data.draw(npz_arrays))
        name = case_file(0, blob)
        (folder / name).write_bytes(blob)
        _edit_meta(folder, cases=[name])
        _valid_load_or_golden_error(store, artifact)


# ---------------------------------------------------------------- reports


def _record(**changes: Any) -> dict[str, Any]:
    """A record of the shape the pipeline's record step writes, every field present (figures measured)."""
    return record("m", "litert", **{
        "model": {"name": "m", "artifact": "models/m.tflite", "sha256": "0" * 64},
        "runtime": {"name": "ai-edge-litert", "version": "2.3.0"},
        "plugin": {"name": "pytest-edge", "version": "0.1.0"}, "precision": "float32", "threads": 1,
        "input": {"x": {"shape": [1, 16], "dtype": "float32"}}, "warmup_runs": 5, "measured_runs": 50,
        "coverage": {"total_ops": 3, "delegated_ops": 3, "fallback_ops": 0, "partitions": 1,
                     "fallback_op_names": {}, "delegates": ["XNNPACK"], "method": "runtime",
                     "approximate": False, "fallback": 0.0},
        "load_ms": 1.5, "first_inference_ms": 0.2,
        "latency_ms": {"p50": 0.1, "p90": 0.2, "p99": 0.3, "mean": 0.12, "min": 0.09},
        "peak_memory_mb": 3.2, "steady_memory_mb": 2.0, "drift": 1.01, "timing_under_load": False,
        "other_cores_busy": 0.1, "processes": [{"p50": 0.1, "p99": 0.3, "runs": 50}],
        "accuracy": {"reference": "onnxruntime-cpu", "cases": 1, "max_abs_err": math.inf,
                     "max_rel_err": 0.0, "cosine": None, "snr_db": None},
        "something_new": {"any": "thing"}, **changes})


def _skipped() -> dict[str, Any]:
    return {"test": "t[m-executorch]", "model": {"name": "m", "artifact": None, "sha256": None},
            "backend": "executorch", "verdict": "skipped", "skip_reason": "no .pte artifact for m",
            "violations": []}


def test_reports_the_plugin_writes_are_accepted(tmp_path: Path) -> None:
    unmeasured = _record(latency_ms=None, peak_memory_mb=None, load_ms=None, coverage=None,
                         measured_runs=None, warmup_runs=None)
    gated = _record(verdict="failed", timing_not_judged=NOT_JUDGED.reason,
                    baseline_check={"mode": "stored", "verdict": "accepted", "findings": [{"verdict": "accepted"}]})
    report = build_report([Record.from_json(r) for r in (_record(), unmeasured, _skipped(), gated)], Machine(cpu="x86"))
    write_report(tmp_path / "r.json", report)
    assert len(load_report(tmp_path / "r.json").records) == 4
    write_report(tmp_path / "merged.json", merge_reports([report, report]))
    assert len(load_report(tmp_path / "merged.json").records) == 8


@pytest.mark.parametrize("content, detail", [
    ("{not json", "cannot read report"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"schema": "other/1", "records": []}', "schema 'other/1'"),
    (json.dumps({"schema": REPORT_SCHEMA, "records": {}}), "'records': expected a list, got dict"),
    (json.dumps({"schema": REPORT_SCHEMA}), "'records': expected a list, got NoneType"),
    (json.dumps({"schema": REPORT_SCHEMA, "machine": [], "records": []}), "'machine': expected an object"),
    (json.dumps({"schema": REPORT_SCHEMA, "records": [1]}), "record 0: expected an object, got int"),
])
def test_reports_that_are_no_report(tmp_path: Path, content: str, detail: str) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(ValueError) as error:
        load_report(path)
    assert str(path) in str(error.value) and detail in str(error.value), str(error.value)


@pytest.mark.parametrize("record, detail", [
    ({k: v for k, v in _record().items() if k != "test"}, "'test' must be a string"),
    ({k: v for k, v in _record().items() if k != "backend"}, "'backend' must be a string"),
    ({k: v for k, v in _record().items() if k != "verdict"}, "'verdict' must be a string"),
    (_record(model="m"), "'model' must be an object with a 'name'"),
    (_record(model={"artifact": "m.onnx"}), "'model' must be an object with a 'name'"),
    (_record(latency_ms={"p50": "fast"}), "'latency_ms.p50' must be a number or null, got 'fast'"),
    (_record(latency_ms=[0.1]), "'latency_ms' must be an object or null"),
    (_record(peak_memory_mb="64MB"), "'peak_memory_mb' must be a number or null, got '64MB'"),
    (_record(load_ms=True), "'load_ms' must be a number or null, got True"),
    (_record(coverage={"fallback": "5%"}), "'coverage.fallback' must be a number or null"),
    (_record(coverage={"partitions": 1}), "'coverage' has no 'fallback' figure"),
    (_record(accuracy={"max_abs_err": "big"}), "'accuracy.max_abs_err' must be a number"),
    (_record(processes={"p50": 1}), "'processes' must be a list of objects"),
    # Verdicts and timing policies are enums' (core/record.py): a word of no version is refused, not counted.
    (_record(verdict="great"), "'verdict': unknown verdict 'great'"),
    (_record(baseline_check={"mode": "stored", "verdict": "meh"}), "'baseline_check.verdict': unknown gate verdict 'meh'"),
    (_record(baseline_check={"verdict": "failed", "findings": [{"figure": "peak memory", "verdict": "bad"}]}),
     "a finding of 'baseline_check': unknown gate verdict 'bad'"),
    (_record(timing_not_judged="slow machine"), "'timing_not_judged': unknown timing_not_judged 'slow machine'"),
    (_record(llm={"timing_not_judged": "slow machine"}), "'llm.timing_not_judged': unknown timing_not_judged"),
])
def test_report_records_of_the_wrong_shape(tmp_path: Path, record: dict, detail: str) -> None:
    path = tmp_path / "new.json"
    path.write_text(json.dumps(build_report([], Machine()).to_json() | {"records": [_skipped(), record]}))
    with pytest.raises(ValueError) as error:
        load_report(path)
    assert str(path) in str(error.value) and "record 1" in str(error.value) and detail in str(error.value), \
        str(error.value)


# ---------------------------------------------------------------- marker keywords


@pytest.mark.parametrize("kwargs, pattern", [
    ({"tolerances": {"y": {"atol": "loose"}}}, r"tolerances\['y'\]\.atol: cannot parse 'loose'"),
    ({"tolerances": {"y": {"rtol": -1}}}, r"tolerances\['y'\]\.rtol: -1 must be a finite number >= 0"),
    ({"tolerances": {"y": {"atol": True}}}, r"tolerances\['y'\]\.atol: expected a number, got True"),
    ({"tolerances": {"litert": {"y": {"min_cosine": 1.5}}}},
     r"tolerances\['litert'\]\['y'\]\.min_cosine: 1\.5 is above 1"),
    ({"tolerances": {"litert": {"topk_agreement": "most"}}},
     r"tolerances\['litert'\]\.topk_agreement: cannot parse"),
    ({"tolerances": {"y": {"atol": float("nan")}}}, r"tolerances\['y'\]\.atol: nan must be a finite number"),
    ({"tolerances": {"y": 1e-3}}, r"tolerances: expected .*got 'y': 0\.001"),
    ({"tolerances": [("y", 1)]}, r"tolerances: expected"),
    ({"backends": "litert, executorch", "skip_backends": ["litert"]},
     r"both backends= and skip_backends= name 'litert'"),
    ({"shapes": {"x": (1, -3, 8)}}, r"shapes=\{'x': \(1, -3, 8\)\}: dimension -3 of input 'x' is negative"),
    ({"shapes": {"x": (1, 3, 100_000, 100_000)}},
     r"input 'x' would have 30000000000 elements, more than 2147483648"),
    ({"shapes": {"x": "1,3,8,8"}}, r"shapes=\{'x': '1,3,8,8'\}: the shape must be a tuple of ints"),
    ({"shapes": {"x": (1, 2.5)}}, r"dimension 2\.5 is not an integer"),
    ({"shapes": {"x": (1, True)}}, r"dimension True is not an integer"),
    ({"shapes": [("x", (1, 3))]}, r"shapes: expected \{input name: shape\}"),
    ({"inputs": 42}, r"inputs=: expected an \.npz path, a dict of arrays, a list of dicts or a callable.*got int"),
    ({"inputs": np.zeros(3)}, r"inputs=: .*got ndarray"),
])
def test_marker_keywords_rejected_at_parse_time(kwargs: dict, pattern: str) -> None:
    with pytest.raises(EdgeUsageError, match=pattern):
        parse_marker(("m",), kwargs)


def test_marker_tolerances_are_parsed_to_floats() -> None:
    spec = parse_marker(("m",), {"tolerances": {"y": {"atol": "1e-3"}, "litert": {"y": {"min_cosine": "99%"}}},
                                 "shapes": {"x": np.array([1, 3, 8, 8])}, "backends": "litert",
                                 "skip_backends": "executorch"})
    assert spec.tolerances == {"y": ScopedTolerances(ToleranceOverride(Tolerance(atol=1e-3))),
                               "litert": ScopedTolerances(outputs={"y": ToleranceOverride(Tolerance(min_cosine=0.99))})}
    assert spec.shapes == {"x": (1, 3, 8, 8)} and all(type(d) is int for d in spec.shapes["x"])


# ---------------------------------------------------------------- user inputs

FLOAT = [TensorSpec("x", (1, 4), "float32")]
INT = [TensorSpec("n", (1, 4), "int32")]


@pytest.mark.parametrize("case, specs, pattern", [
    ({"x": np.ones((1, 4)), "z": np.ones(1)}, FLOAT,
     r"inputs= gives \['x', 'z'\].*not inputs of the model: \['z'\]"),
    ({"y": np.ones((1, 4))}, FLOAT, r"model's inputs are \['x'\] \(missing \['x'\]\)"),
    ({"x": np.ones((1, 4), np.int64)}, FLOAT,
     r"input 'x' has dtype int64, the model takes float32: .*x\.astype\(np\.float32\) \(after any scaling"),
    ({"x": np.ones((1, 4), np.complex64)}, FLOAT, r"input 'x' holds complex numbers"),
    ({"x": np.array(["a", "b"])}, FLOAT, r"input 'x' holds strings \(dtype <U1\)"),
    ({"x": np.array([object(), 1])}, FLOAT, r"input 'x' holds Python objects"),
    ({"x": [[1.0], [1.0, 2.0]]}, FLOAT, r"input 'x' is not an array"),
    ({"x": np.array([1.0, np.nan])}, FLOAT, r"input 'x' contains 1 NaN"),
    ({"x": np.array([1e300])}, FLOAT, r"value 1e\+300 at index \(0,\) does not survive the conversion to float32"),
    ({"n": np.ones((1, 4), np.float32)}, INT, r"input 'n' has dtype float32, the model takes int32"),
    ({"n": np.full((1, 4), 2**40)}, INT, r"value 1099511627776 at index \(0, 0\) does not survive"),
    ({"n": 2.5}, INT, r"input 'n' has dtype float64, the model takes int32: value 2\.5 does not survive"),
])
def test_user_inputs_rejected(case: dict, specs: list, pattern: str) -> None:
    with pytest.raises(EdgeUsageError, match=pattern) as error:
        check_case(case, specs, "golden for m")
    assert str(error.value).startswith("golden for m: inputs=")


@pytest.mark.parametrize("value, specs, dtype", [
    (np.ones((1, 4)), FLOAT, "float32"),  # float64 -> float32: NumPy's default, allowed (documented)
    (np.ones((1, 4), np.uint8), FLOAT, "float32"),  # safe by NumPy's rules
    (np.full((1, 4), 3), INT, "int32"),  # int64 values in range
    (3, FLOAT, "float32"),  # a Python number carries no dtype choice; 3 -> 3.0 exactly
    ([[1.0, 2.0, 3.0, 4.0]], INT, "int32"),
    (np.array([[0, -np.inf, 0, 0]], np.float32), FLOAT, "float32"),  # additive mask
])
def test_user_inputs_converted(value: Any, specs: list, dtype: str) -> None:
    (name,) = [s.name for s in specs]
    assert check_case({name: value}, specs, "golden for m")[name].dtype == np.dtype(dtype)


def _boom() -> dict:
    raise ZeroDivisionError("division by zero")


@pytest.mark.parametrize("source, pattern", [
    (lambda: 42, r"inputs=: the callable .*<lambda> returned int 42; it must return a dict"),
    (lambda: "x.npz", r"returned str 'x\.npz'"),
    (lambda: [{"x": 1}, 7], r"inputs= from the inputs callable must be a dict of arrays .* got int 7"),
    (_boom, r"inputs=: the callable _boom raised ZeroDivisionError: division by zero"),
    ([{"x": 1}, [1, 2]], r"inputs= from inputs= must be a dict of arrays .* got list"),
    (3.5, r"inputs= must be an \.npz path, a dict, a list of dicts or a callable, got float"),
])
def test_user_input_sources_rejected(tmp_path: Path, source: Any, pattern: str) -> None:
    with pytest.raises(EdgeUsageError, match=pattern) as error:
        user_cases(source, tmp_path)
    if source is _boom:
        assert isinstance(error.value.__cause__, ZeroDivisionError)


def test_generator_callable_is_read(tmp_path: Path) -> None:
    assert len(user_cases(lambda: ({"x": i} for i in range(3)), tmp_path)) == 3


@pytest.mark.parametrize("content, pattern", [
    (npz_member(np.ones(3)), r"in\.npz: it holds one array, not an \.npz archive"),
    (b"PK\x03\x04 not really", r"cannot read inputs file .*in\.npz"),
    (b"", r"cannot read inputs file .*in\.npz"),
])
def test_inputs_files_that_are_no_npz(tmp_path: Path, content: bytes, pattern: str) -> None:
    (tmp_path / "in.npz").write_bytes(content)
    with pytest.raises(EdgeUsageError, match=pattern):
        user_cases("in.npz", tmp_path)


def test_shapes_naming_an_unknown_input_lists_the_model_inputs() -> None:
    specs = [TensorSpec("image", (1, 3, "h", "w"), "float32"), TensorSpec("scale", (1,), "float32")]
    check_shapes({"image": (1, 3, 8, 8)}, specs, "golden for m")
    with pytest.raises(EdgeUsageError, match=r"golden for m: shapes= names 'img', which the model does not "
                                             r"have; its inputs are \['image', 'scale'\]"):
        check_shapes({"img": (1, 3, 8, 8)}, specs, "golden for m")


def test_unknown_signature_dtype_is_a_usage_error() -> None:
    with pytest.raises(EdgeUsageError, match=r"input 'x' has dtype 'scalar_type_15'"):
        generate_case([TensorSpec("x", (1,), "scalar_type_15")], {}, 0)


# ---------------------------------------------------------------- comparison against a bad golden


def test_nan_golden_is_reported_not_turned_into_a_nan_tolerance() -> None:
    expected = np.array([1.0, np.nan, 3.0], np.float32)
    (problem,) = compare_output("y", expected, np.array([1.0, 2.0, 3.0], np.float32),
                                Tolerance(atol=1e-4, rtol=0.0)).problems
    assert "golden output 'y' has 1 NaN and 0 Inf of 3 elements" in problem
    assert "would pass with" not in problem and "=nan" not in problem
    need = needed_tolerances(expected, np.array([1.0, 2.0, 3.0], np.float32), 0.0, 0.0)
    assert need == (math.inf, math.inf)
    assert needed_tolerances(np.array([np.inf, 1.0]), np.array([np.inf, 1.5]), 0.0, 0.0) == (0.5, 0.5)


# ---------------------------------------------------------------- artifacts on the real runtimes


def _load(backend: str, path: Path) -> None:
    """Load in a worker process, as the plugin does: a runtime that crashes natively on bad bytes
    (tflite-runtime 2.14 on a truncated model) fails this load, not the test process."""
    reason = get_backend(backend).unavailable_reason()
    if reason:
        pytest.skip(reason)
    worker = BackendWorker(backend)
    try:
        worker.call("load", "m", str(path), 1, {}, artifact=str(path))
    finally:
        worker.close()


def _lfs_pointer() -> bytes:
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 5520\n"


TFLITE_CASES = [
    ("empty", lambda data: b"", r"is empty \(0 bytes\)"),
    ("onnx bytes", lambda data: (FIXTURES / "tiny_mlp.onnx").read_bytes(),
     r"is not a TFLite flatbuffer: .* \(bytes 4-8 are b'pyte', a \.tflite has b'TFL3'\)"),
    # ai-edge-litert's verifier refuses it; tflite-runtime 2.14 has no verifier and crashes natively
    ("truncated", lambda data: data[: len(data) // 2],
     r"is not a valid TFLite flatbuffer: .*truncated or corrupt|runtime crashed \(signal SIG"),
    ("lfs pointer", lambda data: _lfs_pointer(), r"is a Git LFS pointer \(\d+ bytes\), not the model"),
]


@pytest.mark.parametrize("backend", ["litert", "litert-ref"])
@pytest.mark.parametrize("what, make, pattern", TFLITE_CASES, ids=[c[0] for c in TFLITE_CASES])
def test_bad_tflite_bytes(tmp_path: Path, backend: str, what: str, make: Any, pattern: str) -> None:
    path = tmp_path / "model.tflite"
    path.write_bytes(make((FIXTURES / "tiny_mlp.tflite").read_bytes()))
    if what == "truncated" and get_backend(backend).distribution == "tflite-runtime":
        # tflite-runtime 2.14 has no flatbuffer verifier: a truncated model may load (docs/design.md, Known
        # limits) or crash its worker; either way this process and its session go on.
        try:
            _load(backend, path)
        except BackendError as exc:
            assert str(path) in str(exc)
        return
    with pytest.raises(BackendError, match=pattern) as error:
        _load(backend, path)
    assert str(path) in str(error.value)


def _corrupt_body(data: bytes) -> bytes:
    out = bytearray(data)
    out[48:600] = b"\xff" * (600 - 48)  # header intact, program tables garbage
    return bytes(out)


PTE_CASES = [
    ("empty", lambda data: b"", r"is empty \(0 bytes\)"),
    ("onnx bytes", lambda data: (FIXTURES / "tiny_mlp.onnx").read_bytes(),
     r"is not an ExecuTorch program: bytes 4-8 are b'pyte', a \.pte has the file identifier b'ET12'"),
    ("truncated", lambda data: data[:2000], r"is truncated: its header says \d+ bytes, the file has 2000"),
    ("corrupt body", _corrupt_body,
     r"ExecuTorch could not load .*: Failed to load program, error: 0x:23 \(Error::InvalidProgram: error "
     r"caused by the contents of the program"),
    ("lfs pointer", lambda data: _lfs_pointer(), r"is a Git LFS pointer"),
]


@pytest.mark.parametrize("what, make, pattern", PTE_CASES, ids=[c[0] for c in PTE_CASES])
def test_bad_pte_bytes(tmp_path: Path, what: str, make: Any, pattern: str) -> None:
    path = tmp_path / "model.pte"
    path.write_bytes(make((FIXTURES / "tiny_mlp.pte").read_bytes()))
    with pytest.raises(BackendError, match=pattern) as error:
        _load("executorch", path)
    assert str(path) in str(error.value)


def test_pte_with_non_utf8_identifier_does_not_abort_the_process(tmp_path: Path) -> None:
    """executorch 1.5 logs the identifier it found; non-UTF-8 bytes there abort the process from
    inside pybind11. Run in a child process, so a regression fails this test, not the session."""
    if get_backend("executorch").unavailable_reason():
        pytest.skip(get_backend("executorch").unavailable_reason())
    path = tmp_path / "model.pte"
    path.write_bytes(b"\x00\x00\x00\x00\xe9\xf1\xff\xfe" + bytes(range(256)))
    # The runtime imported as a worker imports it (without the exporter: 1 s, not 5).
    script = ("import sys\nfrom pytest_edge.backends import get_backend\nbackend = get_backend('executorch')\n"
              "backend.import_runtime()\n"
              "try:\n    backend.load(sys.argv[1], threads=1, shapes={})\n"
              "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"BackendError {path} is not an ExecuTorch program" in result.stdout


def test_executorch_error_codes_are_named() -> None:
    assert explain_error("Failed to load method forward, error: 0x:14").endswith(
        "(Error::OperatorMissing: operator(s) missing in the operator registry: this executorch build lacks "
        "kernels the .pte calls)")
    assert "Error::InvalidArgument" in explain_error("Failed to execute method forward, error: 0x12")
    assert "Error::Unknown" in explain_error("error: 0x:7f")
    assert explain_error("no code here") == "no code here"


def test_a_pte_whose_vectors_point_at_each_other_is_refused_quickly() -> None:
    """8 KB of flatbuffer whose 1000 chains all point at one chain of 1000 instructions would read
    as 10**6 kernel calls (25 s in the pytest process, time and memory growing as the square of the
    file): the reader's budget of entries, one per 4-byte word of the file, stops it."""
    flatbuffers = pytest.importorskip("flatbuffers")
    from pytest_edge.backends.executorch.program import UNREADABLE, read_plans

    count = 1000
    b = flatbuffers.Builder(0)
    name = b.CreateString("llama::custom_sdpa")
    b.StartObject(2), b.PrependUOffsetTRelativeSlot(0, name, 0)
    op = b.EndObject()
    b.StartVector(4, 0, 4), b.PrependInt32(0)
    args = b.EndVector()
    b.StartObject(2), b.PrependInt32Slot(0, 0, -1), b.PrependUOffsetTRelativeSlot(1, args, 0)
    call = b.EndObject()
    b.StartObject(2), b.PrependUint8Slot(0, 1, 0), b.PrependUOffsetTRelativeSlot(1, call, 0)
    instruction = b.EndObject()
    vectors = []
    for _ in range(2):  # the instructions of one chain, then the chains, each entry the same offset
        b.StartVector(4, count, 4)
        for _ in range(count):
            b.PrependUOffsetTRelative(instruction)
        vectors.append(b.EndVector())
        b.StartObject(4), b.PrependUOffsetTRelativeSlot(2, vectors[-1], 0)
        instruction = b.EndObject()  # the chain, which the next vector repeats
    b.StartVector(4, 1, 4), b.PrependUOffsetTRelative(op)
    operators = b.EndVector()
    forward = b.CreateString("forward")
    b.StartObject(9), b.PrependUOffsetTRelativeSlot(0, forward, 0)
    b.PrependUOffsetTRelativeSlot(5, vectors[1], 0), b.PrependUOffsetTRelativeSlot(6, operators, 0)
    plan = b.EndObject()
    b.StartVector(4, 1, 4), b.PrependUOffsetTRelative(plan)
    plans = b.EndVector()
    b.StartObject(3), b.PrependUOffsetTRelativeSlot(1, plans, 0)
    b.Finish(b.EndObject(), file_identifier=b"ET12")
    data = bytes(b.Output())
    assert len(data) < 10_000
    with pytest.raises(UNREADABLE, match="more entries than the file has words"):
        read_plans(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8))
def test_delegate_coverage_of_a_damaged_pte_is_a_figure_or_an_unreadable_error(edits: list[tuple[int, int]]) -> None:
    """The coverage reader follows the delegate calls into their payloads (inline or in segments
    after the flatbuffer): damaged bytes anywhere give a figure or one of the reader's errors,
    never another exception or a read past the file."""
    from pytest_edge.backends.executorch.coverage import pte_coverage
    from pytest_edge.backends.executorch.program import UNREADABLE

    data = bytearray((FIXTURES / "tiny_cnn.pte").read_bytes())
    for position, value in edits:
        data[position % len(data)] = value
    try:
        coverage = pte_coverage(bytes(data))
    except UNREADABLE:
        return
    assert 0 <= coverage.delegated_ops <= coverage.total_ops


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6))
def test_a_damaged_ethos_u_pte_is_a_backend_error_naming_it(tmp_path_factory: pytest.TempPathFactory,
                                                             edits: list[tuple[int, int]]) -> None:
    """An Ethos-U program with damaged bytes (its flatbuffer, its compile specs, vela's blocks) reads
    as its delegates or fails as a BackendError naming the file (found: an unbalanced quote in the
    compile flags escaped as shlex's ValueError)."""
    from pytest_edge.backends.ethos_u.pte import read_program
    from pytest_edge.errors import BackendError

    data = bytearray((FIXTURES / "npu/select_mlp_ethos_u55.pte").read_bytes())
    for position, value in edits:
        data[position % len(data)] = value
    path = tmp_path_factory.mktemp("ethos") / "damaged.pte"
    path.write_bytes(bytes(data))
    try:
        read_program(path)
    except BackendError as error:
        assert str(path) in str(error)
