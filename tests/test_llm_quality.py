"""Quantized decoders judged as the field judges them (docs/llm.md, "Teacher-forced quality"):
top-1 agreement and KL divergence teacher-forced over the golden continuation, as llama.cpp's
``llama-perplexity --kl-divergence`` computes them; and tokens/s by the field's definitions beside
llama.cpp's own counters. The math is checked against direct computations; the figures on real
GGUF files (llama.cpp's converter's f32 and Q8_0, its quantizer's Q4_0, a 3 %-perturbed f32)
against llama.cpp's own way of computing them from full logits."""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.checks import check_teacher_forced
from pytest_edge.core.generation_figures import KlDivergence, TeacherForcedOverall, TokenPosition
from pytest_edge.errors import EdgeUsageError, GoldenError
from pytest_edge.golden.tokens import TokenGolden, TokenGoldenMeta, read_golden, write_golden
from pytest_edge.llm.marker import parse_llm_marker
from pytest_edge.llm.metrics import (TeacherForced, kl_divergence, log_softmax, teacher_forced, timing_figures,
                                     top_logprobs)

LLM = Path(__file__).resolve().parent.parent / "fixtures" / "llm"
LLAMA_CPP = pytest.mark.skipif(not importlib.util.find_spec("llama_cpp"),
                               reason="llama-cpp-python is not installed (the llama extra builds it from its sdist)")

# ---------------------------------------------------------------- the math, on synthetic distributions


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("k", [50, 8, 1])
def test_kl_divergence_over_top_k_and_the_rest_is_the_binned_divergence(k: int) -> None:
    """With k = the vocabulary, the full KL(P || Q) summed directly; with fewer, the divergence of the
    k + 1 bins (the golden's k ids, then all the rest as one), computed here directly from the
    probabilities, and never above the full one."""
    rng = np.random.default_rng(k)
    reference, backend = rng.normal(0, 2, (6, 50)), None
    backend = reference + rng.normal(0, 0.3, reference.shape)
    p, q = _softmax(reference), _softmax(backend)
    full = (p * np.log(p / q)).sum(axis=-1)
    found = kl_divergence(top_logprobs(reference, k), backend)
    if k == 50:
        np.testing.assert_allclose(found, full, rtol=1e-5)
    binned = []
    for row_p, row_q in zip(p, q):
        ids = np.argsort(-row_p, kind="stable")[:k]
        rest = np.setdiff1d(np.arange(50), ids)
        bins_p = np.append(row_p[ids], row_p[rest].sum())
        bins_q = np.append(row_q[ids], row_q[rest].sum())
        binned.append((bins_p * np.log(bins_p / bins_q)).sum() if rest.size else (bins_p[:-1] * np.log(bins_p[:-1] / bins_q[:-1])).sum())
    np.testing.assert_allclose(found, binned, rtol=1e-5, atol=1e-7)
    assert np.all(found <= full + 1e-6)


def test_the_same_distribution_diverges_by_nothing_and_the_rest_mass_is_kept() -> None:
    logits = np.random.default_rng(0).normal(0, 1, (3, 40))
    kept = top_logprobs(logits, 10)
    assert kept.ids.shape == (3, 10) and kept.logprobs.dtype == np.float32
    # the k log-probabilities and the rest's mass add up to the whole distribution
    np.testing.assert_allclose(np.exp(kept.logprobs.astype(np.float64)).sum(axis=-1) + np.exp(kept.rest), 1.0, rtol=1e-5)
    np.testing.assert_allclose(kl_divergence(kept, logits), 0.0, atol=1e-6)
    assert np.all(np.isneginf(top_logprobs(logits, 40).rest))  # the whole vocabulary: no rest


def _llama_percentile(values: list[float], fraction: float) -> float:
    """llama-perplexity's percentile of the sorted KLD values (tools/perplexity/perplexity.cpp)."""
    values = sorted(values)
    p = fraction * (len(values) - 1)
    i = int(p)
    return (1 - (p - i)) * values[i] + (p - i) * values[min(i + 1, len(values) - 1)]


