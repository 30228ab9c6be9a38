"""Bad input of decoder LLMs (issue 42): marker values, decoder configurations and artifacts that a
careless or hostile user gives. Each is one test's clear error naming the keyword or file (the
session's other tests pass), never a collection error that stops the session, a silent pass, or a
runtime allocating for a context no test asked for."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_helpers import FIXTURES

from pytest_edge.backends.decoder_config import LlmConfig, from_genai_config, from_hf_config, read_config
from pytest_edge.units import parse_mb, parse_ms, parse_number
from pytest_edge.errors import EdgeUsageError, GoldenError
from pytest_edge.run.decoder_plan import MIN_RUN_CONTEXT, run_context

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

LLM = FIXTURES / "llm"
LLAMA_CPP = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("llama_cpp"),
                               reason="llama-cpp-python is not installed (the llama extra builds it from its sdist)")
GENAI = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("onnxruntime_genai"),
                           reason="onnxruntime-genai is not installed")
DEEP = "[" * 100_000


def _gguf_with(source: Path, target: Path, key: str, value: int) -> None:
    """A copy of ``source`` whose uint32 metadata ``key`` says ``value`` (same size: no offset moves)."""
    data = bytearray(source.read_bytes())
    name = key.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    assert struct.unpack_from("<I", data, at)[0] == 4, "a uint32 key"  # GGUF type 4: UINT32
    struct.pack_into("<I", data, at + 4, value)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(bytes(data))


# ---------------------------------------------------------------- caches sized to the test

@LLAMA_CPP
def test_a_gguf_declaring_a_context_of_2_24_runs_a_4_token_test_in_little_memory(pytester: pytest.Pytester) -> None:
    """llama.cpp's cache was sized from the declared context_length: 2**24 positions of this tiny
    Llama are 4 GiB (then 'Failed to create llama_context'). Loaded for the test's own context, the
    test passes and its worker's peak stays far below 1.5 GB."""
    from pytest_edge.backends.llama_cpp.gguf import from_gguf

    gguf = pytester.path / "models" / "decoder" / "model.gguf"
    _gguf_with(LLM / "gguf_llama" / "model.gguf", gguf, "llama.context_length", 2**24)
    declared = from_gguf(gguf)
    assert declared.max_context == 2**24 and declared.kv_cache_bytes(2**24) == 4 * 2**30
    pytester.makepyfile(test_decoder="""
        import pytest

        @pytest.mark.edge_llm(model="models/decoder", prompts=[[1, 2, 3, 4]], new_tokens=4, backends=["llama.cpp"],
                              peak_memory_mb="1.5GB", runs=2, warmup=1)
        def test_short(edge_llm):
            assert len(edge_llm.generate([5, 6, 7, 8], 4)) == 4
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "-o", "edge_processes=1")
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    peak = record["peak_memory_mb"]
    print(f"llama.cpp, context_length 2**24, 4-token prompt + 4 new tokens: peak {peak:.1f} MB over the "
          f"worker's baseline, M_KV estimate {record['llm']['kv_cache_estimate_mb']:.4f} MB")
    assert peak is not None and peak < 1536


@GENAI
def test_a_genai_folder_declaring_a_context_of_2_24_runs_a_short_test(pytester: pytest.Pytester) -> None:
    """GenAI's generator sized its cache from max_length = context_length (2**24: 4.15 GB)."""
    folder = pytester.path / "models" / "decoder"
    shutil.copytree(LLM / "genai_llama", folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["context_length"] = 2**24
    config["search"]["max_length"] = 2**24
    (folder / "genai_config.json").write_text(json.dumps(config))
    pytester.makepyfile(test_decoder="""
        import pytest

        @pytest.mark.edge_llm(model="models/decoder", prompts=[[1, 2, 3, 4]], new_tokens=4,
                              backends=["onnxruntime-genai"], peak_memory_mb="1.5GB", runs=2, warmup=1)
        def test_short(edge_llm):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "-o", "edge_processes=1")
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    print(f"onnxruntime-genai, context_length 2**24: peak {record['peak_memory_mb']:.1f} MB")
    assert record["peak_memory_mb"] < 1536


@given(tokens=st.integers(1, 2**24), maximum=st.integers(2, 2**24))
def test_a_run_context_holds_the_run_and_not_much_more(tokens: int, maximum: int) -> None:
    config = LlmConfig(vocab_size=8, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=1, max_context=maximum)
    context = run_context(tokens, config)
    assert context <= maximum and config.for_context(context).max_context == context
    if tokens <= maximum:
        assert tokens <= context <= max(MIN_RUN_CONTEXT, 2 * tokens)


# ---------------------------------------------------------------- every bad value is one test's error

SESSION = """
import pytest

def _raises():
    raise RuntimeError("no prompts today")

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], new_tokens=3, backends=["onnxruntime-cpu"])
def test_control(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], ttft_ms=10**400)
def test_ttft_overflow(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], memory_limit_mb=10**400, contexts=[8])
def test_memory_limit_overflow(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], logits_atol=10**400)
def test_atol_overflow(edge_llm):
    pass

