"""@pytest.mark.edge_llm: greedy generation against token goldens, budgets on TTFT/TPOT/memory, the
context sweep, on the real runtimes with the tiny decoder of fixtures/llm (fixtures/make_llm.py).
No timing is asserted: budgets are impossible (1 ns) or generous (60 s)."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from pytest_edge.checks import Finding, check_generation
from pytest_edge.errors import BackendError, EdgeUsageError, GoldenError
from pytest_edge.backends.decoder_config import LlmConfig
from pytest_edge.golden.tokens import TokenGolden, TokenGoldenMeta, golden_path, read_golden, write_golden
from pytest_edge.llm.marker import BUDGET_KEYWORDS, parse_llm_marker
from pytest_edge.llm.metrics import FirstStepLogits, logits_figures, logits_messages, token_agreement, token_message
from pytest_edge.core.generation_figures import (ContextStop, ContextSweep, GenerationFigures, GenerationProcessFigures,
                                                 TimingPercentiles)
from pytest_edge.core.generation_record import GenerationRecord
from pytest_edge.judging.generation import _ended, context_lengths, context_sweep
from pytest_edge.backends import get_backend
from pytest_edge.backends.decoder import generate
from pytest_edge.llm.marker import check_prompt

LLM = Path(__file__).resolve().parent.parent / "fixtures" / "llm"
FIXTURES = LLM.parent
CONFIG = LlmConfig.load(LLM / "tiny_llm.json")
ORT = "onnxruntime-cpu"

# ---------------------------------------------------------------- pure logic


@given(st.lists(st.integers(0, 63), min_size=1, max_size=32), st.data())
def test_token_agreement_names_the_first_difference(tokens: list[int], data: st.DataObject) -> None:
    assert token_agreement(tokens, tokens) == (1.0, None)
    position = data.draw(st.integers(0, len(tokens) - 1))
    changed = list(tokens)
    changed[position] = (changed[position] + 1) % 64
    agreement, first = token_agreement(tokens, changed)
    assert first == position and agreement == (len(tokens) - 1) / len(tokens)
    message = token_message(tokens, changed, agreement, first, 1.0)
    assert f"first difference at new token {position} (golden {tokens[position]}, got {changed[position]})" in message
    assert token_message(tokens, changed, agreement, first, agreement) is None  # within the budget


def test_token_agreement_counts_missing_tokens_as_different() -> None:
    assert token_agreement([1, 2, 3, 4], [1, 2]) == (0.5, 2)


def test_first_step_logits_are_judged_by_the_tensor_figures_rules() -> None:
    """One metrics module: the decoder's logits figures are accuracy.metrics', with its NaN and
    underflow handling (a tiny vector's cosine with itself is 1, not 0.9997)."""
    tiny = np.array([1.6e-161, 3.2e-161, -1.6e-161])
    assert logits_figures(tiny, tiny) == FirstStepLogits(max_abs_err=0.0, cosine=1.0)
    both_nan = np.array([np.nan, 1.0, 2.0])
    assert logits_figures(both_nan, both_nan.copy()).max_abs_err == 0.0
    one_nan = logits_figures(np.array([0.5, 1.0, 2.0]), both_nan)
    assert one_nan == FirstStepLogits(None, None)  # as a tensor record keeps it: no NaN in JSON
    assert logits_messages(one_nan, atol=1e-3, min_cosine=0.99) == [
        "first-step logits max |Δ| not a number (NaN or Inf in the logits) > logits_atol 0.001",
        "first-step logits cosine not a number (NaN or Inf in the logits) < logits_cosine 0.99"]
    assert logits_messages(one_nan, atol=None, min_cosine=None) == []
    assert logits_figures(np.zeros(4), np.zeros(5)).shape == ((4,), (5,))


@given(st.integers(1, 4096), st.integers(1, 8))
def test_kv_cache_estimate_is_the_formula(tokens: int, batch: int) -> None:
    c = CONFIG  # 2 layers, 2 kv heads (4 query heads: GQA), head_dim 8, float32
    assert (c.n_heads, c.n_kv_heads) == (4, 2)
    assert c.kv_cache_bytes(tokens, batch) == 2 * 2 * batch * tokens * 2 * 8 * 4


def test_budget_findings_name_backend_figure_and_budget() -> None:
    figures = GenerationRecord(
        measured=GenerationFigures(ttft_ms=TimingPercentiles(2.0, None), tpot_ms=TimingPercentiles(0.5, None),
                                   decode_tokens_per_s=2000.0, peak_memory_mb=40.0),
        context=ContextSweep((), 256, None, False))
    generous = {"ttft_ms": 60000, "tpot_ms": 60000, "min_decode_tps": 0.001, "peak_memory_mb": 1e6, "max_context": 64}
    assert check_generation(figures, generous, "executorch") == []
    found = check_generation(figures, {"ttft_ms": 1e-6, "min_decode_tps": 1e9, "max_context": 512,
                                       "min_prefill_tps": 1.0, "max_load_ms": 5.0}, "executorch")
    assert [finding.message for finding in found] == [
        "executorch: TTFT P50 2 ms exceeds the budget ttft_ms=1e-06 ms",
        "executorch: decode tokens/s 2000 tokens/s is under the budget min_decode_tps=1e+09 tokens/s",
        "executorch: prefill tokens/s was not measured; budget min_prefill_tps=1 tokens/s",
        "executorch: load time was not measured; budget max_load_ms=5 ms",
        "executorch: longest stable context 256 tokens is under the budget max_context=512 tokens"]
    (huge,) = check_generation(figures, {"max_context": 2**24}, "executorch")  # a count, written whole
    assert huge.message.endswith("is under the budget max_context=16777216 tokens")
    assert found[0] == Finding("ttft_ms", "TTFT P50", 2.0, 1e-6, "ms", found[0].message)
    assert (found[2].check, found[2].value, found[2].unit) == ("min_prefill_tps", None, "tokens/s")
    assert [f"{f.check} {f.figure}" for f in found[3:]] == ["max_load_ms load time",
                                                             "max_context longest stable context"]


def test_the_markers_budgets_are_read_through_the_table() -> None:
    spec = parse_llm_marker((), {"model": "m", "prompts": [[1]], "ttft_ms": "5ms", "peak_memory_mb": "1GB"})
    assert spec.budgets(check_generation) == {"max_load_ms": None, "peak_memory_mb": 1024.0, "ttft_ms": 5.0,
                                              "tpot_ms": None, "min_decode_tps": None, "min_prefill_tps": None,
                                              "max_context": None}
    assert spec.needs_measurement and spec.sweep_memory_mb == 1024.0
    assert not parse_llm_marker((), {"model": "m", "prompts": [[1]]}).needs_measurement


def test_marker_parsing() -> None:
    spec = parse_llm_marker(("tiny_llm",), {"prompts": lambda: [[1, 2], [3]], "tpot_ms": 5})
    assert spec.prompts == ((1, 2), (3,)) and spec.needs_measurement and not spec.needs_context_sweep
    assert parse_llm_marker((), {"model": "m", "prompts": [4, 5]}).prompts == ((4, 5),)  # one prompt, flat
    with pytest.raises(EdgeUsageError, match="unknown keyword.*ttft"):
        parse_llm_marker((), {"model": "m", "prompts": [[1]], "ttft": 3})
    with pytest.raises(EdgeUsageError, match="token ids.*'hello'"):
        parse_llm_marker((), {"model": "m", "prompts": ["hello"]})
    with pytest.raises(EdgeUsageError, match="min_token_agreement=1.5"):
        parse_llm_marker((), {"model": "m", "prompts": [[1]], "min_token_agreement": 1.5})


@pytest.mark.parametrize(("keyword", "value", "parsed"), [
    ("ttft_ms", "50ms", 50.0), ("tpot_ms", "2s", 2000.0), ("peak_memory_mb", "1.5GB", 1536.0),
    ("memory_limit_mb", "512MB", 512.0), ("max_load_ms", 3, 3.0), ("min_decode_tps", 12, 12.0)])
def test_llm_budgets_take_the_edge_markers_units(keyword: str, value: object, parsed: float) -> None:
    spec = parse_llm_marker((), {"model": "m", "prompts": [[1]], keyword: value})
    assert (spec.budget(keyword) if keyword in BUDGET_KEYWORDS else getattr(spec, keyword)) == parsed


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("ttft_ms", float("nan"), "edge_llm ttft_ms: nan must be a finite number >= 0"),
    ("tpot_ms", "fast", "edge_llm tpot_ms: cannot parse 'fast'"),
    ("peak_memory_mb", -1, "must be a finite number >= 0"),
    ("memory_limit_mb", 0, "memory_limit_mb=0.0: at least 1 MB"),
    ("min_prefill_tps", [1], "edge_llm min_prefill_tps: cannot parse"),
    ("max_context", "4k", "edge_llm max_context: expected an integer >= 2"),
    ("runs", 0, "edge_llm runs: expected an integer >= 1"),
    ("threads", True, "edge_llm threads: expected an integer >= 1"),
    ("logits_atol", float("inf"), "edge_llm logits_atol: inf must be a finite number")])
