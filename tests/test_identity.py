"""A model is known by its place, not its file stem (SPEC section 2): two models with one file name
keep two goldens, two A/B twins and two report rows; a key two places share is an error naming both;
an existing project's goldens at the stem's old place keep working; a merge gate that compares
nothing fails, naming what it looked for. Run as users meet it: pytester projects on the real
runtimes, with tensor models (fixtures/tiny_mlp.onnx and a copy with other weights) and ONNX Runtime
GenAI exports (fixtures/llm, each folder's decoder named model.onnx by the builder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edge_helpers import FIXTURES

from pytest_edge.errors import EdgeUsageError
from pytest_edge.files import sha256_file

pytest.importorskip("onnxruntime")
ORT = "onnxruntime-cpu"
LLM = FIXTURES / "llm"

TWO_NETS = f"""
import pytest

@pytest.mark.edge(model="a/net", backends=["{ORT}"])
def test_a(edge_model):
    pass

@pytest.mark.edge(model="b/net", backends=["{ORT}"])
def test_b(edge_model):
    pass
"""


def _other_weights(source: Path, target: Path) -> None:
    """``source`` with every float weight moved by 0.5: the same graph, other outputs."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(array + np.float32(0.5), init.name))
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))


@pytest.fixture
def two_nets(pytester: pytest.Pytester) -> Path:
    """a/net.onnx and b/net.onnx: two models, one file name, other weights."""
    (pytester.path / "a").mkdir()
    shutil.copy(FIXTURES / "tiny_mlp.onnx", pytester.path / "a" / "net.onnx")
    _other_weights(FIXTURES / "tiny_mlp.onnx", pytester.path / "b" / "net.onnx")
    pytester.makeini("[pytest]\nedge_processes = 1\n")
    pytester.makepyfile(test_nets=TWO_NETS)
    return pytester.path


def test_the_key_is_the_place_under_the_first_folder_that_holds_it(tmp_path: Path) -> None:
    from pytest_edge.core.models import Model, ModelKeys, resolve_model

    for path in ("models/a/net.onnx", "models/a/net.tflite", "b/net.onnx", "outside/net.onnx"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"x")
    root, models = tmp_path / "project", tmp_path / "models"
    bases = [models, tmp_path]
    a = resolve_model("a/net", [models], [".onnx", ".tflite"], bases)
    assert (a.name, a.key, sorted(a.artifacts)) == ("net", "a/net", [".onnx", ".tflite"])
    assert resolve_model(str(models / "a/net.onnx"), [root], [".onnx"], bases).key == "a/net"  # however named
    assert resolve_model("b/net", [tmp_path], [".onnx"], bases).key == "b/net"
    outside = resolve_model(str(tmp_path / "outside/net.onnx"), [root], [".onnx"], [models, root])
    assert outside.key == "net" and outside.base is None  # outside every folder: its stem
    assert a.twin(a.artifacts[".onnx"], Path("main")) == Path("main/a/net.onnx")
    assert outside.twin(outside.artifacts[".onnx"], Path("main")) == Path("main/net.onnx")
    keys = ModelKeys()
    keys.claim(a)
    keys.claim(resolve_model("a/net.onnx", [models], [".onnx"], bases))  # the same place: the same model
    keys.claim(resolve_model("net", [models / "a"], [".onnx"], [models / "a"]))  # key "net": models/a/net
    with pytest.raises(EdgeUsageError, match=f"two models have the key 'net': {models / 'a' / 'net'} and "
                                             f"{tmp_path / 'outside' / 'net'}"):
        keys.claim(outside)
    assert not keys.sole_of_stem(outside) and Model("x", {}).key == "x"


def _records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["records"]