@pytest.mark.edge_llm(model=123, prompts=[[1, 2, 3]])
def test_model_not_a_name(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], backends=[None])
def test_backend_none(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=_raises)
def test_prompts_raise(edge_llm):
    pass

@pytest.mark.edge_llm(model="deep_genai", prompts=[[1, 2, 3]])
def test_deep_genai_config(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], threads=10**6)
def test_threads(edge_llm):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], runs=10**9)
def test_runs(edge_llm):
    pass

@pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu", p50_ms=10**400)
def test_edge_p50_overflow(edge_model):
    pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], max_context=2**24, backends=["onnxruntime-cpu"])
def test_max_context_beyond_the_model(edge_llm):
    pass
"""

# test -> what its error must say (the keyword or file), one error each.
SAYS = {
    "test_ttft_overflow": "edge_llm ttft_ms: an integer of about 401 digits is beyond a float's range",
    "test_memory_limit_overflow": "edge_llm memory_limit_mb: an integer of about 401 digits is beyond a float's range",
    "test_atol_overflow": "edge_llm logits_atol: an integer of about 401 digits is beyond a float's range",
    "test_model_not_a_name": "edge_llm model=123: expected a model's name",
    "test_backend_none": "edge_llm backends=(None,): each backend is named by a str",
    "test_prompts_raise": "edge_llm prompts=: the callable '_raises' raised RuntimeError: 'no prompts today'",
    "test_deep_genai_config": "deep_genai/genai_config.json: unreadable decoder configuration: nested deeper",
    "test_threads": "edge_llm threads: 1000000 is above 256",
    "test_runs": "edge_llm runs: 1000000000 is above 1,000",
    "test_edge_p50_overflow": "p50_ms: an integer of about 401 digits is beyond a float's range",
}
# Refused when its check starts, before anything runs (the model's configuration is read there): a failure.
FAILS = {"test_max_context_beyond_the_model": "max_context=16777216 exceeds the model's maximum context of 1024"}


def test_bad_edge_llm_values_are_each_one_tests_error(pytester: pytest.Pytester, models: Path) -> None:
    shutil.copy(LLM / "tiny_llm.onnx", models / "tiny_llm.onnx")
    shutil.copy(LLM / "tiny_llm.json", models / "tiny_llm.json")
    (models / "deep_genai").mkdir()
    (models / "deep_genai" / "genai_config.json").write_text(DEEP)
    # Not test_llm.py: an in-process run would import the suite's own module of that name.
    pytester.makepyfile(test_bad_llm_values=SESSION)
    result = pytester.runpytest_inprocess("--edge-update-golden", "-rE")
    result.assert_outcomes(passed=1, errors=len(SAYS), failed=len(FAILS))
    text = result.stdout.str()
    for test, says in FAILS.items():
        assert says in text, test
    assert "INTERNALERROR" not in text and "Traceback" not in text and "interrupted" not in text
    # Each error's message, as its section shows it: "test_bad_llm_values.py::test_x: <message>".
    errors = {line.split("::")[1].split(":")[0]: line for line in text.splitlines() if line.startswith("test_bad_llm_values.py::")}
    for test, says in SAYS.items():
        assert says in errors[test], (test, errors.get(test))


@given(value=st.one_of(st.integers(min_value=0), st.floats(), st.integers(min_value=0).map(str),
                       st.integers(0, 10**6).map(lambda n: f"1e{n}")))
@settings(max_examples=300)
def test_a_number_beyond_a_floats_range_is_refused_by_name(value: object) -> None:
    for parse in (parse_ms, parse_mb, parse_number):
        try:
            number = parse(value, "edge_llm ttft_ms")
        except EdgeUsageError as exc:
            assert str(exc).startswith("edge_llm ttft_ms: ") and len(str(exc)) < 300
        else:
            assert number >= 0 and number != float("inf")


@pytest.mark.parametrize("name, reader", [
    ("genai_config.json", from_genai_config), ("config.json", from_hf_config), ("decoder.json", LlmConfig.load)])
def test_a_deeply_nested_configuration_is_an_error_naming_it(tmp_path: Path, name: str, reader: object) -> None:
    path = tmp_path / name
    path.write_text(DEEP)
    with pytest.raises(EdgeUsageError, match=rf"{name}: unreadable .*configuration: nested deeper"):
        reader(path)  # type: ignore[operator]


def test_a_deeply_nested_golden_meta_is_an_error_naming_it(tmp_path: Path) -> None:
    import io
    import zipfile

    import numpy as np

    from pytest_edge.golden.tokens import read_golden

    path = tmp_path / "prompt.npz"
    buffer = io.BytesIO()
    np.savez(buffer, prompt=np.asarray([1, 2], np.int64), tokens=np.asarray([3], np.int64),
             first_logits=np.zeros(4, np.float32), meta=np.frombuffer(DEEP.encode(), np.uint8))
    path.write_bytes(buffer.getvalue())
    assert zipfile.is_zipfile(path)
    with pytest.raises(GoldenError, match=r"prompt\.npz: unreadable LLM golden \(its meta is nested deeper"):
        read_golden(path, [1, 2])


# ---------------------------------------------------------------- configurations checked against the graph

EXECUTORCH = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("executorch"),
                                reason="executorch is not installed")


def _genai_copy(tmp_path: Path, export: str = "genai_llama", **decoder: int) -> Path:
    folder = tmp_path / export
    shutil.copytree(LLM / export, folder)
    config = json.loads((folder / "genai_config.json").read_text())
    for key, value in decoder.items():
        if key in ("vocab_size", "context_length"):
            config["model"][key] = value
        elif key == "window_size":
            config["model"]["decoder"]["sliding_window"]["window_size"] = value
        else:
            config["model"]["decoder"][key] = value
    (folder / "genai_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("change, says", [
    ({"num_hidden_layers": 1024}, "n_layers 1024 (configuration) but 2 (graph)"),
    ({"num_key_value_heads": 4}, "n_kv_heads 4 (configuration) but 2 (graph)"),
    ({"vocab_size": 4}, "vocab_size 4 (configuration) but 256 (graph)"),
])
@pytest.mark.parametrize("backend", [pytest.param("onnxruntime-genai", marks=GENAI), "onnxruntime-cpu"])
def test_a_genai_configuration_that_contradicts_its_graph_is_refused(tmp_path: Path, backend: str, change: dict,
                                                                     says: str) -> None:
    from pytest_edge.backends import get_backend
    from pytest_edge.errors import BackendError

    folder = _genai_copy(tmp_path, **change)
    config = read_config(folder / "model.onnx")  # what the file says, within every bound
    with pytest.raises(BackendError, match=r"model\.onnx \(" + backend + r"\): its configuration \(.*genai_config"
                       r"\.json\) does not describe this graph: " + says.replace("(", r"\(").replace(")", r"\)")):
        get_backend(backend).decoders.open(folder / "model.onnx", config, 1)


@GENAI
def test_a_genai_configuration_that_contradicts_its_graph_is_not_a_pass(pytester: pytest.Pytester) -> None:
    _genai_copy(pytester.path / "models", num_hidden_layers=1024)
    pytester.makepyfile(test_decoder="""
        import pytest

        @pytest.mark.edge_llm(model="models/genai_llama", prompts=[[1, 2, 3]], new_tokens=2,
                              backends=["onnxruntime-genai"])
        def test_it(edge_llm):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 0 and outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1
    result.stdout.fnmatch_lines(["*genai_config.json) does not describe this graph: n_layers 1024 (configuration) "
                                 "but 2 (graph)*"])