def test_teacher_forced_figures_are_top1_share_mean_p99_max_and_where() -> None:
    """Top-1 agreement: the share of positions whose argmax is the golden's token (llama.cpp's "Same
    top p": its base's argmax, which is the golden's greedy token); mean, P99 (llama-perplexity's
    interpolation) and max of the per-position KL divergences, and the position of the largest."""
    rng = np.random.default_rng(3)
    reference = rng.normal(0, 2, (9, 30))
    golden = np.argmax(reference, axis=-1)
    backend = reference + rng.normal(0, 0.2, reference.shape)
    backend[4, golden[4]] -= 50  # one position whose argmax differs
    figures = teacher_forced(golden.tolist(), top_logprobs(reference), backend)
    p, q = _softmax(reference), _softmax(backend)
    direct = (p * np.log(p / q)).sum(axis=-1)
    found = figures.figures()
    assert found.positions == 9 and found.top1_agreement == pytest.approx(8 / 9)
    assert found.first_top1_difference == 4 and found.max_kld_at == int(np.argmax(direct)) == 4
    assert found.kld is not None and found.kld.mean == pytest.approx(direct.mean(), rel=1e-5)
    assert found.kld.maximum == pytest.approx(direct.max(), rel=1e-5)
    assert found.kld.p99 == pytest.approx(_llama_percentile(direct.tolist(), 0.99), rel=1e-5)
    assert found.golden_rest_mass_max == 0.0  # 30 tokens: the golden keeps them all, the figure is exact
    rest = np.exp(top_logprobs(reference, 5).rest).max()
    assert teacher_forced(golden.tolist(), top_logprobs(reference, 5), backend).figures(
        ).golden_rest_mass_max == pytest.approx(rest)
    # All prompts' positions together: the overall figures.
    joined = TeacherForced.joined([figures, teacher_forced(golden[:3].tolist(), None, reference[:3])])
    assert joined.positions == 12 and joined.kld is None and joined.top1_agreement == pytest.approx(11 / 12)
    with pytest.raises(ValueError, match="3 positions of logits for 9 golden tokens"):
        teacher_forced(golden.tolist(), None, reference[:3])


def test_budgets_judge_the_overall_figures_and_a_golden_without_distributions_is_a_finding() -> None:
    spec = parse_llm_marker((), {"model": "m", "prompts": [[1]], "min_top1_agreement": "95%", "max_kld": 0.01})
    assert (spec.budget("min_top1_agreement"), spec.budget("max_kld")) == (0.95, 0.01)
    budgets = spec.budgets(check_teacher_forced)
    figures = TeacherForcedOverall(16, 0.875, TokenPosition(1, 3), KlDivergence(0.02, 0.05, 0.06), TokenPosition(0, 7))
    messages = [f.message for f in check_teacher_forced(figures, budgets, "llama.cpp")]
    assert messages == [
        "llama.cpp: teacher-forced top-1 agreement 0.875 over 16 positions (first at prompt 1 new token 3) is under "
        "the budget min_top1_agreement=0.95",
        "llama.cpp: teacher-forced mean KL divergence 0.02 over 16 positions (P99 0.05, max 0.06 at prompt 0 new "
        "token 7) exceeds the budget max_kld=0.01"]
    unkept = replace(figures, kld=None, not_measured="not measured: the golden g.npz keeps no log-probabilities")
    (finding,) = check_teacher_forced(unkept, {"max_kld": 0.01}, "llama.cpp")
    assert finding.value is None and "g.npz keeps no log-probabilities" in finding.message
    for bad in ({"min_top1_agreement": 1.5}, {"max_kld": -1}, {"max_kld": "a lot"}):
        with pytest.raises(EdgeUsageError, match=next(iter(bad))):
            parse_llm_marker((), {"model": "m", "prompts": [[1]], **bad})