def test_bad_llm_budgets_are_usage_errors_naming_the_keyword(keyword: str, value: object, message: str) -> None:
    with pytest.raises(EdgeUsageError, match=re.escape(message)):
        parse_llm_marker((), {"model": "m", "prompts": [[1]], keyword: value})


def test_prompts_are_refused_before_the_runtime_sees_them() -> None:
    assert check_prompt(np.array([1, 2]), 4, CONFIG, "m (b)") == [1, 2]
    with pytest.raises(EdgeUsageError, match=r"m \(b\): token id 64 is outside the vocabulary \[0, 64\)"):
        check_prompt([1, 64], 4, CONFIG, "m (b)")
    with pytest.raises(EdgeUsageError, match="1020 tokens \\+ 8 new tokens = 1028 exceed the model's maximum "
                                             "context of 1024"):
        check_prompt([1] * 1020, 8, CONFIG, "m (b)")
    with pytest.raises(EdgeUsageError, match="empty prompt"):
        check_prompt([], 1, CONFIG, "m (b)")


def test_a_bad_configuration_is_named(tmp_path: Path) -> None:
    with pytest.raises(EdgeUsageError, match=r"m.json: no LLM configuration \(a JSON file beside the model with "
                                             r"vocab_size, n_layers"):
        LlmConfig.load(tmp_path / "m.json")
    (tmp_path / "m.json").write_text('{"vocab_size": 8, "n_layers": 1, "n_heads": 3, "n_kv_heads": 2}')
    with pytest.raises(EdgeUsageError, match="m.json: LLM configuration lacks head_dim, max_context"):
        LlmConfig.load(tmp_path / "m.json")
    (tmp_path / "m.json").write_text('{"vocab_size": 8, "n_layers": 1, "n_heads": 3, "n_kv_heads": 2, '
                                     '"head_dim": 4, "max_context": 16}')
    with pytest.raises(EdgeUsageError, match="3 attention heads are not a multiple of 2 key/value heads"):
        LlmConfig.load(tmp_path / "m.json")


