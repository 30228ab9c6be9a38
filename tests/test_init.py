"""``pytest-edge init``: a project with artifacts is configured, gets a first test per model and its
goldens, and ``pytest`` is green right after; nothing the user wrote is overwritten."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edge_helpers import FIXTURES, onnx_only_outcomes

from pytest_edge.backends import compile_targets
from pytest_edge.cli.first_tests import Traits, first_test_source
from pytest_edge.cli.init import find_models
from pytest_edge.cli.pytest_config import configured_text

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


# int8 outputs: one quantization step; int8 arithmetic with float outputs: an SNR floor.
# A quantized variant beside its float model (clean_mlp_int8, clean_mlp_qdq by clean_mlp): against the
# float model's golden, by SNR.
EXPECTED_CHECKS = {"quant_probe_int8": ", atol=1)", "tiny_cnn_int8": ', reference="tiny_cnn", min_snr_db=20)',
                   "clean_mlp_int8": ', reference="clean_mlp", min_snr_db=20)',
                   "clean_mlp_qdq": ', reference="clean_mlp", min_snr_db=20)',
                   "outlier_mlp_int8": ', reference="outlier_mlp", min_snr_db=20)',
                   "outlier_mlp_qdq": ', reference="outlier_mlp", min_snr_db=20)'}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_edge.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_init_makes_a_project_with_the_fixtures_green(pytester: pytest.Pytester, models: Path) -> None:
    (pytester.path / "tox.ini").unlink()  # the models fixture configures the project (makeini): init does here
    venv = pytester.path / ".venv/lib/site-packages/somepkg"
    venv.mkdir(parents=True)
    (venv / "vendored.onnx").write_bytes((models / "tiny_mlp.onnx").read_bytes())  # not the project's
    done = _cli("init", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (pytester.path / "pytest.ini").read_text() == "[pytest]\nedge_model_dirs = models\n"
    source = (pytester.path / "tests/test_edge_models.py").read_text()
    stems = sorted({p.stem for p in models.iterdir() if p.suffix in (".onnx", ".tflite", ".pte")})
    assert [line for line in source.splitlines() if line.startswith("@pytest.mark.edge") and "backends=" not in line
            ] == [f"@pytest.mark.edge(model={json.dumps(stem)}" + EXPECTED_CHECKS.get(stem, ")") for stem in stems]
    # An int8 .tflite gets a test on the NPU targets installed here (vela's: compile-time), no other model.
    targets = sorted(n for n, b in compile_targets().items() if b.compile_only and b.unavailable_reason() is None)
    npu = re.findall(r'@pytest.mark.edge\(model="(\w+)", backends=(\[.*\])\)', source)
    assert all("int8" in model and json.loads(named) == targets for model, named in npu), npu
    assert ("quant_probe_int8" in dict(npu)) == bool(targets)
    if targets:
        assert f"int8 model(s) compiled for the NPU targets {', '.join(targets)}" in done.stdout
    assert "vendored" not in source
    # conv_dynhw's height and width are the user's to choose: skipped with the reason, not guessed.
    assert "@pytest.mark.skip(reason=\"conv_dynhw: dynamic input dimensions ('x': [1, 3, 'height', 'width'])" in source
    # So are the third-party networks exported with dynamic height and width (mobilenet_v2, cumsum_cnn).
    dynamic = set(re.findall(r'@pytest.mark.skip\(reason="(\w+): dynamic input dimensions', source))
    assert {"conv_dynhw", "mobilenet_v2", "cumsum_cnn"} <= dynamic
    # A variant checked against its float model's golden has none of its own.
    assert sorted(p.name for p in (pytester.path / "golden").iterdir()) == [
        s for s in stems if s not in dynamic and "reference=" not in EXPECTED_CHECKS.get(s, "")]
    result = pytester.runpytest_inprocess("-rs")
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and not outcomes.get("failed") and not outcomes.get("errors"), result.stdout.str()
    assert outcomes["passed"] >= len(stems) - len(dynamic)
    result.stdout.fnmatch_lines(["*conv_dynhw: dynamic input dimensions*give their sizes with shapes=*"])
    # Run again: refused, nothing touched.
    again = _cli("init", cwd=pytester.path)
    assert again.returncode == 2 and "sets edge_model_dirs already: this project is configured" in again.stderr
    assert (pytester.path / "tests/test_edge_models.py").read_text() == source


def test_init_writes_into_the_existing_pyproject_table(pytester: pytest.Pytester) -> None:
    (pytester.path / "exported").mkdir()
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    for name in ("tiny_ext.onnx", "tiny_ext.onnx.data"):
        (pytester.path / "exported" / name).write_bytes((fixtures / name).read_bytes())
    pyproject = '[project]\nname = "kws"\n\n[tool.pytest.ini_options]  # ours\naddopts = "-ra"\n\n[tool.other]\nx = 1\n'
    (pytester.path / "pyproject.toml").write_text(pyproject)
    done = _cli("init", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    config = tomllib.loads((pytester.path / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"] == {"addopts": "-ra", "edge_model_dirs": ["exported"]}
    assert config["project"] == {"name": "kws"} and config["tool"]["other"] == {"x": 1}
    assert (pytester.path / "golden/tiny_ext/meta.json").is_file()
    pytester.runpytest_inprocess().assert_outcomes(**onnx_only_outcomes())  # no .tflite, no .pte


def test_init_refuses_to_overwrite_the_test_file_and_needs_models(pytester: pytest.Pytester) -> None:
    done = _cli("init", cwd=pytester.path)
    assert done.returncode == 2 and "no .onnx/.tflite/.pte artifact under" in done.stderr
    assert not (pytester.path / "pytest.ini").exists()
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    (pytester.path / "tiny_mlp.onnx").write_bytes((fixtures / "tiny_mlp.onnx").read_bytes())
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests/test_edge_models.py").write_text("# mine\n")
    done = _cli("init", "--no-golden", cwd=pytester.path)
    assert done.returncode == 2 and "test_edge_models.py exists: pytest-edge init does not overwrite it" in done.stderr
    assert (pytester.path / "tests/test_edge_models.py").read_text() == "# mine\n"
    assert not (pytester.path / "pytest.ini").exists(), "nothing written when refused"


@pytest.mark.parametrize("name, text, expected", [
    ("tox.ini", "[tox]\nenvlist = py\n\n[pytest]\naddopts = -q\n",
     "[tox]\nenvlist = py\n\n[pytest]\nedge_model_dirs = models\naddopts = -q\n"),
    ("setup.cfg", "[metadata]\nname = x\n[tool:pytest]\n",
     "[metadata]\nname = x\n[tool:pytest]\nedge_model_dirs = models\n"),
    ("pytest.ini", "", "[pytest]\nedge_model_dirs = models\n"),
    ("pytest.toml", "[pytest]\naddopts = [\"-q\"]\n", "[pytest]\nedge_model_dirs = [\"models\"]\naddopts = [\"-q\"]\n"),
])
def test_configuration_goes_where_pytest_reads_it(tmp_path: Path, name: str, text: str, expected: str) -> None:
    (tmp_path / name).write_text(text)
    assert configured_text(tmp_path / name, tmp_path, ["models"]) == (tmp_path / name, expected)


def test_pyproject_without_a_pytest_table_gets_one(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"')
    path, text = configured_text(None, tmp_path, ["models", "more models"])
    assert path == tmp_path / "pyproject.toml"
    assert tomllib.loads(text) == {"project": {"name": "x"},
                                   "tool": {"pytest": {"ini_options": {"edge_model_dirs": ["models", "more models"]}}}}


def test_models_found_and_named(tmp_path: Path) -> None:
    for relative in ("a/kws.onnx", "a/kws.tflite", "b/kws.pte", "c/net-v2.onnx", "node_modules/x.onnx",
                     "env2/y.onnx", ".git/z.onnx", "c/notes.txt"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(b"x")
    (tmp_path / "env2/pyvenv.cfg").write_text("home = /usr\n")  # a virtual environment by another name
    found = find_models(tmp_path)
    assert found.dirs == ["a", "c"] and found.models == ["kws", "net-v2"]
    assert found.ignored == ["b/kws"]  # a stem names one model (and its golden folder): the first one found
    source = first_test_source(found.models, {"net-v2": Traits(dynamic="'x': [1, 'n']"),
                                              "kws": Traits(int8_outputs=["logits"])})
    assert "# 'logits': int8/uint8 outputs, which kernels may round one quantization step apart\n" \
           "@pytest.mark.edge(model=\"kws\", atol=1)\n" in source
    assert "def test_kws(edge_model)" in source and "def test_net_v2(edge_model)" in source
    assert "@pytest.mark.skip(reason=\"net-v2: dynamic input dimensions ('x': [1, 'n'])" in source
    compile(source, "test_edge_models.py", "exec")


@pytest.mark.parametrize("variant", ["kws_int8", "kws-qdq", "kws_q8", "kws_int8_qdq", "kws_quantized"])
def test_a_quantized_variant_is_checked_against_its_float_model(variant: str) -> None:
    same = (((1, 49, 10), "float32"),)
    source = first_test_source(["kws", variant, "lonely_int8"],
                               {"kws": Traits(inputs=same), variant: Traits(inputs=same)})
    assert f'@pytest.mark.edge(model="{variant}", reference="kws", min_snr_db=20)' in source
    assert '@pytest.mark.edge(model="kws")\n' in source
    # Quantized by its name, with no float model beside it: its own golden, by SNR.
    assert '@pytest.mark.edge(model="lonely_int8", min_snr_db=20)' in source
    compile(source, "test_edge_models.py", "exec")


def test_a_variant_with_other_inputs_keeps_its_own_golden() -> None:
    source = first_test_source(["kws", "kws_int8"], {"kws": Traits(inputs=(((1, 49, 10), "float32"),)),
                                                     "kws_int8": Traits(inputs=(((1, 49, 10), "int8"),))})
    assert "# not against kws's golden: the inputs differ (int8[1, 49, 10] vs float32[1, 49, 10])\n" in source
    assert '@pytest.mark.edge(model="kws_int8", min_snr_db=20)' in source


@pytest.mark.parametrize("folder", ["My Models", "it's", 'say "hi"', "back\\slash", "tab\there"])
@pytest.mark.parametrize("config", ["pytest.ini", "pyproject.toml"])
def test_init_quotes_the_folders_it_writes_and_pytest_reads_them_back(pytester: pytest.Pytester, folder: str,
                                                                      config: str) -> None:
    """Folder names with spaces, quotes, backslashes, tabs: written quoted (ini: as a shell splits;
    TOML: a basic string), read back by pytest as that one folder, and the models there found."""
    models = pytester.path / folder
    models.mkdir()
    (models / "tiny_mlp.onnx").write_bytes((FIXTURES / "tiny_mlp.onnx").read_bytes())
    if config == "pyproject.toml":
        (pytester.path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    done = _cli("init", "--no-golden", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    if config == "pyproject.toml":
        assert tomllib.loads((pytester.path / config).read_text())["tool"]["pytest"]["ini_options"] == {
            "edge_model_dirs": [folder]}
    result = pytester.runpytest_inprocess("--co", "-q")
    result.stdout.fnmatch_lines(["*test_tiny_mlp[[]tiny_mlp-onnxruntime-cpu[]]*"])


def test_init_refuses_a_folder_name_an_ini_file_cannot_hold_and_leaves_the_file_alone(pytester: pytest.Pytester) -> None:
    """A newline in a folder's name would write a line of its own into pytest.ini (``addopts = ...``
    injected): refused, nothing written; in pyproject.toml it is an escaped string."""
    models = pytester.path / "m\naddopts = --co -p no:pytest_edge"
    models.mkdir()
    (models / "tiny_mlp.onnx").write_bytes((FIXTURES / "tiny_mlp.onnx").read_bytes())
    ini = "[pytest]\nmarkers = slow\n"
    (pytester.path / "pytest.ini").write_text(ini)
    done = _cli("init", "--no-golden", cwd=pytester.path)
    assert done.returncode == 2 and "its name holds a line break" in done.stderr and "Traceback" not in done.stderr
    assert (pytester.path / "pytest.ini").read_text() == ini and not (pytester.path / "tests").exists()
    (pytester.path / "pytest.ini").unlink()
    (pytester.path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    done = _cli("init", "--no-golden", cwd=pytester.path)
    assert done.returncode == 0, done.stderr
    assert tomllib.loads((pytester.path / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"] == {
        "edge_model_dirs": [models.name]}


def test_a_model_whose_stem_ends_like_a_suffix_is_found_by_its_stem(pytester: pytest.Pytester) -> None:
    """``cnn.onnx.onnx`` (an exporter that appended the suffix twice) is the model ``cnn.onnx``:
    init's test for it resolves, and gets a golden."""
    (pytester.path / "models").mkdir()
    (pytester.path / "models/cnn.onnx.onnx").write_bytes((FIXTURES / "tiny_mlp.onnx").read_bytes())
    done = _cli("init", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '@pytest.mark.edge(model="cnn.onnx")' in (pytester.path / "tests/test_edge_models.py").read_text()
    assert (pytester.path / "golden/cnn.onnx/meta.json").is_file()


LLM = FIXTURES / "llm"


def _decoder_project(root: Path) -> None:
    """A GenAI builder folder with llama.cpp's GGUF of the same weights beside it, ExecuTorch's LLM
    export, a tensor model, and a GGUF that is no GGUF."""
    import shutil

    shutil.copytree(LLM / "genai_llama", root / "models" / "llama")
    shutil.copy(LLM / "gguf_llama" / "model.gguf", root / "models" / "llama" / "model.gguf")
    shutil.copytree(LLM / "et_llama", root / "models" / "et")
    shutil.copy(FIXTURES / "tiny_cnn.onnx", root / "models" / "tiny_cnn.onnx")
    (root / "models" / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")


def test_decoders_are_found_as_exported_and_are_no_tensor_models(tmp_path: Path) -> None:
    """A GenAI folder is one decoder (its model.onnx and the lone GGUF beside it), a .pte with
    export_llama's metadata another, a tensor .pte / .tflite stays a tensor model; a decoder whose
    configuration cannot be read is not covered, saying why."""
    from pytest_edge.cli.init import project_decoders

    _decoder_project(tmp_path)
    for name in ("clean_mlp.pte", "tiny_cnn.tflite"):
        (tmp_path / "models" / name).write_bytes((FIXTURES / name).read_bytes())
    decoders = project_decoders(tmp_path)
    assert [(d.model, d.what, d.vocab_size, sorted(a.name for a in d.artifacts)) for d in decoders.found] == [
        ("models/llama", "ONNX Runtime GenAI folder + model.gguf", 256, ["model.gguf", "model.onnx"]),
        ("models/et", "ExecuTorch LLM export", 256, ["model.pte"])]
    (broken,) = decoders.not_covered
    assert broken.startswith("models/broken.gguf: ") and "broken.gguf" in broken[len("models/broken.gguf: "):]
    # The GenAI folder's model.onnx and the export's model.pte are no tensor models ("model", skipped).
    assert find_models(tmp_path, decoders=decoders.artifacts).models == ["clean_mlp", "tiny_cnn"]
    assert find_models(tmp_path).models == ["clean_mlp", "model", "tiny_cnn"]  # as before: "model" was a tensor test


def test_init_writes_edge_llm_tests_for_the_decoders_and_says_what_it_left_out(pytester: pytest.Pytester) -> None:
    """On a GenAI folder beside a GGUF (the new user's project of issue #40) and an export_llama .pte:
    edge_llm tests for the decoders, a tensor test for the tensor model only, goldens recorded, and
    pytest green; the unreadable GGUF named as not covered."""
    _decoder_project(pytester.path)
    done = _cli("init", cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    source = (pytester.path / "tests/test_edge_models.py").read_text()
    assert [line for line in source.splitlines() if line.startswith("@pytest.mark.edge")] == [
        '@pytest.mark.edge(model="tiny_cnn")',
        '@pytest.mark.edge_llm(model="models/llama", prompts=[[1, 2, 3, 4]], new_tokens=8)',
        '@pytest.mark.edge_llm(model="models/et", prompts=[[1, 2, 3, 4]], new_tokens=8)']
    assert "2 decoder LLM test(s) (edge_llm): models/llama (ONNX Runtime GenAI folder + model.gguf); models/et " \
           "(ExecuTorch LLM export)" in done.stdout
    assert "not covered: models/broken.gguf: " in done.stdout
    assert "now checks 1 tensor model(s) and 2 decoder(s)" in done.stdout and "1 not covered" in done.stdout
    result = pytester.runpytest_inprocess("-rs", "--edge-report=r.json")
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and not outcomes.get("failed") and not outcomes.get("errors"), result.stdout.str()
    runs = {(r["model"]["name"], r["backend"]) for r in json.loads((pytester.path / "r.json").read_text())["records"]
            if r.get("llm") and r.get("verdict") == "passed"}
    # The GGUF beside the GenAI folder runs on llama.cpp as the same model, against the same golden.
    assert {("llama", "onnxruntime-cpu"), ("llama", "llama.cpp"), ("et", "executorch")} <= runs, runs