def test_a_window_larger_than_the_context_is_an_error_naming_both(tmp_path: Path) -> None:
    folder = _genai_copy(tmp_path, "genai_gemma2", window_size=2**24)
    with pytest.raises(EdgeUsageError, match=r"genai_config\.json: the decoder configuration says a sliding window "
                                             r"of 16,777,216 positions, larger than its context of 256"):
        from_genai_config(folder / "genai_config.json")


def test_a_window_the_graph_does_not_attend_is_refused_naming_both(tmp_path: Path) -> None:
    """A declared window of 2**24 (the context too) over a graph whose attention attends 8 positions
    sized the ring cache by the window (4 GiB, MemoryError): the configuration contradicts its graph."""
    from pytest_edge.backends.onnxruntime.decoder import refuse_disagreement
    from pytest_edge.errors import BackendError

    folder = _genai_copy(tmp_path, "genai_gemma2", window_size=2**24, context_length=2**24)
    config = from_genai_config(folder / "genai_config.json")
    with pytest.raises(BackendError, match=r"does not describe this graph: sliding_window 16777216 \(configuration\) "
                                           r"but 8 \(graph\)"):
        refuse_disagreement(folder / "model.onnx", config, "onnxruntime-cpu")


def test_a_ring_cache_holds_the_window_and_only_the_slack_the_run_reaches(tmp_path: Path) -> None:
    """A cache_slack of 2**24 - 8 allocated 2**24 positions per sliding layer for any test: the ring is
    the window (ONNX Runtime refuses less) and the positions the run reaches, and decodes the same
    tokens and logits as the exporter's own ring."""
    import numpy as np

    from pytest_edge.backends.onnxruntime.decoder import OrtDecoder
    from pytest_edge.run.decoder_plan import run_context

    folder = _genai_copy(tmp_path, "genai_gemma2")
    config_path = folder / "genai_config.json"
    exported = from_genai_config(config_path)
    raw = json.loads(config_path.read_text())
    raw["model"]["decoder"]["sliding_window"]["cache_slack"] = 2**24 - 8
    raw["model"]["context_length"] = raw["search"]["max_length"] = 2**24
    config_path.write_text(json.dumps(raw))
    slack = from_genai_config(config_path)
    assert slack.sliding_cache == 2**24
    assert slack.for_context(4).sliding_cache == 8 and slack.for_context(12).sliding_cache == 12
    run = slack.for_context(run_context(12 + 6, slack))
    assert run.sliding_cache == run.max_context == MIN_RUN_CONTEXT and exported.for_context(64).sliding_cache == 8

    def decode(config: LlmConfig) -> np.ndarray:
        decoder = OrtDecoder(folder / "model.onnx", config, 1)
        logits = [decoder.step(list(range(1, 13)))]
        for _ in range(6):  # past the window of 8: the ring evicts
            logits.append(decoder.step([int(np.argmax(logits[-1]))]))
        return np.stack(logits)

    np.testing.assert_allclose(decode(run), decode(exported), atol=1e-5)