GOOD_CONFIG = {"vocab_size": 100, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "max_context": 64}


@pytest.mark.parametrize(("change", "said"), [
    ({"n_kv_heads": 0}, "needs n_kv_heads (positive integers), which the KV-cache estimate and the prompt bounds "
                        "need; it has n_kv_heads=0"),
    ({"n_layers": "2"}, "it has n_layers='2'"),
    ({"n_layers": [2]}, "it has n_layers=[2]"),
    ({"head_dim": float("nan")}, "it has head_dim=nan"),
    ({"n_heads": True}, "it has n_heads=True"),
    ({"n_layers": 10**6}, "the decoder configuration says n_layers 1,000,000, past what any decoder has"),
    ({"vocab_size": 10**12}, "says vocab_size 1,000,000,000,000"),
    ({"dtype": 5}, "dtype 5 is not one of float32"),
])
def test_a_hostile_configuration_is_a_usage_error_naming_the_file_and_key(tmp_path: Path, change: dict,
                                                                           said: str) -> None:
    """Wrong types, zero heads, NaN, absurd counts: refused before anything is divided or built per
    layer (no TypeError, no ZeroDivisionError, no gigabytes of input names)."""
    (tmp_path / "m.json").write_text(json.dumps({**GOOD_CONFIG, **change}))
    with pytest.raises(EdgeUsageError, match=re.escape(said)) as error:
        LlmConfig.load(tmp_path / "m.json")
    assert str(tmp_path / "m.json") in str(error.value) and len(str(error.value)) < 600


def test_context_lengths_double_up_to_the_cap() -> None:
    assert context_lengths(64, 1024) == [64, 128, 256, 512, 1024]
    assert context_lengths(64, 100) == [64, 100]


def test_golden_round_trip_and_bad_files(tmp_path: Path) -> None:
    path = golden_path(tmp_path, "m", [1, 2, 3])
    write_golden(path, TokenGolden([1, 2, 3], [5, 6], np.arange(4, dtype=np.float32), TokenGoldenMeta(reference_backend=ORT)))
    golden = read_golden(path, [1, 2, 3])
    assert golden.tokens == [5, 6] and golden.meta == TokenGoldenMeta(reference_backend=ORT)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing temporary left
    with pytest.raises(GoldenError, match="no LLM golden .* for prompt \\[9\\]: record it with --edge-update-golden"):
        read_golden(golden_path(tmp_path, "m", [9]), [9])
    path.write_bytes(b"not a zip")
    with pytest.raises(GoldenError, match="unreadable LLM golden"):
        read_golden(path, [1, 2, 3])


# ---------------------------------------------------------------- real runtimes


def test_onnx_and_executorch_decode_the_same_tokens() -> None:
    pytest.importorskip("executorch")
    prompt = [1, 2, 3, 4, 5]
    ort_run = generate(get_backend(ORT).decoders.open(LLM / "tiny_llm.onnx", CONFIG, 1), prompt, 12)
    et = get_backend("executorch").decoders.open(LLM / "tiny_llm.pte", CONFIG, 1)
    et_run = generate(et, prompt, 12)
    assert ort_run.tokens == et_run.tokens and len(et_run.step_s) == 11
    assert np.allclose(ort_run.first_logits, et_run.first_logits, atol=1e-4)
    assert generate(et, [7, 8], 12).tokens != et_run.tokens  # the static cache restarts at position 0
    assert generate(et, prompt, 12).tokens == et_run.tokens


def test_a_model_without_the_llm_signature_names_what_was_expected() -> None:
    with pytest.raises(BackendError, match=r"tiny_mlp.onnx \(onnxruntime-cpu\): not a decoder .* expected inputs "
                                           r"input_ids, \[attention_mask\], \[position_ids\], past_key_values.N.key/value.*found inputs \['x'\]"):
        get_backend(ORT).decoders.open(FIXTURES / "tiny_mlp.onnx", CONFIG, 1)


@pytest.fixture(scope="module")
def sweep_pool():
    """The workers a context sweep starts its fresh ones from, as a session's pool."""
    from pytest_edge.worker.pool import WorkerPool

    pool = WorkerPool(True, 120.0, on_crash=lambda backend: None)
    yield pool
    pool.close()


def test_context_sweep_stops_where_the_memory_budget_is_exceeded(sweep_pool) -> None:
    sweep = context_sweep(sweep_pool, ORT, LLM / "tiny_llm.onnx", CONFIG, [32, 64], memory_budget_mb=1e-6)
    assert sweep.longest_stable is None and sweep.stopped == ContextStop(tokens=32, reason="over memory budget")
    assert [p.tokens for p in sweep.points] == [32]  # nothing longer is tried
    assert sweep.points[0].kv_cache_estimate_mb == CONFIG.kv_cache_bytes(32) / 2**20
    assert sweep.os_killed is False


def test_context_sweep_reports_a_failed_allocation_as_where_it_stopped(sweep_pool) -> None:
    # 30 MB more than the runtime alone: a 1024-token prefill's attention scores do not fit.
    sweep = context_sweep(sweep_pool, ORT, LLM / "tiny_llm.onnx", CONFIG, [16, 1024], None, memory_limit_mb=30)
    assert [p.status for p in sweep.points] == ["ok", "out of memory"]
    assert sweep.longest_stable == 16 and sweep.stopped is not None and sweep.stopped.tokens == 1024
    # Which allocation fails first varies (a std::bad_alloc, or ONNX Runtime's arena saying so).
    reason = sweep.stopped.reason
    assert ("bad_alloc" in reason or "Failed to allocate memory" in reason) and (sweep.points[0].peak_memory_mb or 0) > 0