def test_a_golden_keeps_its_distributions_and_an_older_golden_still_reads(tmp_path: Path) -> None:
    logits = np.random.default_rng(1).normal(0, 1, (4, 300)).astype(np.float32)
    kept = top_logprobs(logits)  # 256 of 300
    path = tmp_path / "g.npz"
    write_golden(path, TokenGolden([1, 2], [3, 4, 5, 6], logits[0], TokenGoldenMeta(new_tokens=4), kept))
    back = read_golden(path, [1, 2]).distributions
    assert back is not None and back.ids.shape == (4, 256)
    np.testing.assert_array_equal(back.ids, kept.ids)
    np.testing.assert_array_equal(back.logprobs, kept.logprobs)
    assert path.stat().st_size < 16 * 1024  # kilobytes: 4 positions of 256 ids and log-probabilities, deflated
    write_golden(path, TokenGolden([1, 2], [3, 4, 5, 6], logits[0], TokenGoldenMeta(new_tokens=4)))  # as before this version
    assert read_golden(path, [1, 2]).distributions is None
    wrong = top_logprobs(logits[:3])  # 3 positions for 4 tokens
    write_golden(path, TokenGolden([1, 2], [3, 4, 5, 6], logits[0], TokenGoldenMeta(), wrong))
    with pytest.raises(GoldenError, match="g.npz: unreadable LLM golden .*do not fit its 4 tokens"):
        read_golden(path, [1, 2])
    write_golden(path, TokenGolden([1, 2], [3, 4, 5, 6], logits[0, :100], TokenGoldenMeta(), kept))  # ids up to 299 of 100
    with pytest.raises(GoldenError, match="token ids outside the vocabulary of 100"):
        read_golden(path, [1, 2])


def test_speeds_are_tokens_over_time_per_generation_mean_and_standard_deviation() -> None:
    """prefill tokens/s = prompt tokens / TTFT, decode tokens/s = (new tokens - 1) / the time after the
    first token, per timed generation, then mean and standard deviation (n - 1) over them; the P50s
    beside them unchanged."""
    ttft, decode = [0.010, 0.020], [0.070, 0.140]  # 2 generations of 8 new tokens after 20 prompt tokens
    tpot = [0.010] * 7 + [0.020] * 7
    figures = timing_figures(20, ttft, tpot, decode, new_tokens=8)
    assert figures.prefill_tokens_per_s == pytest.approx(1500.0)  # mean of 2000 and 1000
    assert figures.prefill_tokens_per_s_sd == pytest.approx(np.std([2000, 1000], ddof=1))
    assert figures.decode_tokens_per_s == pytest.approx(75.0)  # mean of 100 and 50
    assert figures.decode_tokens_per_s_sd == pytest.approx(np.std([100, 50], ddof=1))
    assert figures.tpot_ms is not None and figures.tpot_ms.p50 == pytest.approx(15.0)
    assert figures.timed_generations == 2


# ---------------------------------------------------------------- on llama.cpp, with real GGUF files