def _pte_with(tmp_path: Path, method: str, value: int) -> Path:
    """A copy of export_llama's .pte whose metadata method ``method`` returns ``value``: the one
    int64 in the file whose change changes what that method returns (found by trying each)."""
    from pytest_edge.backends.executorch.program import read_plans

    data = (LLM / "et_llama" / "model.pte").read_bytes()
    constants = {p.name: p.constant() for p in read_plans(data) if p.constant() is not None}
    old = struct.pack("<q", constants[method])
    at = 0
    while (at := data.find(old, at + 1)) >= 0:
        patched = bytearray(data)
        struct.pack_into("<q", patched, at, value)
        try:
            found = {p.name: p.constant() for p in read_plans(bytes(patched)) if p.constant() is not None}
        except Exception:  # noqa: BLE001 - a candidate that breaks the program is not the one
            continue
        if found.get(method) == value and {k: v for k, v in found.items() if k != method} == \
                {k: v for k, v in constants.items() if k != method}:
            path = tmp_path / "model.pte"
            path.write_bytes(bytes(patched))
            return path
    raise AssertionError(f"no int64 of {method} found")


@EXECUTORCH
@pytest.mark.parametrize("method, value, says", [
    ("get_n_layers", 1024, "n_layers 1024 (metadata) but 2 (program)"),
    ("get_vocab_size", 4, "vocab_size 4 (metadata) but 256 (program)"),
])
def test_executorch_metadata_that_contradicts_its_program_is_refused(tmp_path: Path, method: str, value: int,
                                                                       says: str) -> None:
    from pytest_edge.backends.executorch.llm_metadata import from_pte

    path = _pte_with(tmp_path, method, value)
    with pytest.raises(EdgeUsageError, match=r"model\.pte: its metadata methods \(.*\) do not describe its program: .*"
                       + says.replace("(", r"\(").replace(")", r"\)")):
        from_pte(path)
    assert from_pte(LLM / "et_llama" / "model.pte").n_layers == 2  # the export as written reads