@pytest.mark.parametrize("ended, printed, status, error", [
    ("signal SIGKILL", "", "killed", "killed by SIGKILL (the OOM killer, or a kill from outside)"),
    # A runtime that aborted on a failed allocation ran out of memory under the limit: no OOM killer.
    ("signal SIGABRT", "loading\nterminate called after throwing an instance of 'std::bad_alloc'", "out of memory",
     "ended by SIGABRT: terminate called after throwing an instance of 'std::bad_alloc'"),
    ("signal SIGSEGV", "", "crashed", "ended by SIGSEGV"),
    ("exit status 3", "Fatal: no kernel", "crashed", "ended by exit status 3: Fatal: no kernel"),
])
def test_a_sweep_point_whose_worker_died_says_how_as_recorded(ended: str, printed: str, status: str,
                                                               error: str) -> None:
    from pytest_edge.errors import BackendCrash

    assert _ended(BackendCrash("the runtime crashed", ended, printed)) == (status, error)


# ---------------------------------------------------------------- the marker, end to end


@pytest.fixture
def llm_project(pytester: pytest.Pytester) -> Path:
    folder = pytester.path / "models"
    shutil.copytree(LLM, folder)
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_processes = 1\n")
    return folder


def _report(pytester: pytest.Pytester) -> list[dict]:
    return [r for r in json.loads((pytester.path / "r.json").read_text())["records"] if r["verdict"] != "skipped"]


GENERATE = """
import pytest

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3, 4, 5], [7, 8]], new_tokens=8, backends=[{backends}])
def test_generate(edge_llm):
    assert len(edge_llm.generate([1, 2, 3], 4)) == 4
"""


def test_golden_lifecycle_missing_then_recorded_then_passing(pytester: pytest.Pytester, llm_project: Path) -> None:
    pytester.makepyfile(GENERATE.format(backends='"onnxruntime-cpu", "executorch"'))
    # ExecuTorch joins in the last run only (its import is the slow part): checked against ORT's goldens.
    missing = pytester.runpytest_inprocess("--edge-report=r.json", f"--edge-backends={ORT}")
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*no LLM golden *golden/tiny_llm/llm/prompt-*.npz for prompt [[]1, 2, 3, 4, 5[]]: "
                                  "record it with --edge-update-golden*"])
    assert not (pytester.path / "golden").exists()
    pytester.runpytest_inprocess("--edge-update-golden", f"--edge-backends={ORT}").assert_outcomes(passed=1)
    assert len(list((pytester.path / "golden/tiny_llm/llm").glob("prompt-*.npz"))) == 2
    passing = pytester.runpytest_inprocess("--edge-report=r.json")
    have_executorch = importlib.util.find_spec("executorch") is not None  # not in the tflite-runtime lane
    passing.assert_outcomes(passed=2) if have_executorch else passing.assert_outcomes(passed=1, skipped=1)
    records = {r["backend"]: r for r in _report(pytester)}
    assert set(records) == ({ORT, "executorch"} if have_executorch else {ORT})
    for record in records.values():
        assert record["accuracy"]["reference"] == ORT and record["accuracy"]["token_agreement"] == 1.0
        first = record["llm"]["prompts"][0]
        assert first["tokens"] == first["golden_tokens"] and len(first["tokens"]) == 8
        assert record["load_ms"] is None  # nothing measured without a budget: null, not made up


def test_a_required_backend_that_cannot_run_fails(pytester: pytest.Pytester, llm_project: Path) -> None:
    pytester.makepyfile(GENERATE.format(backends='"onnxruntime-cpu", "litert"'))
    result = pytester.runpytest_inprocess("--edge-require=litert", "--edge-backends=litert")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*litert is required (--edge-require) but cannot run tiny_llm: no .tflite artifact "
                                 "for tiny_llm*"])