def test_two_models_with_one_file_name_keep_two_goldens(pytester: pytest.Pytester, two_nets: Path) -> None:
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    metas = {key: json.loads((two_nets / "golden" / key / "meta.json").read_text()) for key in ("a/net", "b/net")}
    assert not (two_nets / "golden" / "net").exists(), "no golden at the shared stem"
    for key, meta in metas.items():
        # Which artifact made it: its path in the project and its sha256.
        assert meta["model"] == key
        assert meta["reference"]["path"] == f"{key}.onnx"
        assert meta["reference"]["sha256"] == sha256_file(two_nets / f"{key}.onnx")
    assert metas["a/net"]["cases"] != metas["b/net"]["cases"], "other weights, other outputs"
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=2)
    assert sorted(r["model"]["name"] for r in _records(two_nets / "r.json")) == ["a/net", "b/net"]
    result.stdout.fnmatch_lines(["*a/net*onnxruntime-cpu*", "*b/net*onnxruntime-cpu*"])  # a row each


def test_a_key_two_places_share_is_an_error_naming_both(pytester: pytest.Pytester, two_nets: Path) -> None:
    # Keys are relative to the edge_model_dirs folder holding the model: a/net.onnx and b/net.onnx are both "net".
    pytester.makeini("[pytest]\nedge_model_dirs = a b\n")
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*two models have the key 'net': {two_nets / 'a' / 'net'} and {two_nets / 'b' / 'net'}*"])
    assert sorted(p.name for p in (two_nets / "golden").iterdir()) == ["net"]
    assert json.loads((two_nets / "golden/net/meta.json").read_text())["reference"]["path"] == "a/net.onnx"


def test_a_golden_at_the_stems_old_place_is_read_until_refreshed(pytester: pytest.Pytester, two_nets: Path) -> None:
    """Goldens written before keys (golden/<stem>/) pass as they are where one model has that stem;
    --edge-update-golden writes the key's place, and the old folder is then reported unused."""
    pytester.makepyfile(test_nets=TWO_NETS.split("@pytest.mark.edge(model=\"b/net\"")[0])  # a only
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    shutil.move(two_nets / "golden/a/net", two_nets / "golden/net")
    shutil.rmtree(two_nets / "golden/a")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    # Another model of that stem in the session: the old folder could be either's, so neither reads it.
    pytester.makepyfile(test_nets=TWO_NETS)
    missing = pytester.runpytest_inprocess()
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines(["*no golden outputs for model 'a/net' (looked for *golden/a/net/meta.json)*"])
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*1 unused golden set: net/default (no test uses this model)*"])


def test_update_never_writes_over_another_models_golden(pytester: pytest.Pytester, two_nets: Path) -> None:
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "test_a").assert_outcomes(passed=1)
    shutil.copytree(two_nets / "golden/a/net", two_nets / "golden/b/net")  # as if b's key had been a's folder
    before = (two_nets / "golden/b/net/meta.json").read_text()
    result = pytester.runpytest_inprocess("--edge-update-golden", "-k", "test_b")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden/b/net was recorded from a/net.onnx, which is not an artifact of b/net "
                                 "(b/net.onnx): --edge-update-golden does not write over another model's golden*"])
    assert (two_nets / "golden/b/net/meta.json").read_text() == before


# ------------------------------------------------------------------ the merge gate compares something

GATE = ("--edge-max-regression=1000%", "-o", "edge_warmup=1", "-o", "edge_runs=5")  # no timing verdict asserted


def test_an_empty_baseline_folder_fails_the_run_naming_it(pytester: pytest.Pytester, two_nets: Path) -> None:
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    (two_nets / "empty").mkdir()
    result = pytester.runpytest_inprocess("--edge-baseline-models=empty", *GATE)
    result.assert_outcomes(passed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*merge gate (A/B against empty): 0 compared, 0 regressed, 0 inconclusive, 2 new "
        "(no twin: empty/a/net.onnx, empty/b/net.onnx)*",
        "*the merge gate compared nothing: --edge-baseline-models empty holds no twin of any tested model "
        "(looked for empty/a/net.onnx, empty/b/net.onnx)*"])


