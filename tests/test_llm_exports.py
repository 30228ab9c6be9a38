"""Decoders as users export them (fixtures/make_llm_exports.py): a Llama through ONNX Runtime
GenAI's model builder, llama.cpp's converter and ExecuTorch's export_llama, and a Qwen2 through
Hugging Face Optimum, each from a ``transformers`` configuration with random weights, dropped into
a fresh project with no hand-written
configuration. Their greedy tokens must equal PyTorch's own (``pytorch_greedy.json``, written by
``transformers``' ``generate`` when the export was made)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edge_helpers import FIXTURES

from pytest_edge.errors import EdgeUsageError
from pytest_edge.run.decoder_plan import config_of, resolve_llm_model
from pytest_edge.backends.decoder_config import read_config

pytest.importorskip("onnxruntime")
LLM = FIXTURES / "llm"


# The runtimes these exports need, where the test environment may lack them.
# litert-torch's exports use builtin ops newer than the last tflite-runtime (2.14) reads: they need
# ai-edge-litert; the tflite-runtime lane checks that the old runtime refuses them clearly instead.
LITERT = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("ai_edge_litert"),
                            reason="ai-edge-litert not installed (tflite-runtime 2.14 cannot read these exports)")
OLD_TFLITE = pytest.mark.skipif(bool(__import__("importlib.util").util.find_spec("ai_edge_litert"))
                                or not __import__("importlib.util").util.find_spec("tflite_runtime"),
                                reason="runs where LiteRT is tflite-runtime, its old name (the tflite lane)")
EXECUTORCH = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("executorch"),
                                reason="executorch is not installed")
LLAMA_CPP = pytest.mark.skipif(not __import__("importlib.util").util.find_spec("llama_cpp"),
                               reason="llama-cpp-python is not installed (the llama extra builds it from its sdist)")


def _recorded_then_checked(pytester: pytest.Pytester) -> dict:
    """Goldens recorded, then the same tests checked against them (both prompts pass each time):
    the first record of the checking run."""
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    pytester.runpytest_inprocess("--edge-report=r.json").assert_outcomes(passed=2)
    return json.loads((pytester.path / "r.json").read_text())["records"][0]


def _project(pytester: pytest.Pytester, export: str, as_name: str = "decoder",
             backends: tuple[str, ...] = ("onnxruntime-cpu",)) -> dict:
    """A fresh project with the export folder copied as ``models/<as_name>``; PyTorch's tokens."""
    shutil.copytree(LLM / export, pytester.path / "models" / as_name)
    greedy = json.loads((LLM / export / "pytorch_greedy.json").read_text())
    pytester.makepyfile(test_decoder=f"""
        import pytest

        @pytest.mark.edge_llm(model="models/{as_name}", prompts={greedy['prompts']!r},
                              new_tokens={greedy['new_tokens']}, backends={list(backends)!r})
        def test_against_the_golden(edge_llm):
            pass

        @pytest.mark.edge_llm(model="models/{as_name}", prompts={greedy['prompts'][:1]!r}, new_tokens=2,
                              backends={list(backends)!r})
        def test_same_tokens_as_pytorch(edge_llm):
            assert [edge_llm.generate(p, {greedy['new_tokens']}) for p in {greedy['prompts']!r}] == {greedy['tokens']!r}
    """)
    return greedy


def _tuned(pytester: pytest.Pytester, folder: Path, greedy: dict, backends: tuple[str, ...] = ("onnxruntime-cpu",)) -> None:
    """``folder`` (a changed export, as a change that ships it would bring) as models/tuned, in a test
    judging it against models/decoder's goldens with reference=: a golden is stale once its own
    artifact changes, so a changed export is judged against the original's goldens this way."""
    if folder != pytester.path / "models" / "tuned":
        shutil.copytree(folder, pytester.path / "models" / "tuned")
    pytester.makepyfile(test_tuned=f"""
        import pytest

        @pytest.mark.edge_llm(model="models/tuned", reference="models/decoder", prompts={greedy['prompts']!r},
                              new_tokens={greedy['new_tokens']}, backends={list(backends)!r})
        def test_tuned(edge_llm):
            pass
    """)


@pytest.mark.parametrize("export", ["genai_llama", "optimum_qwen2"])
def test_a_field_export_runs_with_no_hand_written_configuration(pytester: pytest.Pytester, export: str) -> None:
    """The builder's folder (genai_config.json names model.onnx; attention_mask in) and Optimum's
    (config.json beside model.onnx; attention_mask and position_ids in): greedy tokens equal
    PyTorch's; goldens recorded, then checked."""
    _project(pytester, export)
    record = _recorded_then_checked(pytester)
    source = Path(record["llm"]["config"]["source"]).name
    assert source == ("genai_config.json" if export.startswith("genai") else "config.json")