def perturbed_gguf(source: Path, target: Path, scale: float, seed: int = 0) -> int:
    """A copy of an f32 GGUF with every float32 matrix w + N(0, scale x mean|w|) (the perturbation of
    make_llm_exports.py's ``llama(perturb=...)``, applied to the converter's file); how many changed."""
    from pytest_edge.backends.llama_cpp.gguf import MAGIC, _string, _unpack, _value

    shutil.copy(source, target)
    with open(target, "rb") as handle:
        assert handle.read(4) == MAGIC
        _version, tensors, count = _unpack(handle, "<IQQ", target)
        alignment = 32
        for _ in range(count):
            key = _string(handle, target)
            (kind,) = _unpack(handle, "<I", target)
            value = _value(handle, kind, target, key)
            alignment = value if key == "general.alignment" else alignment
        infos = []
        for _ in range(tensors):
            name = _string(handle, target)
            (dims,) = _unpack(handle, "<I", target)
            shape = _unpack(handle, f"<{dims}Q", target)
            infos.append((name, shape, *_unpack(handle, "<IQ", target)))
        start = -(-handle.tell() // alignment) * alignment
    rng = np.random.default_rng(seed)
    data = np.memmap(target, mode="r+", dtype=np.uint8)
    changed = 0
    for _name, shape, kind, offset in infos:
        if kind == 0 and len(shape) == 2:  # GGML_TYPE_F32 matrices
            n = int(np.prod(shape))
            weights = data[start + offset:start + offset + 4 * n].view(np.float32)
            weights += (rng.standard_normal(n) * scale * np.abs(weights).mean()).astype(np.float32)
            changed += 1
    data.flush()
    del data
    return changed


# Thresholds the Q8_0 export meets and a 3 %-perturbed f32 does not (measured: Q8_0 top-1 1.0, mean
# KLD 2.1e-6; perturbed 0.875 and 2.6e-5; Q4_0 0.9375 and 2.3e-4, judged with its own looser ones).
Q8_BUDGETS = {"min_top1_agreement": 0.95, "max_kld": 1e-5}
Q4_BUDGETS = {"min_top1_agreement": 0.9, "max_kld": 1e-3}


def _gguf_project(pytester: pytest.Pytester) -> dict:
    """The f32 GGUF as models/decoder/model.gguf (llama.cpp the reference: the float golden), a copy of
    it as models/quant/model.gguf (the export each round swaps), and two tests judging the copy
    against the float model's goldens (reference=) teacher-forced, free-running agreement and
    first-step logits left loose."""
    shutil.copytree(LLM / "gguf_llama", pytester.path / "models" / "decoder")
    shutil.copytree(LLM / "gguf_llama", pytester.path / "models" / "quant")
    greedy = json.loads((LLM / "gguf_llama" / "pytorch_greedy.json").read_text())
    loose = "min_token_agreement=0, logits_atol=None"
    pytester.makepyfile(test_quantized=f"""
        import pytest

        @pytest.mark.edge_llm(model="models/quant", reference="models/decoder", prompts={greedy['prompts']!r},
                              new_tokens={greedy['new_tokens']}, backends=["llama.cpp"], {loose}, **{Q8_BUDGETS!r})
        def test_q8(edge_llm):
            pass

        @pytest.mark.edge_llm(model="models/quant", reference="models/decoder", prompts={greedy['prompts']!r},
                              new_tokens={greedy['new_tokens']}, backends=["llama.cpp"], {loose}, **{Q4_BUDGETS!r})
        def test_q4(edge_llm):
            pass
    """)
    return greedy


def _records(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest_inprocess("--edge-report=r.json", *args)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    return result, {r["test"].split("::")[-1].split("[")[0]: r for r in records}


@LLAMA_CPP
def test_quantized_ggufs_are_judged_teacher_forced_against_the_float_golden(pytester: pytest.Pytester) -> None:
    """Goldens recorded from the f32 GGUF; then the converter's Q8_0 passes the thresholds it meets,
    a 3 %-perturbed f32 fails them naming both figures, and llama.cpp's Q4_0 passes looser ones
    (which the Q8_0 thresholds, an order of magnitude tighter in KLD, fail)."""
    greedy = _gguf_project(pytester)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    model = pytester.path / "models" / "quant" / "model.gguf"
    figures = {}
    for name, make in (("q8_0", lambda: shutil.copy(LLM / "gguf_llama_q8" / "model.gguf", model)),
                       ("perturbed", lambda: perturbed_gguf(LLM / "gguf_llama" / "model.gguf", model, 0.03)),
                       ("q4_0", lambda: shutil.copy(LLM / "gguf_llama_q4_0" / "model.gguf", model))):
        make()
        result, records = _records(pytester)
        figures[name] = records["test_q8"]["llm"]["teacher_forced"]
        assert records["test_q4"]["llm"]["teacher_forced"] == figures[name]  # one model, one pair of figures
        if name == "q8_0":
            result.assert_outcomes(passed=2)
        elif name == "perturbed":  # fails the Q4_0's looser top-1 threshold too (0.875 < 0.9)
            result.assert_outcomes(failed=2)
            result.stdout.fnmatch_lines([
                "*llama.cpp: teacher-forced top-1 agreement 0.875 over 16 positions (first at prompt * new token *) "
                "is under the budget min_top1_agreement=0.95*",
                "*llama.cpp: teacher-forced mean KL divergence * over 16 positions (P99 *, max * at prompt * new "
                "token *) exceeds the budget max_kld=1e-05*"])
        else:
            result.assert_outcomes(failed=1, passed=1)
            result.stdout.fnmatch_lines(["*teacher-forced mean KL divergence * exceeds the budget max_kld=1e-05*"])
            assert "min_top1_agreement=0.9 " not in result.stdout.str()
    assert figures["q8_0"]["top1_agreement"] == 1.0 and figures["q8_0"]["kld"]["mean"] < 1e-5
    assert figures["q8_0"]["golden_rest_mass_max"] == 0.0  # a vocabulary of 256: every token kept
    assert figures["q8_0"]["kld"]["mean"] < figures["perturbed"]["kld"]["mean"] < figures["q4_0"]["kld"]["mean"] < 1e-3
    assert figures["q4_0"]["top1_agreement"] >= 0.9 and figures["q4_0"]["positions"] == 2 * greedy["new_tokens"]
    # Per prompt as well, with where the worst position is.
    prompts = records["test_q8"]["llm"]["prompts"]
    assert [p["teacher_forced"]["positions"] for p in prompts] == [8, 8]
    assert records["test_q8"]["accuracy"]["kld_mean"] == figures["q4_0"]["kld"]["mean"]


def _llama_base_log_probs(logits: np.ndarray) -> tuple[np.ndarray, float, float]:
    """llama-perplexity --kl-divergence-base's stored row: log-probabilities as uint16 over
    [max - 16, max] (its log_softmax that writes the base file), with their scale and minimum."""
    logits = logits.astype(np.float32)
    top, low = logits.max(), max(logits.min(), logits.max() - 16)
    log_sum_exp = np.float32(np.log(np.exp(logits - top).astype(np.float64).sum()))
    min_log_prob = np.float32(low - top - log_sum_exp)
    scale = np.float32((top - low) / 65535.0)
    stored = np.where(logits > low, np.rint((logits - low) / scale), 0).astype(np.uint16)
    return stored, float(scale), float(min_log_prob)


def _llama_kld(base: tuple[np.ndarray, float, float], logits: np.ndarray) -> tuple[float, bool]:
    """One position's KLD and same-top as llama-perplexity --kl-divergence computes them from the
    stored base row and the model's full logits (tools/perplexity/perplexity.cpp, log_softmax)."""
    stored, scale, min_log_prob = base
    logits = logits.astype(np.float32)
    top = logits.max()
    log_sum_exp = np.float32(np.log(np.exp(logits - top).astype(np.float64).sum()))
    base_log = (scale * stored.astype(np.float32) + min_log_prob).astype(np.float32)
    kept = base_log > -16
    kld = float((np.exp(base_log[kept].astype(np.float64)) * (base_log[kept] - logits[kept] + top + log_sum_exp)).sum())
    return kld, int(np.argmax(logits)) == int(np.argmax(base_log))


@LLAMA_CPP
@pytest.mark.parametrize("export", ["q8_0", "q4_0", "perturbed"])
def test_our_figures_match_llama_perplexitys_computation_on_the_same_files(tmp_path: Path, export: str) -> None:
    """llama-perplexity's way: one forward over prompt + golden continuation with every position's
    logits (``logits_all``), the base's rows stored as its uint16 log-probabilities, KLD and same top
    per position from them. Ours (step by step through the decoder, top-256 golden) within 1e-3 of
    its mean, P99 and max, and the same top-1 agreement."""
    import llama_cpp

    from pytest_edge.backends import get_backend
    from pytest_edge.backends.decoder import generate, teacher_forced as forced

    source = {"q8_0": LLM / "gguf_llama_q8" / "model.gguf", "q4_0": LLM / "gguf_llama_q4_0" / "model.gguf"}
    quantized = source.get(export) or tmp_path / "perturbed.gguf"
    if export == "perturbed":
        perturbed_gguf(LLM / "gguf_llama" / "model.gguf", quantized, 0.03)
    backend = get_backend("llama.cpp")
    config = backend.decoders.config_of(LLM / "gguf_llama" / "model.gguf")
    reference, model = backend.decoders.open(LLM / "gguf_llama" / "model.gguf", config, 1), \
        backend.decoders.open(quantized, config, 1)
    ours, theirs_kld, theirs_top = [], [], []
    for prompt in json.loads((LLM / "gguf_llama" / "pytorch_greedy.json").read_text())["prompts"]:
        tokens = generate(reference, prompt, 8).tokens
        ours.append(teacher_forced(tokens, top_logprobs(forced(reference, prompt, tokens)),
                                   forced(model, prompt, tokens)))
        full = {}
        for name, path in (("base", LLM / "gguf_llama" / "model.gguf"), ("model", quantized)):
            llama = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=1, logits_all=True, verbose=False)
            llama.eval(prompt + tokens[:-1])
            full[name] = np.asarray(llama.scores[len(prompt) - 1:len(prompt) + len(tokens) - 1], np.float32)
            llama.close()
        for base_row, row in zip(full["base"], full["model"]):
            kld, same = _llama_kld(_llama_base_log_probs(base_row), row)
            theirs_kld.append(kld)
            theirs_top.append(same)
    found = TeacherForced.joined(ours).figures()
    theirs = np.asarray(theirs_kld)
    assert found.top1_agreement == pytest.approx(np.mean(theirs_top))
    assert found.kld is not None
    for figure, value in (("mean", theirs.mean()), ("p99", _llama_percentile(theirs_kld, 0.99)), ("maximum", theirs.max())):
        assert abs(getattr(found.kld, figure) - value) < 1e-3, (figure, found.kld, value)
    # Closer than that: llama.cpp's uint16 log-probabilities (a step of 16/65535) bound the difference.
    assert abs(found.kld.mean - theirs.mean()) < 2e-5, (found.kld, theirs.mean())


@LLAMA_CPP
def test_tokens_per_second_agree_with_llama_cpps_counters_over_the_same_generations(
        pytester: pytest.Pytester) -> None:
    """llama.cpp's own counters (llama_perf_context) read per timed generation beside our prefill and
    decode tokens/s over the same generations: what logic guarantees, not how close the two clocks
    read. The product's claim (ours within 5 % of llama.cpp's counter, SPEC section 10) is a ratio of
    two clocks whose reading moves with the CPU and its load (decode 0.955-0.964 on the machine that
    wrote the old bound of 0.95, 0.946 on a fresh clone's: issue 53): benchmarks/bench_llama_counters.py
    measures and reports it, the suite does not assert it."""
    shutil.copytree(LLM / "gguf_llama", pytester.path / "models" / "decoder")
    prompt = [(7 * i + 3) % 256 for i in range(64)]
    pytester.makepyfile(test_speed=f"""
        import pytest

        @pytest.mark.edge_llm(model="models/decoder", prompts=[{prompt!r}], new_tokens=16, backends=["llama.cpp"],
                              runs=10)
        def test_speed(edge_llm):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    result, records = _records(pytester, "--edge-measure", "-o", "edge_processes=2")
    result.assert_outcomes(passed=1)
    block = records["test_speed"]["llm"]
    counters = block["runtime_timings"]["per_generation"]
    # Every timed generation read its counters (reset before it): as many as ours, every token counted.
    assert counters["generations"] == block["timed_generations"] == 2 * 10
    assert block["runtime_timings"]["prompt_tokens"] == 2 * 10 * len(prompt)
    assert block["runtime_timings"]["eval_tokens"] == 2 * 10 * (16 - 1)
    prefill = block["prefill_tokens_per_s"] / counters["prefill_tokens_per_s"]["mean"]
    decode = block["decode_tokens_per_s"] / counters["decode_tokens_per_s"]["mean"]
    # clock bound: ours time what llama-bench's pp and tg time, llama_decode + llama_synchronize
    # (reading the logits and choosing the token are the app's, untimed: backends/decoder.generate);
    # llama.cpp's counter starts inside llama_decode and stops in llama_synchronize, so it counts at
    # most our time: a share of 1.0 at most. The 0.01 over 1 is its clock, ggml_time_us, in whole
    # microseconds: each call's reading off by under 1 us either way, over a generation's 15 decode
    # calls (about 40 us each here, 14 on a machine 3x faster) and a median over 20 generations,
    # against the 1-2 us a call our clock adds. The lower bound, half, is wide on purpose: it says
    # only that our span holds no work of another kind (the token's choice, the Python loop). What
    # lies outside llama.cpp's counter in our span is CPU work that scales with the machine as the
    # counted compute does (a share, not a time: alike on machines 3x faster or slower; the readings
    # were 0.946-0.986), and a generation another process interrupts moves a median over 20 by
    # nothing (decode's mean of rates read 0.78 with 12 runnable processes on 2 cores).
    assert 0.5 <= counters["counted"]["prefill"] <= 1.01 and 0.5 <= counters["counted"]["decode"] <= 1.01, counters
    # clock bound: our tokens/s at most llama.cpp's, per generation (as above) and so in their means.
    assert 0 < prefill <= 1.01 and 0 < decode <= 1.01, (block["prefill_tokens_per_s"],
                                                        block["decode_tokens_per_s"], counters)
    # 1 / TPOT P50 (what decode_tokens_per_s was) is kept beside, as the P50 the gate compares.
    assert block["tpot_ms"]["p50"] > 0 and block["decode_tokens_per_s_sd"] >= 0


@LLAMA_CPP
def test_a_prompt_longer_than_llama_cpps_batch_is_fed_in_batches() -> None:
    """llama_decode takes at most n_batch tokens a call: a longer prompt is split, as Llama.eval
    splits it, with the same tokens and logits as in one call."""
    from pytest_edge.backends import get_backend
    from pytest_edge.backends.decoder import generate

    backend = get_backend("llama.cpp")
    path = LLM / "gguf_llama" / "model.gguf"
    config = backend.decoders.config_of(path)
    prompt = [(7 * i + 3) % 256 for i in range(40)]
    whole = generate(backend.decoders.open(path, config, 1), prompt, 8)
    split = backend.decoders.open(path, config, 1)
    split._n_batch = 16  # 40 tokens: 16 + 16 + 8
    pieces = generate(split, prompt, 8)
    assert pieces.tokens == whole.tokens
    np.testing.assert_allclose(pieces.first_logits, whole.first_logits, atol=1e-4)


@LLAMA_CPP
def test_each_backend_uses_the_configuration_of_the_artifact_it_runs(pytester: pytest.Pytester) -> None:
    """A folder holding the builder's export (genai_config.json naming model.onnx, float32 cache) and
    llama.cpp's GGUF of the same weights: ONNX Runtime's record has the builder's configuration,
    llama.cpp's the GGUF's own header (its cache float16), never its neighbour's JSON, so its KV
    estimate is not twice what llama.cpp allocates."""
    folder = pytester.path / "models" / "decoder"
    shutil.copytree(LLM / "genai_llama", folder)
    shutil.copy(LLM / "gguf_llama" / "model.gguf", folder / "model.gguf")
    pytester.makepyfile(test_both="""
        import pytest

        @pytest.mark.edge_llm(model="models/decoder", prompts=[[5, 17, 33]], new_tokens=4,
                              backends=["onnxruntime-cpu", "llama.cpp"], logits_atol=None)
        def test_both(edge_llm):
            assert edge_llm.config.dtype == {"llama.cpp": "float16"}.get(edge_llm.backend, "float32")
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=2)
    configs = {r["backend"]: r["llm"]["config"] for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert configs["llama.cpp"]["dtype"] == "float16" and "GGUF metadata" in configs["llama.cpp"]["source"]
    assert configs["onnxruntime-cpu"]["dtype"] == "float32" and "genai_config.json" in configs["onnxruntime-cpu"]["source"]


@LLAMA_CPP
def test_tolerances_loosen_one_backend_and_hold_the_other_to_the_markers(pytester: pytest.Pytester) -> None:
    """tolerances= end to end: the builder's fp32 export and llama.cpp's GGUF of the same weights (its
    cache float16) in one folder, ONNX Runtime the reference. Held to logits_atol=1e-5, llama.cpp's
    first-step logits fail; given logits_atol=1e-3 by tolerances={"llama.cpp": ...} it passes, while
    an entry for the other backend leaves llama.cpp held to the marker's 1e-5."""
    folder = pytester.path / "models" / "decoder"
    shutil.copytree(LLM / "genai_llama", folder)
    shutil.copy(LLM / "gguf_llama" / "model.gguf", folder / "model.gguf")
    marker = ('model="models/decoder", prompts=[[5, 17, 33], [1, 2, 3, 4]], new_tokens=8, '
              'backends=["onnxruntime-cpu", "llama.cpp"], logits_atol=1e-5')
    pytester.makepyfile(test_tolerances=f"""
        import pytest

        @pytest.mark.edge_llm({marker})
        def test_strict(edge_llm):
            pass

        @pytest.mark.edge_llm({marker}, tolerances={{"llama.cpp": {{"logits_atol": 1e-3}}}})
        def test_gguf_loosened(edge_llm):
            pass

        @pytest.mark.edge_llm({marker}, tolerances={{"onnxruntime-cpu": {{"logits_atol": 1e-3}}}})
        def test_other_loosened(edge_llm):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=r.json", "-p", "no:randomly")
    records = {(r["test"].split("::")[-1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    gguf_error = records[("test_strict", "llama.cpp")]["accuracy"]["max_abs_err"]
    # The premise, said if it ever stops holding: llama.cpp's logits differ from the fp32 golden by
    # more than 1e-5 and less than 1e-3 (measured: 7.2e-05), ONNX Runtime's not at all (it made it).
    assert 1e-5 < gguf_error < 1e-3, gguf_error
    verdicts = {key: r["verdict"] for key, r in records.items()}
    assert verdicts == {("test_strict", "onnxruntime-cpu"): "passed", ("test_strict", "llama.cpp"): "failed",
                        ("test_gguf_loosened", "onnxruntime-cpu"): "passed",
                        ("test_gguf_loosened", "llama.cpp"): "passed",
                        ("test_other_loosened", "onnxruntime-cpu"): "passed",
                        ("test_other_loosened", "llama.cpp"): "failed"}, verdicts
    for key in (("test_strict", "llama.cpp"), ("test_other_loosened", "llama.cpp")):
        found = records[key]["violations"]  # each prompt's logits, by the marker's 1e-5
        assert len(found) == 2 and all("first-step logits max |Δ|" in v and "> logits_atol 1e-05" in v for v in found), found
    result.assert_outcomes(passed=4, failed=2)