def test_twins_are_found_by_key_and_a_new_model_is_counted(pytester: pytest.Pytester, two_nets: Path) -> None:
    """A twin lies at the model's path under the baseline folder (a/net.onnx: base/a/net.onnx), never at
    another model's file of the same name; a model with no twin is new: listed, not gated."""
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    (two_nets / "base" / "a").mkdir(parents=True)
    shutil.copy(two_nets / "a" / "net.onnx", two_nets / "base" / "a" / "net.onnx")
    shutil.copy(two_nets / "b" / "net.onnx", two_nets / "base" / "net.onnx")  # b's by file name: not its twin
    result = pytester.runpytest_inprocess("--edge-baseline-models=base", "--edge-report=r.json", *GATE)
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*merge gate (A/B against base): 1 compared, 0 regressed, 0 inconclusive, 1 new "
                                 "(no twin: base/b/net.onnx)*"])
    checks = {r["model"]["name"]: r["baseline_check"] for r in _records(two_nets / "r.json")}
    assert checks["a/net"]["baseline"] == "base/a/net.onnx" and checks["a/net"]["verdict"] == "passed"
    assert checks["b/net"] == {"mode": "ab", "new": True, "looked_for": "base/b/net.onnx", "folder": "base",
                               "inconclusive": [], "notes": [], "findings": []}


def test_a_stored_report_with_no_record_of_any_tested_model_fails_naming_it(pytester: pytest.Pytester,
                                                                             two_nets: Path) -> None:
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    pytester.runpytest_inprocess("-k", "test_a", "--edge-measure", "--edge-report=old.json",
                                  *GATE[1:]).assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("-k", "test_b", "--edge-baseline=old.json", *GATE)
    result.assert_outcomes(passed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*the merge gate compared nothing: --edge-baseline old.json holds no record of any "
                                 "tested model (looked for test_nets.py::test_b[[]net-onnxruntime-cpu[]], or b/net on "
                                 "onnxruntime-cpu)*"])


# ------------------------------------------------------------------ decoders: the same keys

def _decoder_test(name: str, model: str, **extra: object) -> str:
    keywords = "".join(f", {k}={v!r}" for k, v in extra.items())
    return f"""
@pytest.mark.edge_llm(model="{model}", prompts=[[1, 2, 3, 4]], new_tokens=4, backends=["{ORT}"]{keywords})
def test_{name}(edge_llm):
    pass
"""


def test_two_genai_exports_named_model_onnx_keep_two_golden_sets(pytester: pytest.Pytester) -> None:
    """ONNX Runtime GenAI's builder names every export model.onnx: its folder is the model."""
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "base")
    shutil.copytree(LLM / "genai_llama_perturbed", pytester.path / "models" / "tuned")
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("base", "models/base/model")
                        + _decoder_test("tuned", "models/tuned/model"))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    golden = pytester.path / "golden"
    assert sorted(str(p.relative_to(golden)) for p in golden.rglob("prompt-*.npz")) == [
        f"models/{name}/llm/{p.name}" for name in ("base", "tuned") for p in (golden / "models/base/llm").iterdir()]
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=2)
    assert sorted(r["model"]["name"] for r in _records(pytester.path / "r.json")) == ["models/base", "models/tuned"]
    from pytest_edge.golden.tokens import read_golden

    (base,), (tuned,) = ((golden / f"models/{n}/llm").iterdir() for n in ("base", "tuned"))
    assert read_golden(base, [1, 2, 3, 4]).meta.path == "models/base/model.onnx"
    assert read_golden(tuned, [1, 2, 3, 4]).meta.path == "models/tuned/model.onnx"
    assert not np.array_equal(read_golden(base, [1, 2, 3, 4]).first_logits,
                              read_golden(tuned, [1, 2, 3, 4]).first_logits)