def test_onnxruntime_genai_runs_the_builder_folder_with_its_own_generator(pytester: pytest.Pytester) -> None:
    """How apps run a model builder export: onnxruntime-genai's Generator. Its greedy tokens equal
    PyTorch's and the golden recorded by ONNX Runtime (the reference backend); a folder without
    genai_config.json is not one it runs (skipped with the reason)."""
    pytest.importorskip("onnxruntime_genai")
    _project(pytester, "genai_llama", backends=("onnxruntime-cpu", "onnxruntime-genai"))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=4)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_against_the_golden[[]decoder-onnxruntime-genai[]] PASSED*"])
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    genai = next(r for r in records if r["backend"] == "onnxruntime-genai" and "golden" in r["test"])
    assert genai["accuracy"]["reference"] == "onnxruntime-cpu", genai["accuracy"]
    # GenAI's Generator teacher-forced too (the golden's tokens appended one at a time).
    assert genai["accuracy"]["top1_agreement"] == 1.0 and genai["accuracy"]["kld_mean"] < 1e-6, genai["accuracy"]
    shutil.copytree(LLM / "optimum_qwen2", pytester.path / "models" / "qwen")
    pytester.makepyfile(test_qwen="""
        import pytest
        @pytest.mark.edge_llm(model="models/qwen", prompts=[[1, 2]], backends=["onnxruntime-genai"])
        def test_qwen(edge_llm):
            pass
    """)
    skipped = pytester.runpytest_inprocess("test_qwen.py", "-rs")
    skipped.assert_outcomes(skipped=1)
    skipped.stdout.fnmatch_lines(["*onnxruntime-genai runs a model builder folder: no genai_config.json*"])


def test_the_same_export_slightly_perturbed_fails_naming_the_first_differing_position(
        pytester: pytest.Pytester) -> None:
    greedy = _project(pytester, "genai_llama")
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "golden").assert_outcomes(passed=1)
    perturbed = json.loads((LLM / "genai_llama_perturbed" / "pytorch_greedy.json").read_text())
    _tuned(pytester, LLM / "genai_llama_perturbed", greedy)
    result = pytester.runpytest_inprocess("test_tuned.py")
    result.assert_outcomes(failed=1)
    first = next(i for i, (a, b) in enumerate(zip(greedy["tokens"][0], perturbed["tokens"][0])) if a != b)
    result.stdout.fnmatch_lines([f"*first difference at new token {first} (golden {greedy['tokens'][0][first]}, "
                                 f"got {perturbed['tokens'][0][first]})*"])


def test_configuration_is_read_from_the_export() -> None:
    genai = read_config(LLM / "genai_llama" / "model.onnx")
    optimum = read_config(LLM / "optimum_qwen2" / "model.onnx")
    for config in (genai, optimum):
        assert (config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim) == (2, 4, 2, 16)
        assert config.vocab_size == 256 and config.max_context == 256
    # M_KV = 2 x layers x batch x tokens x kv_heads x head_dim x bytes, from the export's own numbers.
    assert genai.kv_cache_bytes(100) == 2 * 2 * 1 * 100 * 2 * 16 * 4
    assert config_of(resolve_llm_model("genai_llama", [LLM])).source.endswith("genai_config.json")


def test_no_configuration_anywhere_names_what_was_looked_for(tmp_path: Path) -> None:
    shutil.copy(LLM / "optimum_qwen2" / "model.onnx", tmp_path / "model.onnx")
    with pytest.raises(EdgeUsageError) as info:
        read_config(tmp_path / "model.onnx")
    for named in ("genai_config.json", "config.json", "model.json", "n_kv_heads"):
        assert named in str(info.value)
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10, "num_attention_heads": 4}))
    with pytest.raises(EdgeUsageError, match="needs num_hidden_layers, head_dim, max_position_embeddings"):
        read_config(tmp_path / "model.onnx")


def test_an_artifact_kind_no_runtime_knows_is_one_tests_error(pytester: pytest.Pytester) -> None:
    """A model that is not found (only a .bin here) errors its own test; the others still run."""
    (pytester.path / "models").mkdir()
    (pytester.path / "models" / "weights.bin").write_bytes(b"\0" * 16)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge_llm(model="models/weights", prompts=[[1, 2]])
        def test_unknown(edge_llm):
            pass

        def test_other():
            pass
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*model 'models/weights' not found*"])
    assert "Interrupted" not in result.stdout.str()