def test_a_changed_model_fails_naming_the_first_differing_token(pytester: pytest.Pytester, llm_project: Path) -> None:
    """A tuned copy judged against the float model's goldens (reference=) fails naming the first
    token that differs; the float model's own artifact changed makes its golden stale, an error
    naming both hashes, as a tensor golden's (not a note on whatever fails)."""
    import onnx
    from onnx import numpy_helper

    pytester.makepyfile(GENERATE.format(backends='"onnxruntime-cpu"'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    model = onnx.load(str(llm_project / "tiny_llm.onnx"))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:  # the same graph with perturbed weights
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32 and array.ndim == 2:
            init.CopyFrom(numpy_helper.from_array(array + rng.normal(0, 0.02, array.shape).astype(np.float32), init.name))
    (llm_project / "tuned").mkdir()
    onnx.save(model, str(llm_project / "tuned" / "tiny_llm.onnx"))
    shutil.copy(llm_project / "tiny_llm.json", llm_project / "tuned" / "tiny_llm.json")
    pytester.makepyfile(test_tuned=GENERATE.format(backends='"onnxruntime-cpu"').replace(
        'model="tiny_llm"', 'model="tuned/tiny_llm", reference="tiny_llm"'))
    result = pytester.runpytest_inprocess("test_tuned.py", "--edge-report=r.json")
    result.assert_outcomes(failed=1)
    (record,) = _report(pytester)
    prompt = record["llm"]["prompts"][0]
    first = prompt["first_difference"]
    assert first is not None and prompt["tokens"][first] != prompt["golden_tokens"][first]
    result.stdout.fnmatch_lines([f"*onnxruntime-cpu: prompt [[]1, 2, 3, 4, 5[]]: token agreement * < 1: first "
                                 f"difference at new token {first} (golden {prompt['golden_tokens'][first]}, "
                                 f"got {prompt['tokens'][first]}); golden *, got *"])
    assert "4 check(s) failed" in result.stdout.str()  # tokens and logits of 2 prompts
    # The golden's own artifact changed: stale, for its own test and for the tuned one alike.
    onnx.save(model, str(llm_project / "tiny_llm.onnx"))
    stale = pytester.runpytest_inprocess()
    assert stale.ret != 0 and "passed" not in stale.stdout.str().splitlines()[-1]
    stale.stdout.fnmatch_lines(["*golden for 'tiny_llm' is stale: *tiny_llm.onnx has sha256 *, the golden "
                                "(*prompt-*.npz) was recorded for sha256 *; if the change is intended, refresh it "
                                "with*"])


def test_figures_in_the_record_and_budgets_named(pytester: pytest.Pytester, llm_project: Path) -> None:
    pytester.makepyfile("""
        import pytest

        common = dict(model="tiny_llm", prompts=[[1, 2, 3, 4, 5]], new_tokens=6, backends=["onnxruntime-cpu"],
                      warmup=1, runs=2)

        @pytest.mark.edge_llm(**common, ttft_ms=60000, tpot_ms=60000, min_decode_tps=0.001, peak_memory_mb=4000,
                              contexts=[16, 32], max_context=32)
        def test_generous():
            pass

        @pytest.mark.edge_llm(**common, ttft_ms=1e-6, tpot_ms=1e-6, min_prefill_tps=1e12)
        def test_impossible():
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1, failed=1)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: TTFT P50 * ms exceeds the budget ttft_ms=1e-06 ms*",
                                 "*onnxruntime-cpu: TPOT P50 * ms exceeds the budget tpot_ms=1e-06 ms*",
                                 "*onnxruntime-cpu: prefill tokens/s * is under the budget min_prefill_tps=1e+12*",
                                 "*pytest-edge LLM generation*",
                                 "*test_generous[[]tiny_llm-onnxruntime-cpu[]]: TTFT P50 * ms (5 tokens), TPOT P50 * ms, "
                                 "decode * tokens/s, longest stable context 32"])
    record = next(r for r in _report(pytester) if "generous" in r["test"])
    llm = record["llm"]
    assert llm["prompt_tokens"] == 5 and llm["ttft_samples"] == 2 and llm["tpot_samples"] == 2 * 5
    for figure in (llm["ttft_ms"]["p50"], llm["ttft_ms"]["p90"], llm["tpot_ms"]["p50"], llm["tpot_ms"]["p90"],
                   llm["prefill_tokens_per_s"], llm["decode_tokens_per_s"], record["load_ms"]):
        assert figure > 0
    assert record["peak_memory_mb"] is not None and record["steady_memory_mb"] is not None
    assert llm["kv_cache_estimate_mb"] == CONFIG.kv_cache_bytes(5 + 6) / 2**20
    assert [p["tokens"] for p in llm["context"]["points"]] == [16, 32] and llm["context"]["longest_stable"] == 32
    assert record["warmup_runs"] == 1 and record["measured_runs"] == 2
    assert "budget_findings" not in record  # within every budget: none kept
    strict = next(r for r in _report(pytester) if "generous" not in r["test"])
    found = {f["check"]: f for f in strict["budget_findings"]}  # as a tensor record keeps them
    assert set(found) >= {"ttft_ms", "tpot_ms", "min_prefill_tps"}, found
    # clock bound: a budget of 1 ns, which no machine meets.
    assert found["ttft_ms"]["budget"] == 1e-6 and found["ttft_ms"]["value"] > 1e-6
    assert all(f["message"] in strict["violations"] for f in strict["budget_findings"])


def test_the_llm_gate_is_the_one_gate_measuring_a_suspect_again() -> None:
    """TTFT/TPOT go through the package's gate: a figure above the threshold is measured again in
    fresh processes and fails only when it is above it twice and significant over all pairs."""
    from pytest_edge.judging.generation import GenerationMeasurement as M, as_gated, judge

    old = [GenerationProcessFigures(1.0, 0.50), GenerationProcessFigures(1.02, 0.51),
           GenerationProcessFigures(0.99, 0.49)]
    slower = [replace(p, tpot_p50_ms=p.tpot_p50_ms * 1.5) for p in old]
    asked: list[int] = []

    def again(new: list, rounds_old: list):
        def measure(rounds: int) -> list:
            asked.append(rounds)
            return [M(processes=tuple((new * 2)[:rounds])), M(processes=tuple((rounds_old * 2)[:rounds]))]
        return measure

    common = {"paired": True, "processes": 3, "max_regression": 0.10, "strict": False, "source": "base/m.pte"}
    twin = as_gated("executorch", M(processes=tuple(old)))
    result = judge("executorch", M(processes=tuple(slower)), twin, measure_again=again(slower, old), **common)
    assert asked == [5] and [f.figure for f in result.findings] == ["TPOT P50"]
    (failure,) = result.failures
    assert fnmatch.fnmatch(failure, "executorch: TPOT P50 0.75* ms (geometric mean of 8 process TPOT P50s) is +50.0% "
                                    "against the baseline twin 0.50* ms (allowed +10%; paired t=* over 8 A/B pairs*")
    assert "measured twice in fresh processes: +50.0%, then +50.0%" in failure
    assert result.summary.mode == "ab" and result.summary.verdict == "failed"
    # Slower once, unchanged when measured again: a note, never a failure.
    blip = judge("executorch", M(processes=tuple(slower)), twin, measure_again=again(old, old), **common)
    assert blip.failures == [] and any("TPOT P50 looked +50.0% slower" in n for n in blip.notes)
    unchanged = judge("executorch", M(processes=tuple(old)), twin, measure_again=again(old, old), **common)
    assert unchanged.failures == [] and unchanged.summary.remeasured is False


def test_the_llm_gate_tells_a_slower_machine_from_a_slower_decoder() -> None:
    """The busy-machine rule of tensor models, for decoders: each generation process carries the
    CPU probe timed around its generations and its fastest whole generation (``min``). Processes
    whose probe ran 30 % slower with the fastest generation unmoved are a slower machine
    (inconclusive: a warning, a failure under strict); a 1.5x slower decoder on that same busy
    machine moves its fastest generation too and fails."""
    from pytest_edge.judging.generation import GenerationMeasurement as M, as_gated, judge

    old = [GenerationProcessFigures(1.0, 0.50, probe_us=100.0, fastest_ms=4.0),
           GenerationProcessFigures(1.02, 0.51, probe_us=101.0, fastest_ms=4.02),
           GenerationProcessFigures(0.99, 0.49, probe_us=99.0, fastest_ms=3.98)]
    busy = [replace(p, tpot_p50_ms=p.tpot_p50_ms * 1.5, probe_us=p.probe_us * 1.3) for p in old]
    slower = [replace(p, fastest_ms=p.fastest_ms * 1.5) for p in busy]

    def again(new: list):
        return lambda rounds: [M(processes=tuple((new * 3)[:rounds])), M(processes=tuple((old * 3)[:rounds]))]

    common = {"paired": True, "processes": 3, "max_regression": 0.10, "source": "base/m.pte"}
    twin = as_gated("executorch", M(processes=tuple(old)))
    excused = judge("executorch", M(processes=tuple(busy)), twin, measure_again=again(busy), strict=False, **common)
    assert excused.failures == [] and excused.summary.verdict == "inconclusive" and excused.inconclusive
    strict = judge("executorch", M(processes=tuple(busy)), twin, measure_again=again(busy), strict=True, **common)
    assert strict.failures and "CPU probe +30" in strict.failures[0]
    caught = judge("executorch", M(processes=tuple(slower)), twin, measure_again=again(slower), strict=False, **common)
    assert caught.failures and "fastest runs +50" in caught.failures[0]


@pytest.mark.timing
def test_ab_gate_catches_a_deeper_decoder_and_passes_an_unchanged_one(pytester: pytest.Pytester,
                                                                     llm_project: Path) -> None:
    """A six-times-deeper decoder (fixtures/llm/deep: 12 layers, same file name) decodes each token with
    several times the work of the baseline: far outside the noise of three A/B pairs. Staged as a ratio
    of work, not of time: its TPOT read 5.4x its twin's on an AMD EPYC (0.249 ms against 0.046 ms),
    0.2 ms more, 40x the gate's 0.005 ms floor (13x on a machine 3x faster)."""
    pytester.makepyfile(GENERATE.format(backends='"onnxruntime-cpu"'))
    base = pytester.path / "base"
    base.mkdir()
    for name in ("tiny_llm.onnx", "tiny_llm.json"):  # the twin and its own configuration
        shutil.copy(llm_project / name, base / name)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    same = pytester.runpytest_inprocess("--edge-baseline-models=base", "--edge-processes=3", "--edge-report=r.json",
                                        "--edge-html=same.html")
    same.assert_outcomes(passed=1)
    (record,) = _report(pytester)
    assert record["baseline_check"]["mode"] == "ab" and len(record["llm"]["processes"]) == 3
    # The twin's generation figures kept on the record, as a stored baseline's are: the page's
    # "Against the baseline" compares a decoder's TTFT and TPOT in A/B mode too.
    twin = record["baseline_check"]["twin"]["generation"]
    assert twin["tpot_ms"]["p50"] > 0 and len(twin["processes"]) == 3
    page = (pytester.path / "same.html").read_text()
    table = page.split("Against the baseline", 1)[1].split("</table>", 1)[0]
    header = re.findall(r"<th[^>]*>(.*?)</th>", table)
    (row,) = re.findall(r"<tr><td>.*?</tr>", table, re.S)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    for figure in ("TTFT P50", "TPOT P50"):  # the twin's value, an arrow, this run's
        assert "→" in cells[header.index(figure)], (figure, cells)
    for name in ("tiny_llm.onnx", "tiny_llm.json"):
        shutil.copy(LLM / "deep" / name, llm_project / name)
    # A change of model refreshes its goldens (else they are stale); then only the gate can fail it.
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    deeper = pytester.runpytest_inprocess("--edge-baseline-models=base", "--edge-processes=3", "--edge-summary=s.md")
    deeper.assert_outcomes(failed=1)
    summary = (pytester.path / "s.md").read_text()  # the same section as against a stored report
    assert re.search(r"Regressions against the baseline[\s\S]*TPOT P50", summary), summary
    deeper.stdout.fnmatch_lines(["*onnxruntime-cpu: TPOT P50 * ms (geometric mean of 8 process TPOT P50s) is +* "
                                 "against the baseline twin * ms (allowed +10%; paired t=* over 8 A/B pairs*); "
                                 "measured twice in fresh processes: *"])


def test_a_token_golden_that_would_inflate_to_gigabytes_is_refused_before_it_does(tmp_path: Path) -> None:
    """A few hundred KB of deflated zeros declaring 100 MB of logits, or a header claiming 4 GB:
    refused from the member's header, before its data is inflated, naming the file."""
    import io
    import zipfile

    path = golden_path(tmp_path, "m", [1, 2])
    write_golden(path, TokenGolden([1, 2], [3, 4], np.zeros(8, np.float32), TokenGoldenMeta()))
    assert read_golden(path, [1, 2]).tokens == [3, 4]

    def npy(array: np.ndarray) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array)
        return buffer.getvalue()

    members = {"prompt.npy": npy(np.array([1, 2])), "tokens.npy": npy(np.array([3, 4])),
               "meta.npy": npy(np.frombuffer(b"{}", np.uint8))}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, blob in members.items():
            archive.writestr(name, blob)
        archive.writestr("first_logits.npy", npy(np.zeros(25 * 2**20, np.float32)))  # 100 MiB of zeros
    assert path.stat().st_size < 2**20
    with pytest.raises(GoldenError, match=r"unreadable LLM golden .*member 'first_logits.npy' declares 104857600 "
                                          r"bytes .*more than the 67108864 bytes"):
        read_golden(path, [1, 2])
    header = npy(np.zeros(1, np.float32))[:-4].replace(b"(1,)", b"(1000000000,)")  # a 4 GB claim, no data
    with zipfile.ZipFile(path, "w") as archive:
        for name, blob in members.items():
            archive.writestr(name, blob)
        archive.writestr("first_logits.npy", header)
    with pytest.raises(GoldenError, match=str(path)):
        read_golden(path, [1, 2])


KILLS_ITS_WORKER = """
import os
import signal
from pathlib import Path

import pytest

def _workers():
    # This pytest process's children running a backend worker: where generation runs.
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"pytest_edge.worker" in cmdline:
            found.append(int(stat.parent.name))
    return found

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], new_tokens=4, backends=["onnxruntime-cpu"])
def test_first(edge_llm):
    assert len(edge_llm.generate([1, 2, 3], 4)) == 4
    workers = _workers()
    assert workers, "generation ran in no worker process"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    # Dead before the check runs: a zombie whose threads have all exited (until then waitpid does
    # not report it, and the check's request would meet it dying).
    for pid in workers:
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" \
                or len(list(Path(f"/proc/{pid}/task").iterdir())) > 1:
            pass

@pytest.mark.edge_llm(model="tiny_llm", prompts=[[1, 2, 3]], new_tokens=4, backends=["onnxruntime-cpu"])
def test_second(edge_llm):
    assert len(edge_llm.generate([4, 5], 4)) == 4
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the worker processes in /proc (Linux)")
def test_generation_runs_in_the_backends_worker_and_survives_its_death(pytester: pytest.Pytester,
                                                                        llm_project: Path) -> None:
    """The decoder is loaded and run in the backend's worker process, as every model is, not in
    pytest's: a worker killed under one test is restarted for the next, which loads the decoder
    again and passes; the session goes on."""
    pytester.makepyfile(KILLS_ITS_WORKER)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("-p", "no:randomly", "--edge-report=r.json")
    result.assert_outcomes(passed=2)
    notes = json.dumps(json.loads((pytester.path / "r.json").read_text()))
    assert "its worker process died (signal SIGKILL) between requests" in notes and "tiny_llm.onnx" in notes


def test_a_hung_generation_is_one_tests_error_after_edge_timeout(pytester: pytest.Pytester,
                                                                 llm_project: Path) -> None:
    """edge_timeout bounds a decoder's requests as it bounds every request to a worker: a load or a
    prefill that takes longer (a 200-token prompt under a 1 ms timeout) is that test's failure, naming the backend and
    the artifact, and the next test runs."""
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge_llm(model="tiny_llm", prompts=[[i % 60 for i in range(200)]], new_tokens=4,
                              backends=["onnxruntime-cpu"])
        def test_long(edge_llm):
            pass

        def test_next():
            pass
    """)
    result = pytester.runpytest_subprocess("--edge-update-golden", "-o", "edge_timeout=0.001")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu did not answer within 0.001 s (edge_timeout) while trying to * "
                                 "*tiny_llm.onnx*; the worker was killed*"])