def test_a_quantized_decoder_is_judged_against_the_float_ones_golden(pytester: pytest.Pytester) -> None:
    """reference= on edge_llm as on edge: the float export's goldens, recorded from the float export;
    the int8 export's outputs never become a golden."""
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "float")
    shutil.copytree(LLM / "genai_llama_int8", pytester.path / "models" / "int8")
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test(
        "int8", "models/int8", reference="models/float", min_token_agreement=0.0, logits_atol=None,
        logits_cosine=0.5))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    golden = pytester.path / "golden"
    assert sorted(str(p.relative_to(golden).parent) for p in golden.rglob("prompt-*.npz")) == ["models/float/llm"]
    from pytest_edge.golden.tokens import read_golden

    (recorded,) = (golden / "models/float/llm").iterdir()
    assert read_golden(recorded, [1, 2, 3, 4]).meta.path == "models/float/model.onnx"
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    # Naming the tested model as its own reference is refused, naming it.
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("self", "models/int8", reference="models/int8"))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*reference='models/int8' names the tested model 'models/int8' itself*"])


def test_a_folder_of_export_folders_gates_each_export_against_its_own_twin(pytester: pytest.Pytester) -> None:
    """main's models/ as the baseline folder: models/base/model.onnx against main/base/model.onnx and
    models/tuned/model.onnx against main/tuned/model.onnx; a decoder's artifact size is gated as a
    tensor model's (base's twin is the int8 export: base grew)."""
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "base")
    shutil.copytree(LLM / "genai_llama_perturbed", pytester.path / "models" / "tuned")
    shutil.copytree(LLM / "genai_llama_int8", pytester.path / "main" / "base")
    shutil.copytree(LLM / "genai_llama_perturbed", pytester.path / "main" / "tuned")
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_processes = 1\n")
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("base", "base", warmup=0, runs=1)
                        + _decoder_test("tuned", "tuned", warmup=0, runs=1))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    # +136 % of bytes fails at 100 %; the timing of one pair stays under it (no timing verdict is asserted).
    result = pytester.runpytest_inprocess("--edge-baseline-models=main", "--edge-report=r.json",
                                           "--edge-max-regression=100%")
    result.assert_outcomes(passed=1, failed=1)
    records = {r["model"]["name"]: r for r in _records(pytester.path / "r.json")}
    assert records["base"]["baseline_check"]["baseline"] == "main/base/model.onnx"
    assert records["tuned"]["baseline_check"]["baseline"] == "main/tuned/model.onnx"
    assert records["tuned"]["verdict"] == "passed"
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: artifact models/base/model.onnx is * bytes (* MB), +*% against "
                                 "the baseline twin * bytes (allowed +100%)*",
                                 "*merge gate (A/B against main): 2 compared, 1 regressed, 0 inconclusive*"])
    (pytester.path / "empty").mkdir()
    nothing = pytester.runpytest_inprocess("--edge-baseline-models=empty")
    nothing.assert_outcomes(passed=2)
    assert nothing.ret == 1
    nothing.stdout.fnmatch_lines(["*the merge gate compared nothing: --edge-baseline-models empty holds no twin of any "
                                  "tested model (looked for empty/base/model.onnx, empty/tuned/model.onnx)*"])


# ------------------------------------------------------------------ decoders as tensor models: devices, patterns

def test_a_decoder_on_a_device_that_cannot_be_reached_is_skipped_unless_required(pytester: pytest.Pytester) -> None:
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "base")
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_devices =\n"
                     "    odd = adb-not-installed-here -s 1234 shell python3 -m pytest_edge.worker --stdio\n")
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("base", "base").replace(
        f'backends=["{ORT}"]', f'backends=["{ORT}", "{ORT}@odd"]'))
    result = pytester.runpytest_inprocess("--edge-update-golden", "-rs", "--edge-report=r.json")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*device odd cannot be reached: its command 'adb-not-installed-here -s 1234 *' "
                                 "cannot be started: *No such file or directory*"])
    assert sorted(r["verdict"] for r in _records(pytester.path / "r.json")) == ["passed", "skipped"]
    pytester.runpytest_inprocess(f"--edge-require={ORT}@odd").assert_outcomes(passed=1, failed=1)