@LLAMA_CPP
def test_a_gguf_made_by_llama_cpps_converter_runs_on_llama_cpp(pytester: pytest.Pytester) -> None:
    """convert_hf_to_gguf.py's model.gguf alone in a folder: the configuration from its metadata,
    greedy tokens equal PyTorch's on llama.cpp; goldens recorded, then checked."""
    _project(pytester, "gguf_llama", backends=("llama.cpp",))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "-v")
    result.assert_outcomes(passed=2)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["backend"] == "llama.cpp" and record["llm"]["config"]["source"].endswith("(GGUF metadata)")
    assert record["llm"]["config"]["dtype"] == "float16"  # llama.cpp's KV cache, for M_KV
    assert record["runtime"]["name"] == "llama-cpp-python" and record["runtime"]["version"]
    # Measured in fresh workers: llama.cpp's own counters (llama_perf_context) beside our TTFT/TPOT,
    # over the timed generations only: 2 processes x 5 runs (the default), each one prompt batch and
    # new_tokens - 1 one-token evaluations.
    measured = pytester.runpytest_inprocess("--edge-measure", "--edge-report=m.json", "-k", "golden",
                                             "-o", "edge_processes=2")
    measured.assert_outcomes(passed=1)
    block = json.loads((pytester.path / "m.json").read_text())["records"][0]["llm"]
    ours, theirs = block["tpot_ms"]["p50"], block["runtime_timings"]
    assert theirs["source"] == "llama_perf_context" and theirs["eval_tokens"] == 2 * 5 * (block["new_tokens"] - 1)
    assert theirs["prompt_tokens"] == 2 * 5 * block["prompts"][0]["prompt_tokens"]
    # Both clocks time the same decode steps: llama.cpp's per-token time within a factor of ours. Its
    # per-generation mean rate, not the ratio of its sums: one generation another process interrupts
    # inside llama_decode moves a sum (0.395 ms a token against our P50 of 0.045 under a load of 8
    # on 2 cores) and a mean of rates by at most its share.
    per_token = 1000 / theirs["per_generation"]["decode_tokens_per_s"]["mean"]
    # clock bound: a ratio of two clocks over the same decode steps, moved together by the machine's
    # speed, with a factor of 5 each way; how close they read is benchmarks/bench_llama_counters.py's.
    assert 0.2 < per_token / ours < 5, (theirs, ours)


@pytest.mark.parametrize(("backend", "export", "atol"), [
    # f32 GGUF: llama.cpp's own kernels, measured within 1e-3 of ONNX Runtime's logits
    pytest.param("llama.cpp", "gguf_llama/model.gguf", 1e-3, marks=LLAMA_CPP, id="gguf"),
    # export_llama's .pte, XNNPACK float32: measured 1.8e-7
    pytest.param("executorch", "et_llama/model.pte", 1e-5, marks=EXECUTORCH, id="export_llama"),
])
def test_one_network_as_onnx_and_another_export_agrees_across_runtimes(pytester: pytest.Pytester, backend: str,
                                                                       export: str, atol: float) -> None:
    """The builder's ONNX export and another exporter's file of the same weights in one folder: one
    model, two artifacts; the other runtime's tokens and first-step logits are checked against
    ONNX Runtime's golden."""
    _project(pytester, "genai_llama", backends=("onnxruntime-cpu", backend))
    shutil.copy(LLM / export, pytester.path / "models" / "decoder" / Path(export).name)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "golden").assert_outcomes(passed=2)
    pytester.runpytest_inprocess("-k", "golden", "--edge-report=r.json").assert_outcomes(passed=2)
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    accuracy = records[backend]["accuracy"]
    assert accuracy["reference"] == "onnxruntime-cpu" and accuracy["token_agreement"] == 1.0
    assert accuracy["max_abs_err"] < atol, accuracy
    # Teacher-forced over ONNX Runtime's continuation: the same float network, every argmax the same.
    assert accuracy["top1_agreement"] == 1.0 and 0 <= accuracy["kld_mean"] < 1e-6, accuracy