# ---------------------------------------------------------------- decoder goldens, model=, damaged artifacts

TINY = """
import pytest

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], new_tokens=3, backends=["onnxruntime-cpu"])
def test_tiny(edge_llm):
    pass
"""


def _tiny_project(pytester: pytest.Pytester) -> Path:
    models = pytester.path / "models"
    models.mkdir(exist_ok=True)
    for name in ("tiny_llm.onnx", "tiny_llm.json"):
        shutil.copy(LLM / name, models / name)
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    return models


@pytest.mark.parametrize("linked", ["model", "llm"])
def test_a_decoder_golden_folder_linked_outside_is_not_written_through(pytester: pytest.Pytester,
                                                                        linked: str) -> None:
    _tiny_project(pytester)
    outside = pytester.path.parent / f"outside-{linked}"
    outside.mkdir()
    (pytester.path / "golden").mkdir()
    if linked == "model":
        (pytester.path / "golden" / "tiny_llm").symlink_to(outside, target_is_directory=True)
    else:
        (pytester.path / "golden" / "tiny_llm").mkdir()
        (pytester.path / "golden" / "tiny_llm" / "llm").symlink_to(outside, target_is_directory=True)
    pytester.makepyfile(test_decoder=TINY)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 0 and outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1
    result.stdout.fnmatch_lines(["*must be a plain folder, not a symbolic link or a file; nothing is read or written "
                                 "through it*"])
    assert not any(outside.iterdir())