def test_the_html_page_and_the_job_summary_show_the_generation_figures(pytester: pytest.Pytester,
                                                                        llm_project: Path) -> None:
    """#27 item 1: the LLM records' TTFT, TPOT, tokens/s and memory are drawn by the same report
    writers as every record (a table of their own: the conformance table has no columns for them)."""
    pytester.makepyfile(GENERATE.format(backends='"onnxruntime-cpu"'))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-measure", "--edge-report=r.json", "--edge-html=r.html",
                                           "--edge-summary=s.md")
    result.assert_outcomes(passed=1)
    (record,) = _report(pytester)
    ttft = f"{record['llm']['ttft_ms']['p50']:.3f}"
    summary = (pytester.path / "s.md").read_text()
    assert "### LLM generation" in summary and "| TTFT P50 ms | TPOT P50 ms |" in summary
    # The row names its test: two tests of one backend are two rows.
    row = next(line for line in summary.splitlines() if "| tiny\\_llm | onnxruntime-cpu | 5 |" in line)
    assert f"| {ttft} |" in row and row.endswith("| passed |") and "test\\_generate" in row
    page = (pytester.path / "r.html").read_text()
    assert '<section id="llm"><h2>LLM generation</h2>' in page and f"<td>{ttft}</td>" in page
    # Drawn as the page's other charts (#40 item 5): the TTFT and TPOT distributions from the
    # record's percentiles.
    assert len(record["llm"]["ttft_quantiles_ms"]) == 101 and len(record["llm"]["tpot_quantiles_ms"]) == 101
    assert "<h3>TTFT distribution</h3><svg" in page and "<h3>TPOT distribution</h3><svg" in page