def test_gguf_metadata_is_read_without_llama_cpp(tmp_path: Path) -> None:
    from pytest_edge.backends.llama_cpp.gguf import from_gguf, read_metadata

    config = from_gguf(LLM / "gguf_llama" / "model.gguf")
    assert (config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim) == (2, 4, 2, 16)
    assert config.vocab_size == 256 and config.max_context == 256 and config.dtype == "float16"
    assert read_metadata(LLM / "gguf_llama" / "model.gguf")["general.architecture"] == "llama"
    # Not a GGUF, truncated, or absurd counts: an error naming the file, after a bounded read.
    data = (LLM / "gguf_llama" / "model.gguf").read_bytes()
    for name, content, says in (("a.gguf", b"GGML" + data[4:], "not a GGUF file"),
                                ("b.gguf", data[:200], "truncated GGUF header"),
                                ("c.gguf", data[:16] + (2**40).to_bytes(8, "little") + data[24:], "metadata keys"),
                                ("d.gguf", data[:4] + (7).to_bytes(4, "little") + data[8:], "GGUF version 7")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(EdgeUsageError, match=says) as info:
            from_gguf(tmp_path / name)
        assert name in str(info.value)


def _quantized_project(pytester: pytest.Pytester, quantized: list[str], element_wise: list[str],
                       tested: str = "decoder") -> None:
    """The builder's float export as models/decoder and two tests of models/<tested> (the float
    export's folder itself, or another judged against its goldens with reference=): one judging
    ``quantized`` backends by token agreement and logits cosine (logits_atol=None), one judging
    ``element_wise`` ones element-wise (logits_atol=1e-5), which a quantized build fails."""
    shutil.copytree(LLM / "genai_llama", pytester.path / "models" / "decoder")
    greedy = json.loads((LLM / "genai_llama" / "pytorch_greedy.json").read_text())
    model = f'model="models/{tested}"' + (', reference="models/decoder"' if tested != "decoder" else "")
    pytester.makepyfile(test_builds=f"""
        import pytest

        @pytest.mark.edge_llm({model}, prompts={greedy['prompts']!r}, new_tokens={greedy['new_tokens']},
                              backends={quantized!r}, min_token_agreement=0.5, logits_atol=None, logits_cosine=0.99)
        def test_quantized(edge_llm):
            pass

        @pytest.mark.edge_llm({model}, prompts={greedy['prompts']!r}, new_tokens={greedy['new_tokens']},
                              backends={element_wise!r}, logits_atol=1e-5)
        def test_element_wise(edge_llm):
            pass
    """)


@LLAMA_CPP
def test_a_q8_0_gguf_is_judged_by_token_agreement_and_logits_cosine(pytester: pytest.Pytester) -> None:
    """llama.cpp's converter with --outtype q8_0 (8-bit blocks, as users quantize for a device) of
    the same weights, beside the builder's float ONNX export: judged against ONNX Runtime's float
    golden by token agreement and the first step's logits cosine, not element-wise; the record
    keeps both figures. Element-wise (the default logits_atol) it fails, naming the figure."""
    _quantized_project(pytester, ["onnxruntime-cpu", "llama.cpp"], ["llama.cpp"])
    shutil.copy(LLM / "gguf_llama_q8" / "model.gguf", pytester.path / "models" / "decoder" / "model.gguf")
    from pytest_edge.backends.llama_cpp.gguf import read_metadata

    assert read_metadata(LLM / "gguf_llama_q8" / "model.gguf")["general.file_type"] == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "quantized").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*llama.cpp: prompt * first-step logits max |Δ| 0.00* > logits_atol 1e-05*"])
    records = {(r["test"].split("::")[-1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    quantized = records[("test_quantized", "llama.cpp")]["accuracy"]
    assert quantized["reference"] == "onnxruntime-cpu" and quantized["token_agreement"] == 1.0
    # 8-bit weights: the same greedy tokens, logits close in direction, not element-wise (f32: < 1e-3).
    assert quantized["cosine"] > 0.999 and 1e-3 < quantized["max_abs_err"] < 0.05, quantized
    # Teacher-forced against ONNX Runtime's float continuation, as llama-perplexity judges a Q8_0.
    assert quantized["top1_agreement"] == 1.0 and 0 < quantized["kld_mean"] < 1e-5, quantized


def test_an_int8_onnx_build_is_judged_against_the_float_golden(pytester: pytest.Pytester) -> None:
    """The model builder's ``-p int8`` build of the same weights (MatMulNBits, 8 bits) swapped in for
    the float export, as a change that ships the quantized decoder: judged against the float
    build's golden by token agreement and logits cosine, with the figures in the record;
    element-wise (logits_atol) it fails, naming the figure."""
    import onnx

    int8 = onnx.load(str(LLM / "genai_llama_int8" / "model.onnx"), load_external_data=False)
    quantized_ops = [n for n in int8.graph.node if n.op_type == "MatMulNBits"]
    assert quantized_ops and all(a.i == 8 for n in quantized_ops for a in n.attribute if a.name == "bits")
    # Its own folder, judged against the float export's goldens (reference=): the float golden is
    # recorded from the float artifact, never from the int8 one.
    shutil.copytree(LLM / "genai_llama_int8", pytester.path / "models" / "int8")
    _quantized_project(pytester, ["onnxruntime-cpu"], ["onnxruntime-cpu"], tested="int8")
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "quantized").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: prompt * first-step logits max |Δ| 0.0* > logits_atol 1e-05*"])
    (quantized,) = [r["accuracy"] for r in json.loads((pytester.path / "r.json").read_text())["records"]
                    if "::test_quantized[" in r["test"]]
    # 8-bit weights: the same greedy tokens, logits close in direction (measured: 1.0, 0.99994, 5.2e-3).
    assert quantized["reference"] == "onnxruntime-cpu" and quantized["token_agreement"] == 1.0
    assert quantized["cosine"] > 0.999 and 1e-4 < quantized["max_abs_err"] < 0.05, quantized


@EXECUTORCH
def test_an_export_llama_pte_runs_with_the_configuration_in_its_metadata_methods(pytester: pytest.Pytester) -> None:
    """export_llama's model.pte alone in a folder (-kv --use_sdpa_with_kv_cache -X, max_seq_length
    128): forward(tokens, input_pos [1]) with the KV cache in mutable buffers; greedy tokens equal
    PyTorch's on ExecuTorch's runtime; the configuration from the program's own metadata methods
    and its SDPA operator's cache, none written by hand."""
    _project(pytester, "et_llama", backends=("executorch",))
    record = _recorded_then_checked(pytester)
    config = record["llm"]["config"]
    assert record["backend"] == "executorch" and config["source"].endswith("model.pte (ExecuTorch metadata methods)")
    # The export's own figures, as ExecuTorch's runtime returns them from the metadata methods.
    from executorch.runtime import Runtime

    program = Runtime.get().load_program((LLM / "et_llama" / "model.pte").read_bytes())
    asked = {name: program.load_method(name).execute([])[0] for name in
             ("get_max_context_len", "get_max_seq_len", "get_n_layers", "get_vocab_size", "use_kv_cache")}
    assert asked == {"get_max_context_len": 128, "get_max_seq_len": 128, "get_n_layers": 2, "get_vocab_size": 256,
                     "use_kv_cache": True}, asked
    assert (config["max_context"], config["n_layers"], config["vocab_size"]) == (128, 2, 256)
    # The heads from llama::custom_sdpa's query [1, seq, 4, 16] and k_cache [1, 128, 2, 16]: M_KV
    # is the export's own (genai_llama's builder says the same 4 heads over 2 of size 16).
    assert (config["n_heads"], config["n_kv_heads"], config["head_dim"], config["dtype"]) == (4, 2, 16, "float32")


@EXECUTORCH
def test_a_hand_built_pte_without_metadata_methods_reads_its_hand_written_configuration() -> None:
    from pytest_edge.backends.executorch.llm_metadata import from_pte

    assert from_pte(LLM / "tiny_llm.pte") is None  # no get_* methods: tiny_llm.json is read instead
    assert read_config(LLM / "tiny_llm.pte", metadata=from_pte).source.endswith("tiny_llm.json")


@pytest.mark.parametrize(("tensor_model", "backend", "expected"), [
    pytest.param("tiny_mlp.pte", "executorch", "forward(tokens int64 [[]1, seq[]], input_pos int64 *; found 1 inputs "
                 "(float32 [[]1, 16[]])*", marks=EXECUTORCH, id="executorch"),
    pytest.param("tiny_cnn.tflite", "litert", "prefill*decode*; found no prefill signature and no decode signature; "
                 "the model has no signatures, inputs x float32 [[]1, 3, 32, 32[]]*", marks=LITERT, id="litert"),
])
def test_a_tensor_model_offered_as_an_llm_is_refused_naming_file_and_backend(
        pytester: pytest.Pytester, tensor_model: str, backend: str, expected: str) -> None:
    suffix = Path(tensor_model).suffix
    (pytester.path / "models" / "net").mkdir(parents=True)
    shutil.copy(FIXTURES / tensor_model, pytester.path / "models" / "net" / f"model{suffix}")
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.edge_llm(model="models/net", prompts=[[1, 2]], backends=["{backend}"])
        def test_net(edge_llm):
            pass
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*net*model{suffix} ({backend}): not a decoder in this runtime's LLM convention: "
                                 f"expected {expected}"])