@pytest.mark.parametrize("meta, says", [
    ({"sha256": 12345}, "its meta's sha256 is 12345, not 64 lowercase hex digits"),
    ({"sha256": "ab" * 32, "new_tokens": "3"}, "its meta's new_tokens is '3', not a int"),
    ({"sha256": "ab" * 32, "files": {"model.onnx": 7}}, "its meta's files is not an object"),
])
def test_a_decoder_golden_with_bad_metadata_is_an_error_naming_it(tmp_path: Path, meta: dict, says: str) -> None:
    import json

    import numpy as np

    from pytest_edge.golden.tokens import read_golden

    path = tmp_path / "golden" / "m" / "llm" / "prompt-0.npz"
    path.parent.mkdir(parents=True)
    # A meta no writer of the package makes (write_golden writes a typed one): written by hand.
    np.savez_compressed(path, prompt=np.asarray([1, 2], np.int64), tokens=np.asarray([3], np.int64),
                        first_logits=np.zeros(4, np.float32), meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with pytest.raises(GoldenError, match=r"prompt-0\.npz: unreadable LLM golden \(Corrupt: " + says.replace("(", r"\(")):
        read_golden(path, [1, 2])


def test_a_linked_decoder_golden_file_is_not_read(tmp_path: Path) -> None:
    import numpy as np

    from pytest_edge.golden.tokens import TokenGolden, TokenGoldenMeta, read_golden, write_golden

    elsewhere = tmp_path / "elsewhere.npz"
    write_golden(elsewhere, TokenGolden([1, 2], [3], np.zeros(4, np.float32), TokenGoldenMeta()))
    path = tmp_path / "golden" / "m" / "llm" / "prompt-0.npz"
    path.parent.mkdir(parents=True)
    path.symlink_to(elsewhere)
    with pytest.raises(GoldenError, match="must be a regular file, not a symbolic link"):
        read_golden(path, [1, 2])


@pytest.mark.parametrize("model", ["..", "../../..", "../stranger", "."])
def test_model_never_resolves_outside_the_projects_folders(pytester: pytest.Pytester, model: str) -> None:
    _tiny_project(pytester)
    # A stranger's decoder beside the project, and one in the folder above it.
    stranger = pytester.path.parent / "stranger"
    stranger.mkdir(exist_ok=True)
    shutil.copy(LLM / "tiny_llm.onnx", stranger / "model.onnx")
    shutil.copy(LLM / "tiny_llm.json", stranger / "model.json")
    shutil.copy(LLM / "tiny_llm.onnx", pytester.path.parent / "lone.onnx")
    pytester.makepyfile(test_decoder=TINY + f"""
@pytest.mark.edge_llm(model={model!r}, prompts=[[1, 2, 3]], new_tokens=3)
def test_outside(edge_llm):
    pass
""")
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*test_outside: edge_llm model={model!r} *"])
    assert "names a folder by '.' or '..'" in result.stdout.str() or "outside the folders" in result.stdout.str()
    assert sorted(p.name for p in (pytester.path / "golden").iterdir()) == ["tiny_llm"]
    assert not (pytester.path.parent / "llm").exists()


@pytest.mark.skipif(not __import__("importlib.util").util.find_spec("ai_edge_litert"),
                    reason="ai-edge-litert not installed")
def test_a_byte_flipped_litert_decoder_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    """Every flip of the top bit of the last 512 bytes (the signatures' names and tensor indices):
    a configuration or an error naming the file and the backend, never a raw UnicodeDecodeError
    or 'Invalid tensor index' from inside the interpreter."""
    from pytest_edge.backends.litert.decoder import LiteRTDecoder, from_tflite
    from pytest_edge.errors import BackendError

    data = (LLM / "litert_llama" / "model.tflite").read_bytes()
    path = tmp_path / "model.tflite"
    damaged = 0
    for at in range(len(data) - 512, len(data)):
        flipped = bytearray(data)
        flipped[at] ^= 0x80
        path.write_bytes(bytes(flipped))
        try:
            from_tflite(path)
        except EdgeUsageError as exc:
            assert str(exc).startswith(f"{path} (litert)"), (at, exc)
            if "a damaged file?" in str(exc):
                damaged += 1
                if damaged == 1:  # opened as a decoder too: the same, as a BackendError
                    config = from_tflite(LLM / "litert_llama" / "model.tflite")
                    with pytest.raises(BackendError, match=rf"{path} \(litert\): not a readable generative"):
                        LiteRTDecoder(path, config, 1)
    assert damaged  # the interpreter's own errors were met, and said with the file


def test_a_nested_prompt_and_a_sweep_that_ran_nothing_each_fail_their_test(pytester: pytest.Pytester) -> None:
    _tiny_project(pytester)
    pytester.makepyfile(test_decoder=TINY + """
@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], new_tokens=3, backends=["onnxruntime-cpu"])
def test_nested_prompt(edge_llm):
    edge_llm.generate([[1, 2, 3]])

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], new_tokens=3, backends=["onnxruntime-cpu"],
                      contexts=[64, 128], memory_limit_mb=1)
def test_sweep_out_of_memory(edge_llm):
    pass
""")
    result = pytester.runpytest_inprocess("--edge-update-golden", "-o", "edge_processes=1")
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    assert "tiny_llm (onnxruntime-cpu): a prompt is one list of int token ids, not [[1, 2, 3]]" in text
    assert "onnxruntime-cpu: the context sweep ran none of its lengths (64): stopped at 64 tokens" in text
    assert "Traceback" not in text


def test_a_gguf_vocabulary_is_counted_not_held(tmp_path: Path) -> None:
    """A GGUF header listing 2**24 vocabulary strings held 2.5 GB of str in the pytest process; its
    reader keeps an array's length only: reading one of 2**18 stays within 4 MB (held, they are 15 MB)."""
    import tracemalloc

    from pytest_edge.backends.llama_cpp.gguf import read_metadata

    count = 2**18
    key = b"tokenizer.ggml.tokens"
    header = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
              + struct.pack("<IIQ", 9, 8, count))  # an ARRAY of STRING
    path = tmp_path / "vocab.gguf"
    path.write_bytes(header + (struct.pack("<Q", 2) + b"ab") * count)
    tracemalloc.start()
    try:
        found = read_metadata(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found["tokenizer.ggml.tokens"] == count and peak < 4 * 2**20, peak
    path.write_bytes(header + (struct.pack("<Q", 2) + b"ab") * (count - 1) + struct.pack("<Q", 1000))  # truncated
    with pytest.raises(EdgeUsageError, match=r"vocab\.gguf: metadata 'tokenizer\.ggml\.tokens': a string of 1000 "
                                             r"bytes past the header's end"):
        read_metadata(path)


def test_a_gguf_whose_block_count_its_tensors_do_not_hold_is_refused_naming_both(tmp_path: Path) -> None:
    """block_count 1024 over a 2-block GGUF: llama.cpp aborted its process (SIGABRT) on the missing
    blocks' tensors; the metadata is held to the tensors it describes (a split GGUF's shards too)."""
    from pytest_edge.backends.llama_cpp.gguf import from_gguf

    _gguf_with(LLM / "gguf_llama" / "model.gguf", tmp_path / "model.gguf", "llama.block_count", 1024)
    with pytest.raises(EdgeUsageError, match=r"model\.gguf: GGUF metadata says llama\.block_count 1024 but its tensors "
                                             r"hold 2 blocks \(blk\.0 … blk\.1\)"):
        from_gguf(tmp_path / "model.gguf")
    split = FIXTURES / "multifile" / "gguf_split"
    assert from_gguf(split / "model-00001-of-00002.gguf").n_layers == 2  # blk.1 lies in the second shard


def test_a_decoder_golden_with_token_ids_outside_the_vocabulary_is_named_corrupt(pytester: pytest.Pytester) -> None:
    """Its ids are fed back teacher-forced: they reached ONNX Runtime's embedding Gather as an
    index error naming the model, not the golden (probe rerun)."""
    import io

    import numpy as np

    _tiny_project(pytester)
    pytester.makepyfile(test_decoder=TINY)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    (npz,) = (pytester.path / "golden" / "tiny_llm" / "llm").glob("*.npz")
    with np.load(npz) as stored:
        items = {k: stored[k] for k in stored.files}
    items["tokens"] = np.full_like(items["tokens"], 10**6)
    buffer = io.BytesIO()
    np.savez(buffer, **items)
    npz.write_bytes(buffer.getvalue())
    result = pytester.runpytest_inprocess()
    assert result.parseoutcomes().get("passed", 0) == 0
    result.stdout.fnmatch_lines([f"*{npz.name}: a corrupt LLM golden: token id 1000000 is outside the model's "
                                 "vocabulary [[]0, 64); re-record it*"])


@pytest.mark.parametrize("reference", ["../outside/decoder", "models/absent", "models/tiny_cnn.onnx"])
def test_a_bad_reference_says_reference(tmp_path: Path, reference: str) -> None:
    """``reference=`` outside the model folders, missing, or a tensor model (no decoder configuration,
    so --edge-update-golden could not record tokens for it): each an error that says
    ``edge_llm reference=`` and names it, never ``model=``."""
    from pytest_edge.core.models import ModelKeys
    from pytest_edge.core.settings import Settings
    from pytest_edge.errors import EdgeError
    from pytest_edge.run.decoder_plan import plan_decoder_test

    project = tmp_path / "project"
    shutil.copytree(LLM / "gguf_llama", project / "models" / "decoder")
    shutil.copy(FIXTURES / "tiny_cnn.onnx", project / "models" / "tiny_cnn.onnx")
    shutil.copytree(LLM / "gguf_llama", tmp_path / "outside" / "decoder")
    settings = Settings(golden_dir=project / "golden", rootdir=project)
    with pytest.raises(EdgeError) as raised:
        plan_decoder_test((), {"model": "models/decoder", "reference": reference, "prompts": [[1, 2, 3]]}, settings,
                          ModelKeys(), project)
    message = str(raised.value)
    assert f"edge_llm reference={reference!r}" in message and "edge_llm model=" not in message, message