def test_a_decoders_part_of_the_record_is_typed_and_reads_back_as_written() -> None:
    """Record.generation, not a dict in extra: the report's llm block is its to_json (the run's keys,
    the measured figures flat, the sweep, the policy's sentence), read back by from_json (an xdist
    worker's records, a stored baseline) to the same record and the same JSON."""
    from pytest_edge.core.generation_figures import (ContextSweep, GenerationFigures, PromptResult,
                                                     TeacherForcedOverall, TimingPercentiles)
    from pytest_edge.core.generation_record import RecordLlmConfig
    from pytest_edge.core.record import NOT_MEASURED, GenerationRecord, Record

    generation = GenerationRecord(
        config=RecordLlmConfig(vocab_size=8), new_tokens=3, kv_cache="positions",
        prompts=(PromptResult(2, (1,), (1,), 1.0, None, 0.0, 1.0),),
        teacher_forced=TeacherForcedOverall(1, 1.0, None, None),
        measured=GenerationFigures(ttft_ms=TimingPercentiles(1.5, 2.0), load_ms=4.0),
        context=ContextSweep((), 64, None, False), timing_not_judged=NOT_MEASURED)
    record = Record("t::x", {"name": "m"}, "onnxruntime-cpu", generation=generation, checked=True, accuracy={})
    data = record.to_json()
    llm = data["llm"]
    assert "generation" not in data and list(llm)[:6] == ["config", "new_tokens", "kv_cache", "prompts",
                                                          "teacher_forced", "prompt_tokens"]
    assert list(llm)[-2:] == ["context", "timing_not_judged"] and llm["timing_not_judged"] == NOT_MEASURED.reason
    assert llm["ttft_ms"] == {"p50": 1.5, "p90": 2.0} and llm["load_ms"] == 4.0 and llm["tpot_ms"] is None
    again = Record.from_json(data)
    assert again.generation == generation and again.extra == {} and again.to_json() == data
    assert again.generation.timing_not_judged is NOT_MEASURED  # the policy, read back from its sentence