@EXECUTORCH
def test_a_broken_pte_is_an_error_naming_the_file_after_a_bounded_read(tmp_path: Path) -> None:
    from pytest_edge.backends.executorch.llm_metadata import from_pte

    data = (LLM / "et_llama" / "model.pte").read_bytes()
    for name, content, says in (("root.pte", (len(data) + 64).to_bytes(4, "little") + data[4:],
                                 "not a readable ExecuTorch program"),
                                ("ident.pte", data[:4] + b"XX99" + data[8:], "not an ExecuTorch program")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(EdgeUsageError, match=says) as info:
            from_pte(tmp_path / name)
        assert name in str(info.value)


# A third architecture, as a new user brings it (issue #27): a Gemma-2 (tied embeddings scaled by
# sqrt(hidden), four RMSNorms a layer with the +1 offset, GeGLU, soft-capped attention and logits,
# head_dim 32 apart from hidden / heads = 16) whose layer 0 attends a sliding window of 8 tokens,
# shorter than the prompts plus their new tokens (and than the third prompt, 20 tokens, alone). The
# builder's CPU export keeps that layer's cache in a ring of 8 positions (past_sliding_length).

def test_a_gemma2_with_a_sliding_window_generates_pytorchs_tokens_on_onnxruntime_and_genai(
        pytester: pytest.Pytester) -> None:
    """The model builder's Gemma-2 folder, no hand-written configuration: ONNX Runtime (the ring
    fed at its size from genai_config.json) and GenAI's own generator both give PyTorch's greedy
    tokens for every prompt, the 20-token one included; GenAI's logits equal ONNX Runtime's golden."""
    pytest.importorskip("onnxruntime_genai")
    greedy = _project(pytester, "genai_gemma2", backends=("onnxruntime-cpu", "onnxruntime-genai"))
    assert max(map(len, greedy["prompts"])) > 8  # a prompt longer than the window
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=4)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "-v")
    result.assert_outcomes(passed=4)
    records = {(r["test"].split("::")[-1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    config = records[("test_against_the_golden", "onnxruntime-cpu")]["llm"]["config"]
    assert (config["head_dim"], config["sliding_window"], config["sliding_layers"], config["sliding_cache"]) == \
        (32, 8, [0], 8), config
    genai = records[("test_against_the_golden", "onnxruntime-genai")]["accuracy"]
    assert genai["reference"] == "onnxruntime-cpu" and genai["token_agreement"] == 1.0
    assert genai["max_abs_err"] < 1e-5, genai


def test_the_gemma2_configuration_is_read_from_genai_config() -> None:
    config = read_config(LLM / "genai_gemma2" / "model.onnx")
    # head_size from genai_config.json, not hidden_size / heads (64 / 4 = 16).
    assert (config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim) == (2, 4, 2, 32)
    assert (config.sliding_window, config.sliding_layers, config.sliding_cache) == (8, (0,), 8)
    # M_KV: the full layer holds every token, the windowed one its ring of 8 positions.
    assert config.kv_cache_bytes(100) == 2 * 1 * (100 + 8) * 2 * 32 * 4
    assert config.kv_cache_bytes(4) == 2 * 1 * (4 + 8) * 2 * 32 * 4


def test_a_ring_cache_the_configuration_gives_no_size_for_is_refused_naming_it(tmp_path: Path) -> None:
    """genai_config.json without its sliding_window block (say, edited by hand): the graph's layer 0
    cache is a ring of a size nothing gives, so the decoder is refused naming the layer and the key,
    not run into ONNX Runtime's "KV cache capacity (0) must be at least local_window_size (8)"."""
    from pytest_edge.backends.onnxruntime.decoder import OrtDecoder
    from pytest_edge.errors import BackendError

    folder = tmp_path / "gemma"
    shutil.copytree(LLM / "genai_gemma2", folder)
    data = json.loads((folder / "genai_config.json").read_text())
    del data["model"]["decoder"]["sliding_window"]
    (folder / "genai_config.json").write_text(json.dumps(data))
    with pytest.raises(BackendError, match=r"layer\(s\) \[0\] with a ring cache .*past_sliding_length.* that "
                                           r".*genai_config.json gives no size for") as info:
        OrtDecoder(folder / "model.onnx", read_config(folder / "model.onnx"), 1)
    assert "model.decoder.sliding_window" in str(info.value)


def test_the_gemma2_export_slightly_perturbed_fails_naming_the_first_differing_position(
        pytester: pytest.Pytester) -> None:
    import numpy as np

    greedy = _project(pytester, "genai_gemma2")
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "golden").assert_outcomes(passed=1)
    shutil.copytree(pytester.path / "models" / "decoder", pytester.path / "models" / "tuned")
    data = pytester.path / "models" / "tuned" / "model.onnx.data"
    weights = np.frombuffer(data.read_bytes(), np.float32)  # every tensor float32 (-p fp32)
    noise = np.random.default_rng(27).standard_normal(weights.shape).astype(np.float32)
    data.write_bytes((weights * (1 + 0.1 * noise)).astype(np.float32).tobytes())
    _tuned(pytester, pytester.path / "models" / "tuned", greedy)
    result = pytester.runpytest_inprocess("test_tuned.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: prompt [[]*]: token agreement * < 1: first difference at new "
                                 "token * (golden *, got *)*"])


@LLAMA_CPP
def test_the_gemma2_as_gguf_generates_pytorchs_tokens_and_agrees_with_onnxruntime(pytester: pytest.Pytester) -> None:
    """llama.cpp's converter's GGUF of the same Gemma-2 weights: alone, its greedy tokens equal
    PyTorch's (the configuration from its metadata: key_length 32); beside the builder's ONNX, its
    tokens and first-step logits agree with ONNX Runtime's golden."""
    from pytest_edge.backends.llama_cpp.gguf import from_gguf, read_metadata

    config = from_gguf(LLM / "gguf_gemma2" / "model.gguf")
    assert (config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim) == (2, 4, 2, 32)
    assert read_metadata(LLM / "gguf_gemma2" / "model.gguf")["gemma2.attention.sliding_window"] == 8
    _project(pytester, "gguf_gemma2", backends=("llama.cpp",))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    pytester.runpytest_inprocess().assert_outcomes(passed=2)
    shutil.rmtree(pytester.path / "golden")
    shutil.copytree(LLM / "genai_gemma2", pytester.path / "models" / "decoder", dirs_exist_ok=True)
    pytester.makepyfile(test_decoder=pytester.path.joinpath("test_decoder.py").read_text().replace(
        "['llama.cpp']", "['onnxruntime-cpu', 'llama.cpp']"))
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "golden").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("-k", "golden", "--edge-report=r.json")
    result.assert_outcomes(passed=2)
    on_llama = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}["llama.cpp"]
    assert on_llama["accuracy"]["reference"] == "onnxruntime-cpu" and on_llama["accuracy"]["token_agreement"] == 1.0
    assert on_llama["accuracy"]["max_abs_err"] < 1e-3, on_llama["accuracy"]  # measured 2.1e-4 (f16 KV cache)