def test_backend_patterns_select_decoder_backends(pytester: pytest.Pytester) -> None:
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "base")
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("base", "base").replace(
        f'backends=["{ORT}"]', 'backends=["onnxruntime-c*"]'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-backends=onnxruntime-*", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*test_base?base-{ORT}? PASSED*"])
    # A tensor-only backend in the run's selection selects no decoder backend (it is no error).
    skipped = pytester.runpytest_inprocess("--edge-backends=openvino", "-rs")
    skipped.assert_outcomes(skipped=1)
    skipped.stdout.fnmatch_lines(["*no LLM backend selected for this test*"])


@pytest.mark.parametrize("selection", ["onnxruntime-genai", "*-genai"])
def test_a_pattern_of_decoder_only_runtimes_skips_a_tensor_test_as_their_name_does(pytester: pytest.Pytester,
                                                                                    selection: str) -> None:
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "base")
    shutil.copy(FIXTURES / "tiny_mlp.onnx", pytester.path / "models" / "tiny_mlp.onnx")
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n")
    pytester.makepyfile(test_both="""
import pytest

@pytest.mark.edge(model="tiny_mlp")
def test_mlp(edge_model):
    pass

@pytest.mark.edge_llm(model="base", prompts=[[1, 2, 3, 4]], new_tokens=4)
def test_base(edge_llm):
    pass
""")
    result = pytester.runpytest_inprocess("--edge-update-golden", f"--edge-backends={selection}", "-rs", "-v")
    result.assert_outcomes(passed=1, skipped=1)  # was an error of the tensor test for the pattern
    result.stdout.fnmatch_lines(["*test_base?base-onnxruntime-genai? PASSED*"])
    result.stdout.fnmatch_lines(["SKIPPED * onnxruntime-genai runs decoder LLMs only (an edge_llm test), "
                                 "not tensor models"])


def test_decoder_goldens_are_listed_reported_unused_and_pruned(pytester: pytest.Pytester) -> None:
    from edge_helpers import run_cli

    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "base")
    shutil.copytree(LLM / "genai_llama_perturbed", pytester.path / "models" / "tuned")
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("base", "base") + _decoder_test("tuned", "tuned"))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    listed = run_cli("golden", "list", cwd=pytester.path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rows = [line for line in listed.stdout.splitlines() if " llm " in line]
    assert len(rows) == 2 and all(f"{ORT}" in row and "model.onnx" in row for row in rows), listed.stdout
    assert "models/base/model.onnx: current" in listed.stdout and "models/tuned/model.onnx: current" in listed.stdout
    # One byte of tuned's external data, its model.onnx the same: stale, by the tensor goldens' rule.
    data = pytester.path / "models/tuned/model.onnx.data"
    weights = bytearray(data.read_bytes())
    weights[len(weights) // 2] ^= 0x01
    data.write_bytes(bytes(weights))
    listed = run_cli("golden", "list", cwd=pytester.path)
    assert "models/tuned/model.onnx: stale (model.onnx.data changed)" in listed.stdout, listed.stdout
    assert "models/base/model.onnx: current" in listed.stdout
    # tuned's test goes: its goldens are named unused at the end of a complete run, then pruned.
    pytester.makepyfile(test_decoders="import pytest\n" + _decoder_test("base", "base"))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 unused golden set: tuned/llm (no test uses this model)*"])
    pruned = run_cli("golden", "prune", cwd=pytester.path)
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert "removed tuned/llm" in pruned.stdout
    assert not (pytester.path / "golden/tuned").exists() and list((pytester.path / "golden/base/llm").iterdir())