def test_tolerances_judge_each_backend_by_its_own_accuracy_keywords() -> None:
    """tolerances= on edge_llm as on edge: per backend (BACKEND@DEVICE first, then the runtime's)
    the accuracy keywords it is judged by; parsed as the marker's own, a typo or a timing budget an error."""
    spec = parse_llm_marker((), {"model": "m", "prompts": [[1]], "logits_atol": "1e-3",
                                 "tolerances": {"llama.cpp": {"logits_atol": None, "logits_cosine": "0.999",
                                                              "min_token_agreement": 0.5, "max_kld": "0.01"},
                                                "llama.cpp@pi5": {"min_token_agreement": 0.25}}})
    gguf = spec.for_backend("llama.cpp")
    # None switches a keyword off for that backend (as on the edge marker's tolerances=)
    assert (gguf.logits_atol, gguf.logits_cosine, gguf.min_token_agreement, gguf.budget("max_kld")) == (None, 0.999, 0.5, 0.01)
    assert spec.for_backend("llama.cpp@pi5").min_token_agreement == 0.25
    off = parse_llm_marker((), {"model": "m", "prompts": [[1]], "tolerances": {"litert-lm": {"min_token_agreement": None}}})
    assert off.for_backend("litert-lm").min_token_agreement is None and off.min_token_agreement == 1.0
    assert token_message([1, 2], [3, 4], 0.0, 0, None) is None  # off: never a violation
    assert spec.for_backend("llama.cpp@pi5").logits_cosine is None  # the device's entry, not merged
    assert spec.for_backend("onnxruntime-cpu") == spec and spec.min_token_agreement == 1.0
    with pytest.raises(EdgeUsageError, match=r"tolerances\['llama.cpp'\]: unknown key\(s\) 'ttft_ms'"):
        parse_llm_marker((), {"model": "m", "prompts": [[1]], "tolerances": {"llama.cpp": {"ttft_ms": 5}}})
    with pytest.raises(EdgeUsageError, match=r"tolerances\['llama.cpp'\].min_token_agreement=2.0 must be within"):
        parse_llm_marker((), {"model": "m", "prompts": [[1]], "tolerances": {"llama.cpp": {"min_token_agreement": 2}}})
    with pytest.raises(EdgeUsageError, match="edge_llm tolerances: expected"):
        parse_llm_marker((), {"model": "m", "prompts": [[1]], "tolerances": [("llama.cpp", {})]})


def test_a_decoders_junit_properties_carry_its_generation_figures() -> None:
    from pytest_edge.core.record import GenerationRecord, Record

    from pytest_edge.core.generation_figures import GenerationFigures, TimingPercentiles

    generation = GenerationRecord(new_tokens=3, measured=GenerationFigures(
        ttft_ms=TimingPercentiles(2.5, None), tpot_ms=TimingPercentiles(0.5, None), decode_tokens_per_s=2000.0))
    record = Record("t", {"name": "m"}, "llama.cpp", generation=generation, checked=True, load_ms=3.0,
                    accuracy={"token_agreement": 1.0, "max_abs_err": 1e-4})
    properties = dict(record.junit_properties())
    assert properties["edge_ttft_p50_ms"] == 2.5 and properties["edge_tpot_p50_ms"] == 0.5
    assert properties["edge_decode_tokens_per_s"] == 2000.0 and properties["edge_token_agreement"] == 1.0
    assert properties["edge_load_ms"] == 3.0 and properties["edge_max_abs_err"] == 1e-4