def test_a_hand_written_configuration_may_give_a_sliding_window(tmp_path: Path) -> None:
    """Where no export configuration is there: sliding_window / sliding_layers / sliding_cache in
    the project's keys; through the worker's Load (asdict, JSON, LlmConfig(**...)) it stays the same."""
    from dataclasses import asdict

    from pytest_edge.backends.decoder_config import LlmConfig

    base = {"vocab_size": 256, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 32, "max_context": 256}
    (tmp_path / "m.json").write_text(json.dumps({**base, "sliding_window": 8, "sliding_layers": [0]}))
    config = LlmConfig.load(tmp_path / "m.json")
    assert (config.sliding_window, config.sliding_layers, config.sliding_cache) == (8, (0,), 8)
    assert LlmConfig(**json.loads(json.dumps(asdict(config)))) == config
    for bad, said in (({"sliding_window": 8, "sliding_layers": [5]}, "must list layer indices in 0..1"),
                      ({"sliding_window": 8, "sliding_cache": 4}, "must be a non-negative integer, not -4"),
                      ({"sliding_window": "8"}, "needs window_size")):
        (tmp_path / "m.json").write_text(json.dumps({**base, **bad}))
        with pytest.raises(EdgeUsageError, match=said) as info:
            LlmConfig.load(tmp_path / "m.json")
        assert "m.json" in str(info.value)


