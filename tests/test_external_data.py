"""ONNX external data is part of the artifact: hashed into the golden's provenance, checked for
presence, confined to the model's folder, shipped to devices; and LFS pointers named .onnx.
Runs ONNX Runtime on fixtures/tiny_ext.onnx + tiny_ext.onnx.data (fixtures/make_models.py)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.backends.onnxruntime.external_data import external_locations
from pytest_edge.errors import BackendError
from pytest_edge.core.external_data import external_files, location_problem
from pytest_edge import codec
from pytest_edge.worker import BackendWorker

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
EXT_TEST = """
import numpy as np, pytest

@pytest.mark.edge(model="tiny_ext", backends=[{backends}])
def test_ext(edge_model):
    assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)
"""
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 2951\n"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_edge.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _relocated(folder: Path, location: str) -> Path:
    """A copy of tiny_ext.onnx in ``folder`` whose tensors name their data at ``location``."""
    import onnx

    model = onnx.load(str(FIXTURES / "tiny_ext.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    path = folder / "tiny_ext.onnx"
    onnx.save(model, str(path))
    return path


def test_reader_finds_what_onnx_finds_in_every_fixture() -> None:
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    for path in sorted(FIXTURES.glob("*.onnx")):
        model = onnx.load(str(path), load_external_data=False)
        expected = list(dict.fromkeys(ExternalDataInfo(t).location for t in _get_all_tensors(model)
                                      if uses_external_data(t)))
        assert list(external_locations(path)) == expected, path
    assert external_locations(FIXTURES / "tiny_ext.onnx") == ("tiny_ext.onnx.data",)
    assert external_files(FIXTURES / "tiny_ext.onnx") == {"tiny_ext.onnx.data": FIXTURES / "tiny_ext.onnx.data"}


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "weights/../../outside.bin",
                                      "C:\\weights.bin", "..\\outside.bin"])
def test_location_outside_the_folder_is_refused_unread(tmp_path: Path, location: str) -> None:
    (tmp_path / "outside.bin").write_bytes((FIXTURES / "tiny_ext.onnx.data").read_bytes())  # would load
    folder = tmp_path / "models"
    folder.mkdir()
    model = _relocated(folder, location)
    assert location_problem(location)
    with pytest.raises(BackendError, match="refused, not read") as error:
        external_files(model, "onnxruntime-cpu")
    assert str(model) in str(error.value) and repr(location) in str(error.value)
    assert str(error.value).startswith("onnxruntime-cpu: ")
    # A location inside the folder, in a subfolder, is the model's own.
    inside = _relocated(folder, "weights/w.bin")
    (folder / "weights").mkdir()
    (folder / "weights/w.bin").write_bytes((FIXTURES / "tiny_ext.onnx.data").read_bytes())
    assert external_files(inside) == {"weights/w.bin": folder / "weights/w.bin"}


def test_escaping_location_fails_the_test_before_the_runtime_reads(pytester: pytest.Pytester, models: Path) -> None:
    (models / "tiny_ext.onnx.data").rename(pytester.path / "tiny_ext.onnx.data")
    _relocated(models, "../tiny_ext.onnx.data")  # where ONNX Runtime would find the weights
    pytester.makepyfile(EXT_TEST.format(backends='"onnxruntime-cpu"'))
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*names external data at '../tiny_ext.onnx.data', which has a '..' component: "
                                 "refused, not read*"])


def test_data_change_makes_the_golden_stale_and_golden_list_says_so(pytester: pytest.Pytester,
                                                                    models: Path) -> None:
    pytester.makepyfile(EXT_TEST.format(backends='"onnxruntime-cpu"'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    meta = (pytester.path / "golden/tiny_ext/meta.json").read_text()
    data = models / "tiny_ext.onnx.data"
    assert hashlib.sha256(data.read_bytes()).hexdigest() in meta
    listed = _cli("golden", "list", cwd=pytester.path)
    assert listed.returncode == 0 and "tiny_ext.onnx: current" in listed.stdout, listed.stdout + listed.stderr
    assert "tiny_ext.onnx.data" in listed.stdout  # the recorded provenance shows the weights file
    # The weights scaled by 1.5 in the .data file alone; the .onnx is byte for byte the same.
    onnx_bytes = (models / "tiny_ext.onnx").read_bytes()
    data.write_bytes((np.frombuffer(data.read_bytes(), np.float32) * 1.5).tobytes())
    assert (models / "tiny_ext.onnx").read_bytes() == onnx_bytes
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden for 'tiny_ext' is stale: the external data file *tiny_ext.onnx.data of "
                                 "tiny_ext.onnx has sha256 *"])
    listed = _cli("golden", "list", cwd=pytester.path)
    assert "tiny_ext.onnx: stale" in listed.stdout, listed.stdout + listed.stderr
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    assert "tiny_ext.onnx: current" in _cli("golden", "list", cwd=pytester.path).stdout


def test_missing_data_file_is_a_clear_error(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(EXT_TEST.format(backends='"onnxruntime-cpu"'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    (models / "tiny_ext.onnx.data").unlink()
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*onnxruntime-cpu: {models / 'tiny_ext.onnx'} keeps its weights in the external "
                                 f"data file {models / 'tiny_ext.onnx.data'}, which is missing*"])
    assert "INVALID_PROTOBUF" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_a_sparse_data_file_is_refused_unread_in_seconds(pytester: pytest.Pytester, models: Path) -> None:
    """64 GiB apparent, nothing on disk: refused before the pytest process hashes it (it read the
    zeros for 99 s and more) and before a runtime maps it; the golden of the real file is kept."""
    pytester.makepyfile(EXT_TEST.format(backends='"onnxruntime-cpu"'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    data = models / "tiny_ext.onnx.data"
    data.unlink()
    with open(data, "wb") as handle:
        handle.truncate(64 * 2**30)
    if data.stat().st_blocks * 512 * 8 >= data.stat().st_size:
        pytest.skip("this filesystem does not keep sparse files")
    result = pytester.runpytest_subprocess(timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*onnxruntime-cpu: {data} is sparse: 64.0 GiB apparent, 0.0 MiB on disk; a "
                                 "model's weights are written whole, so it is refused unread*"])


def test_device_receives_the_data_beside_the_model(pytester: pytest.Pytester, models: Path) -> None:
    cache = pytester.path / "device-cache"
    command = f"env PYTEST_EDGE_CACHE={cache} {sys.executable} -m pytest_edge.worker --stdio"
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_devices =\n    board = {command}\n")
    pytester.makepyfile(EXT_TEST.format(backends='"onnxruntime-cpu", "onnxruntime-cpu@board"'))
    # The golden comes from this machine; the device's outputs must match it: it ran the real weights.
    result = pytester.runpytest_inprocess("--edge-update-golden", "-v")
    result.assert_outcomes(passed=2)
    data_sha = hashlib.sha256((models / "tiny_ext.onnx.data").read_bytes()).hexdigest()
    assert (cache / f"{data_sha}.data").is_file()
    (bundle,) = (cache / "bundles").iterdir()
    assert (bundle / "tiny_ext.onnx.data").read_bytes() == (models / "tiny_ext.onnx.data").read_bytes()
    onnx_sha = hashlib.sha256((models / "tiny_ext.onnx").read_bytes()).hexdigest()
    assert (bundle / f"{onnx_sha}.onnx").read_bytes() == (models / "tiny_ext.onnx").read_bytes()
    assert (bundle / f"{onnx_sha}.onnx").stat().st_ino == (cache / f"{onnx_sha}.onnx").stat().st_ino  # a link


def test_device_worker_refuses_an_escaping_location(tmp_path: Path) -> None:
    """The device checks the location itself: a host can never make it write outside its bundle."""
    from pytest_edge.worker import WorkerServer

    server = WorkerServer("onnxruntime-cpu", cache_dir=tmp_path)
    model, data = (FIXTURES / "tiny_ext.onnx").read_bytes(), (FIXTURES / "tiny_ext.onnx.data").read_bytes()
    names = [hashlib.sha256(model).hexdigest() + ".onnx", hashlib.sha256(data).hexdigest() + ".data"]
    server.op_put(names[0], np.frombuffer(model, np.uint8))
    server.op_put(names[1], np.frombuffer(data, np.uint8))
    with pytest.raises(PermissionError, match="'../x.data' has a '..' component: refused"):
        server.op_load("k", names[0], 1, {}, external={"../x.data": names[1]})
    assert not (tmp_path / "x.data").exists()
    loaded = codec.to_json(server.op_load("k", names[0], 1, {}, external={"tiny_ext.onnx.data": names[1]}))
    assert loaded["outputs"][0]["name"] == "y"


# ---------------------------------------------------------------- Git LFS pointers named .onnx


def test_lfs_pointer_onnx_is_named_as_one(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(LFS_POINTER)
    worker = BackendWorker("onnxruntime-cpu")
    try:
        with pytest.raises(BackendError, match=r"is a Git LFS pointer \(\d+ bytes\), not the model; run git lfs pull"):
            worker.call("load", "m", str(path), 1, {}, artifact=str(path))
        path.write_bytes(b"")
        with pytest.raises(BackendError, match=r"is empty \(0 bytes\)"):
            worker.call("load", "m2", str(path), 1, {}, artifact=str(path))
    finally:
        worker.close()


def test_golden_list_says_lfs_pointer_not_stale(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(EXT_TEST.format(backends='"onnxruntime-cpu"').replace("tiny_ext", "tiny_mlp")
                        .replace('backends=["onnxruntime-cpu"]', 'backends=["onnxruntime-cpu", "litert"]'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    (models / "tiny_mlp.onnx").write_bytes(LFS_POINTER)
    listed = _cli("golden", "list", cwd=pytester.path)
    assert "tiny_mlp.onnx: LFS pointer (run git lfs pull)" in listed.stdout, listed.stdout + listed.stderr
    result = pytester.runpytest_inprocess("-k", "onnxruntime")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*tiny_mlp.onnx is a Git LFS pointer (* bytes), not the model; run git lfs pull*"])
