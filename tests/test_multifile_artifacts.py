"""Artifacts made of several files, as their exporters write them (fixtures/make_multifile.py): a GGUF
split in shards (``model-00001-of-00002.gguf`` + ``-00002-of-00002.gguf``, gguf-py's writer as
llama.cpp's gguf-split names them) and an ExecuTorch program with its weights in a ``.ptd``
(``external_constants=True``). Like an ``.onnx`` with its ``.onnx.data``, every file is hashed into
the artifact's identity (goldens' provenance and staleness, acceptances), shipped to a device and
confined to the artifact's folder (core/external_data.py)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from edge_helpers import FIXTURES

from pytest_edge.core.external_data import external_files, identity_files
from pytest_edge.errors import BackendError

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

MULTIFILE = FIXTURES / "multifile"
SHARDS = ("model-00001-of-00002.gguf", "model-00002-of-00002.gguf")
LLAMA_CPP = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
EXECUTORCH = pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed")


def test_every_file_of_a_split_gguf_and_of_a_program_with_its_ptd_is_the_artifact(tmp_path: Path) -> None:
    split = MULTIFILE / "gguf_split"
    assert list(identity_files(split / SHARDS[0])) == list(SHARDS)
    assert list(identity_files(MULTIFILE / "tiny_mlp_ext.pte")) == ["tiny_mlp_ext.pte", "tiny_mlp_ext.ptd"]
    assert list(identity_files(FIXTURES / "tiny_mlp.pte")) == ["tiny_mlp.pte"]  # self-contained
    with pytest.raises(BackendError, match=r"model-00002-of-00002\.gguf \(llama\.cpp\): shard 2 of a GGUF split in 2: "
                                           r"name the first, model-00001-of-00002\.gguf"):
        external_files(split / SHARDS[1], "llama.cpp")
    from pytest_edge.backends.llama_cpp.gguf import from_gguf
    from pytest_edge.errors import EdgeUsageError

    with pytest.raises(EdgeUsageError, match=r"shard 2 of a GGUF split in 2: name the first"):
        from_gguf(split / SHARDS[1])  # its configuration is the first's: not 'lacks general.architecture'

    (tmp_path / SHARDS[0]).write_bytes((split / SHARDS[0]).read_bytes())  # its second shard not copied
    with pytest.raises(BackendError, match=rf"llama\.cpp: .*{SHARDS[0]} keeps its weights in the external data file "
                                           rf".*{SHARDS[1]}, which is missing"):
        external_files(tmp_path / SHARDS[0], "llama.cpp")


def test_a_device_bundle_holds_the_artifact_under_its_own_name(tmp_path: Path) -> None:
    """A split GGUF's first shard names the others (llama.cpp derives their names from its own), so
    on a device the bundle holds it by its name, not only by its content name."""
    import hashlib

    from pytest_edge.worker.artifact_cache import ArtifactCache

    cache = ArtifactCache(tmp_path / "cache")
    names = {}
    for shard in SHARDS:
        payload = (MULTIFILE / "gguf_split" / shard).read_bytes()
        names[shard] = hashlib.sha256(payload).hexdigest() + (".gguf" if shard == SHARDS[0] else ".data")
        cache.put(names[shard], payload)
    path = cache.model(names[SHARDS[0]], {SHARDS[1]: names[SHARDS[1]], SHARDS[0]: names[SHARDS[0]]})
    assert path.name == SHARDS[0] and (path.parent / SHARDS[1]).is_file()


def _worker_command(cache: Path) -> str:
    return f"env PYTEST_EDGE_CACHE={shlex.quote(str(cache))} {shlex.quote(sys.executable)} -m pytest_edge.worker --stdio"


@LLAMA_CPP
@EXECUTORCH
def test_multifile_artifacts_run_here_and_on_a_device_and_a_changed_part_is_named(pytester: pytest.Pytester) -> None:
    """Both run on this machine and on a command device (shipped there, every file), their goldens
    record every file; a changed ``.ptd`` or second shard alone makes the golden stale, named."""
    models = pytester.path / "models"
    shutil.copytree(MULTIFILE, models)
    cache = pytester.path / "device-cache"
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n"
                     f"edge_devices =\n    board = {_worker_command(cache)}\n")
    pytester.makepyfile(test_multifile="""
        import numpy as np, pytest

        @pytest.mark.edge(model="tiny_mlp_ext", backends=["executorch", "executorch@board"])
        def test_program(edge_model):
            assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)

        @pytest.mark.edge_llm(model="gguf_split", prompts=[[1, 2, 3, 4]], new_tokens=4,
                              backends=["llama.cpp", "llama.cpp@board"])
        def test_split(edge_llm):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=4)
    meta = json.loads((pytester.path / "golden" / "tiny_mlp_ext" / "meta.json").read_text())
    assert sorted(meta["artifacts"]) == ["tiny_mlp_ext.ptd", "tiny_mlp_ext.pte"]
    shipped = {p.name for p in (cache / "bundles").rglob("*") if p.is_file()}  # by name, beside content names
    assert {*SHARDS, "tiny_mlp_ext.ptd", "tiny_mlp_ext.pte"} <= shipped

    # One weight of the .ptd and the last bytes of the second shard (tensor data) changed.
    for path in (models / "tiny_mlp_ext.ptd", models / "gguf_split" / SHARDS[1]):
        data = bytearray(path.read_bytes())
        data[-8:] = bytes(8 - i for i in range(8))
        path.write_bytes(bytes(data))
    result = pytester.runpytest_inprocess("-rA")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 0, result.stdout.str()
    text = result.stdout.str()
    assert "tiny_mlp_ext.ptd" in text and SHARDS[1] in text


@LLAMA_CPP
def test_a_split_gguf_missing_a_shard_is_one_tests_error_naming_it(pytester: pytest.Pytester) -> None:
    shutil.copytree(MULTIFILE / "gguf_split", pytester.path / "models" / "split")
    (pytester.path / "models" / "split" / SHARDS[1]).unlink()
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    pytester.makepyfile(test_split="""
        import pytest

        @pytest.mark.edge_llm(model="split/model-00001-of-00002.gguf", prompts=[[1, 2, 3]], new_tokens=2,
                              backends=["llama.cpp"])
        def test_split(edge_llm):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 0 and outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1
    result.stdout.fnmatch_lines([f"*llama.cpp: *{SHARDS[0]} keeps its weights in the external data file "
                                 f"*{SHARDS[1]}, which is missing*"])