@OLD_TFLITE
@pytest.mark.tflite_runtime_lane  # runs only there
def test_tflite_runtime_refuses_a_litert_torch_export_naming_file_and_backend(pytester: pytest.Pytester) -> None:
    """tflite-runtime 2.14 (NumPy < 2) does not know the builtin ops litert-torch's converter
    writes: each test of the model is an error that names the file, the backend and the runtime's
    own reason, and the session goes on."""
    _project(pytester, "litert_llama", backends=("litert",))
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*model.tflite (litert): cannot read: Op builtin_code out of range*"])


@LITERT
def test_a_litert_torch_generative_export_runs_on_litert_with_its_configuration_from_the_signatures(
        pytester: pytest.Pytester) -> None:
    """litert-torch's generative converter's model.tflite alone in a folder (prefill_32 and decode
    over an external KV cache of 128 positions): greedy tokens equal PyTorch's on LiteRT's
    interpreter, the third prompt (40 tokens) prefilled in two calls; the configuration from the
    signatures and the attention operator, none written by hand."""
    greedy = _project(pytester, "litert_llama", backends=("litert",))
    assert max(len(p) for p in greedy["prompts"]) > 33  # longer than one prefill call
    record = _recorded_then_checked(pytester)
    config = record["llm"]["config"]
    assert record["backend"] == "litert" and config["source"].endswith("model.tflite (LiteRT prefill/decode signatures)")
    assert record["accuracy"]["token_agreement"] == 1.0
    # genai_llama's builder says the same: 2 layers, 4 heads over 2 of size 16; the cache holds 128.
    assert (config["vocab_size"], config["n_layers"], config["n_heads"], config["n_kv_heads"], config["head_dim"],
            config["max_context"], config["dtype"]) == (256, 2, 4, 2, 16, 128, "float32"), config
    assert record["llm"]["kv_cache"].startswith("static")


@LITERT
def test_the_litert_export_beside_the_builders_onnx_agrees_with_onnxruntimes_golden(pytester: pytest.Pytester) -> None:
    """The same Llama weights (genai_llama's) as the builder's model.onnx and litert-torch's
    model.tflite in one folder: LiteRT checked against ONNX Runtime's golden (the reference),
    tokens equal and first-step logits within the default logits_atol."""
    _project(pytester, "genai_llama", backends=("onnxruntime-cpu", "litert"))
    shutil.copy(LLM / "litert_llama" / "model.tflite", pytester.path / "models" / "decoder" / "model.tflite")
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-backends=onnxruntime-cpu").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=4)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    litert = next(r for r in records if r["backend"] == "litert" and "golden" in r["test"])
    assert litert["accuracy"]["reference"] == "onnxruntime-cpu" and litert["accuracy"]["token_agreement"] == 1.0
    assert litert["accuracy"]["max_abs_err"] < 1e-3, litert["accuracy"]
    assert litert["accuracy"]["top1_agreement"] == 1.0 and litert["accuracy"]["kld_mean"] < 1e-6, litert["accuracy"]


@LITERT
def test_litert_reads_the_converters_int8_transposed_cache_export_with_two_prefill_signatures(
        pytester: pytest.Pytester) -> None:
    """litert_llama_int8: the converter's default dynamic_int8, prefill_8 and prefill_32, the
    transposed cache (K [1, 2, 128, 16], V [1, 2, 16, 128]; the attention then a grouped
    BATCH_MATMUL, no SDPA composite): the same configuration read, PyTorch's greedy tokens on
    LiteRT (the 40-token prompt in a prefill_32 and a prefill_8 call)."""
    from pytest_edge.backends.litert.decoder import from_tflite

    config = from_tflite(LLM / "litert_llama_int8" / "model.tflite")
    assert (config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim, config.max_context) == (2, 4, 2, 16, 128)
    _project(pytester, "litert_llama_int8", backends=("litert",))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    pytester.runpytest_inprocess().assert_outcomes(passed=2)


class _EditedSignatures:
    """The real litert_llama export's signatures as LiteRT reads them, with ``edit`` applied to their
    input details: what a differently exported file would say, for the layout reader alone."""

    def __init__(self, interpreter, edit) -> None:
        self.interpreter, self.edit = interpreter, edit

    def get_signature_list(self):
        return self.interpreter.get_signature_list()

    def get_signature_runner(self, name):
        runner = self.interpreter.get_signature_runner(name)
        inputs = self.edit(name, dict(runner.get_input_details()))
        return type("Runner", (), {"get_input_details": lambda _: inputs,
                                   "get_output_details": lambda _: runner.get_output_details()})()

    def __getattr__(self, name):
        return getattr(self.interpreter, name)


@LITERT
@pytest.mark.parametrize("edit, refusal", [
    (lambda name, ins: {k: v for k, v in ins.items() if k != "input_pos"}, "decode has no input_pos input"),
    (lambda name, ins: {**ins, "tokens": {**ins["tokens"], "shape": np.array([1, 0])}} if name != "decode" else ins,
     "takes 0 tokens"),
    (lambda name, ins: {("kv_cache_k_00" if k == "kv_cache_k_0" else k): v for k, v in ins.items()},
     "no kv_cache_k_N / kv_cache_v_N pair for each layer"),
], ids=["no-input-pos", "empty-prefill", "misnamed-cache"])
def test_a_generative_tflite_of_another_shape_is_refused_naming_the_file(edit, refusal) -> None:
    """Signatures with no input_pos, a prefill of 0 tokens (which would never move the prompt on)
    or a cache named off the pattern: a BackendError naming the file and the backend, not a
    KeyError or an endless loop."""
    from pytest_edge.backends.litert.backend import interpreter_module
    from pytest_edge.backends.litert.decoder import read_layout
    from pytest_edge.errors import BackendError

    path = LLM / "litert_llama" / "model.tflite"
    module = interpreter_module()
    interpreter = module.Interpreter(model_path=str(path))
    with pytest.raises(BackendError, match=refusal) as refused:
        read_layout(_EditedSignatures(interpreter, edit), path)
    assert str(path) in str(refused.value) and "litert" in str(refused.value)


@LITERT
def test_a_configuration_that_does_not_describe_the_export_is_refused() -> None:
    """A hand-written configuration (the <stem>.json of an export whose signatures do not give the
    query heads) is checked against the signatures: its KV-cache estimate would otherwise be another
    model's. The export's own configuration opens it."""
    import dataclasses

    from pytest_edge.backends.litert.decoder import LiteRTDecoder, from_tflite
    from pytest_edge.errors import BackendError

    path = LLM / "litert_llama" / "model.tflite"
    own = from_tflite(path)
    LiteRTDecoder(path, own, 1).reset()
    wrong = dataclasses.replace(own, n_layers=own.n_layers + 2, source="model.json")
    with pytest.raises(BackendError) as refused:
        LiteRTDecoder(path, wrong, 1)
    message = str(refused.value)
    assert str(path) in message and "(litert)" in message and "model.json" in message
    assert f"n_layers {own.n_layers + 2} (configuration) but {own.n_layers} (signatures)" in message
