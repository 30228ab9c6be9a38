"""The decoder's part of the record (core.record.GenerationRecord, the report's ``llm`` block) through
the codec: a block the code before the typed record wrote reads back and is written again byte for
byte; an older version's block (keys missing, keys this one does not know) still reads, keeping what
it does not know; a malformed block is a ValueError naming where and the field's path."""

from __future__ import annotations

import json

import pytest

from pytest_edge.core.generation_figures import GenerationProcessFigures, TokenPosition
from pytest_edge.core.record import NOT_JUDGED, GenerationRecord, Record

# Written by the dict-based GenerationRecord.to_json (before the typed record), through
# Record.to_json, from a run's figures: two prompts (one whose first-step logits differ in shape),
# teacher-forced figures with a golden lacking distributions, two processes (one probed, one with a
# single new token), llama.cpp's own counters, a capped run, a context sweep killed at 256 tokens and
# an emulator's policy. As json.dumps wrote it (the report writes the same with indent=2).
MEASURED = (
    '{"config": {"vocab_size": 8, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "max_conte'
    'xt": 256, "dtype": "float32", "source": "models/tiny.json", "sliding_window": 0, "sliding_layers": ['
    '1], "sliding_cache": 0}, "new_tokens": 4, "kv_cache": "positions", "prompts": [{"prompt_tokens": 3, '
    '"golden_tokens": [3, 4, 5, 6], "tokens": [3, 4, 5, 6], "token_agreement": 1.0, "first_difference": n'
    'ull, "max_abs_err": 3.515949249267578, "cosine": -0.039264590669105225, "teacher_forced": {"position'
    's": 4, "top1_agreement": 1.0, "first_top1_difference": null, "kld": {"mean": 0.7002187030048631, "p9'
    '9": 1.351747339439727, "max": 1.3631179928294703}, "max_kld_at": 1, "golden_rest_mass_max": 0.289325'
    '4377727397}, "reference": "onnxruntime-cpu"}, {"prompt_tokens": 2, "golden_tokens": [7, 1, 2, 3], "t'
    'okens": [7, 1, 0, 3], "token_agreement": 0.75, "first_difference": 2, "max_abs_err": null, "cosine":'
    ' null, "shape": [[8], [6]], "teacher_forced": {"positions": 4, "top1_agreement": 0.0, "first_top1_di'
    'fference": 0, "kld": {"mean": 0.04252407343606991, "p99": 0.05541533900047616, "max": 0.055755866885'
    '281086}, "max_kld_at": 1, "golden_rest_mass_max": 0.364267658196073}, "reference": "onnxruntime-cpu"'
    '}], "teacher_forced": {"positions": 8, "top1_agreement": 0.5, "first_top1_difference": {"prompt": 1,'
    ' "position": 0}, "kld": {"mean": 0.37137138822046656, "p99": 1.336586468253403, "max": 1.36311799282'
    '94703}, "max_kld_at": {"prompt": 0, "position": 1}, "golden_rest_mass_max": 0.364267658196073, "not_'
    'measured": "not measured: the golden golden/tiny/abc.npz keeps no log-probabilities (recorded by an '
    'earlier version): re-record it with --edge-update-golden"}, "prompt_tokens": 3, "ttft_ms": {"p50": 1'
    '0.3, "p90": 11.06}, "tpot_ms": {"p50": 2.3499999999999996, "p90": 2.8}, "prefill_tokens_per_s": 288.'
    '58829083197287, "prefill_tokens_per_s_sd": 17.518051256484302, "decode_tokens_per_s": 437.2877581695'
    '7085, "decode_tokens_per_s_sd": 16.151493710854552, "timed_generations": 4, "ttft_samples": 4, "tpot'
    '_samples": 6, "ttft_quantiles_ms": [9.799999999999999, 9.809, 9.818, 9.826999999999998, 9.8359999999'
    '99999, 9.844999999999999, 9.854, 9.863, 9.871999999999998, 9.880999999999998, 9.889999999999999, 9.8'
    '99, 9.908, 9.917, 9.925999999999998, 9.934999999999999, 9.943999999999999, 9.953, 9.962, 9.970999999'
    '999998, 9.979999999999999, 9.988999999999999, 9.998, 10.007, 10.015999999999998, 10.024999999999999,'
    ' 10.033999999999999, 10.043, 10.052, 10.060999999999998, 10.069999999999999, 10.078999999999999, 10.'
    '088, 10.097, 10.107999999999999, 10.12, 10.132, 10.144, 10.156, 10.168, 10.18, 10.192, 10.2039999999'
    '99999, 10.216, 10.228, 10.24, 10.252, 10.264000000000001, 10.276, 10.288, 10.3, 10.312, 10.324, 10.3'
    '36, 10.347999999999999, 10.360000000000001, 10.372000000000002, 10.384, 10.396, 10.408000000000001, '
    '10.42, 10.432, 10.444, 10.456, 10.468, 10.480000000000002, 10.492, 10.508, 10.532000000000002, 10.55'
    '6000000000001, 10.58, 10.604000000000001, 10.628, 10.652, 10.676, 10.700000000000001, 10.724, 10.748'
    '000000000001, 10.772, 10.796, 10.82, 10.844, 10.867999999999999, 10.892, 10.916, 10.94, 10.964, 10.9'
    '88, 11.011999999999999, 11.036, 11.06, 11.084, 11.108, 11.132, 11.155999999999999, 11.18, 11.2039999'
    '99999999, 11.228, 11.252, 11.276, 11.299999999999999], "tpot_quantiles_ms": [2.1, 2.105, 2.11, 2.114'
    '9999999999998, 2.12, 2.125, 2.13, 2.135, 2.14, 2.1449999999999996, 2.15, 2.1550000000000002, 2.16, 2'
    '.165, 2.17, 2.175, 2.18, 2.1850000000000005, 2.19, 2.195, 2.2, 2.205, 2.21, 2.215, 2.22, 2.225, 2.23'
    '00000000000004, 2.235, 2.24, 2.245, 2.2500000000000004, 2.255, 2.26, 2.265, 2.27, 2.275, 2.28, 2.285'
    ', 2.29, 2.2950000000000004, 2.3, 2.3049999999999997, 2.31, 2.315, 2.32, 2.3249999999999997, 2.33, 2.'
    '335, 2.34, 2.3449999999999998, 2.3499999999999996, 2.355, 2.36, 2.3649999999999998, 2.36999999999999'
    '97, 2.375, 2.38, 2.385, 2.3899999999999997, 2.3949999999999996, 2.4, 2.405, 2.4099999999999997, 2.41'
    '49999999999996, 2.42, 2.4250000000000003, 2.4299999999999997, 2.435, 2.44, 2.445, 2.4499999999999997'
    ', 2.4549999999999996, 2.46, 2.465, 2.4699999999999998, 2.4749999999999996, 2.48, 2.4850000000000003,'
    ' 2.49, 2.495, 2.5, 2.5300000000000007, 2.5599999999999996, 2.59, 2.62, 2.65, 2.68, 2.709999999999999'
    '5, 2.74, 2.77, 2.8, 2.83, 2.8600000000000003, 2.89, 2.9199999999999995, 2.9499999999999997, 2.98, 3.'
    '01, 3.04, 3.07, 3.1], "load_ms": 20.75, "peak_memory_mb": 6.25, "steady_memory_mb": 5.5, "processes"'
    ': [{"ttft_p50_ms": 10.1, "tpot_p50_ms": 2.3499999999999996, "probe_us": 101.5, "min": 16.7}, {"ttft_'
    'p50_ms": 10.5, "tpot_p50_ms": null}], "runtime_timings": {"source": "llama_perf_context", "prompt_ev'
    'al_ms": 27.0, "prompt_tokens": 9, "eval_ms": 18.0, "eval_tokens": 9, "ttft_ms": 28.5, "prompt_tokens'
    '_per_s": 333.3333333333333, "eval_tokens_per_s": 500.0, "per_generation": {"generations": 3, "prefil'
    'l_tokens_per_s": {"mean": 333.3333333333333, "sd": 0.0, "n": 3}, "decode_tokens_per_s": {"mean": 500'
    '.0, "sd": 0.0, "n": 3}, "counted": {"prefill": 0.8910891089108911, "decode": 0.8695652173913044}}}, '
    '"runs_capped": "1 of runs=3 timed generations in a process: the worker stops after 60 s", "kv_cache_'
    'estimate_mb": 0.00042724609375, "context": {"points": [{"tokens": 64, "status": "ok", "peak_memory_m'
    'b": 6.5, "kv_cache_estimate_mb": 0.00390625}, {"tokens": 128, "status": "ok", "peak_memory_mb": null'
    ', "kv_cache_estimate_mb": 0.0078125}, {"tokens": 256, "status": "killed", "peak_memory_mb": null, "k'
    'v_cache_estimate_mb": 0.015625, "error": "killed by SIGKILL (the OOM killer, or a kill from outside)'
    '"}], "longest_stable": 128, "stopped": {"tokens": 256, "reason": "killed by SIGKILL (the OOM killer,'
    ' or a kill from outside)"}, "os_killed": true}, "timing_not_judged": "emulated device: timing and me'
    'mory are not the target\'s"}')

# The same code's block of a runtime without logits, not measured.
TOKENS_ONLY = (
    '{"config": {"vocab_size": 8, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "max_conte'
    'xt": 256, "dtype": "float32", "source": "models/tiny.json", "sliding_window": 0, "sliding_layers": ['
    '1], "sliding_cache": 0}, "new_tokens": 4, "kv_cache": null, "prompts": [{"prompt_tokens": 3, "golden'
    '_tokens": [3, 4, 5, 6], "tokens": [3, 4, 5, 6], "token_agreement": 1.0, "first_difference": null, "m'
    'ax_abs_err": null, "cosine": null, "not_measured": "a fake whose API gives tokens only", "teacher_fo'
    'rced": null, "reference": null}], "teacher_forced": {"positions": 0, "top1_agreement": null, "first_'
    'top1_difference": null, "kld": null, "not_measured": "not measured on fake: a fake whose API gives t'
    'okens only"}}')


def test_a_block_the_dict_based_record_wrote_is_written_again_byte_for_byte() -> None:
    for text in (MEASURED, TOKENS_ONLY):
        block = json.loads(text)
        generation = GenerationRecord.from_json(block)
        assert json.dumps(generation.to_json()) == text
        record = Record("t::x", {"name": "m"}, "llama.cpp", generation=generation, checked=True, accuracy={})
        data = record.to_json()
        assert json.dumps(data["llm"], indent=2) == json.dumps(block, indent=2)  # as the report writes it
        again = Record.from_json(json.loads(json.dumps(data)))
        assert again.generation == generation and json.dumps(again.to_json()) == json.dumps(data)


def test_the_block_reads_as_types() -> None:
    generation = GenerationRecord.from_json(json.loads(MEASURED))
    assert generation.timing_not_judged is NOT_JUDGED and generation.unknown == {}
    assert generation.prompts[1].shape == ((8,), (6,)) and generation.prompts[1].first_difference == 2
    assert generation.teacher_forced is not None
    assert generation.teacher_forced.first_top1_difference == TokenPosition(prompt=1, position=0)
    measured = generation.measured
    assert measured is not None and measured.ttft_ms is not None and measured.ttft_ms.p50 == 10.3
    assert measured.processes[1] == GenerationProcessFigures(10.5, None)  # no probe: no probe_us, no min
    assert measured.processes[0].fastest_ms == 16.7 and measured.runtime_timings is not None
    assert measured.runtime_timings.per_generation is not None
    assert measured.runtime_timings.per_generation.decode_tokens_per_s.mean == 500.0
    assert generation.context is not None and generation.context.longest_stable == 128
    assert generation.context.stopped is not None and generation.context.stopped.tokens == 256
    assert GenerationRecord.from_json(json.loads(TOKENS_ONLY)).measured is None  # not measured: no figures


def test_an_older_versions_block_reads_keeping_what_this_version_does_not_know() -> None:
    """Keys missing (no teacher-forced figures, no sweep, fewer measured figures) read as not
    measured; keys this version does not know are kept and written back, after the known ones."""
    older = {"config": {"vocab_size": 8}, "new_tokens": 3, "kv_cache": "positions", "prompts": [],
              "ttft_ms": {"p50": 1.5, "p90": 2.0}, "load_ms": 4.0, "beam_width": 1, "notes": {"a": [1]}}
    generation = GenerationRecord.from_json(older)
    assert generation.teacher_forced is None and generation.context is None
    assert generation.measured is not None and generation.measured.load_ms == 4.0
    assert generation.measured.peak_memory_mb is None  # not in the block: not measured, never made up
    assert generation.unknown == {"beam_width": 1, "notes": {"a": [1]}}
    written = generation.to_json()
    assert {k: written[k] for k in older} == older and list(written)[-2:] == ["beam_width", "notes"]
    assert "teacher_forced" not in written and written["peak_memory_mb"] is None
    assert GenerationRecord.from_json({}) == GenerationRecord()  # an empty block: nothing measured


@pytest.mark.parametrize("change, path", [
    ({"prompts": [{"prompt_tokens": 3}]}, "prompts[0]: no golden_tokens"),
    ({"prompts": "none"}, "prompts: expected a list"),
    ({"new_tokens": "three"}, "new_tokens: expected an integer"),
    ({"ttft_ms": {"p50": "fast", "p90": 1.0}}, "ttft_ms.p50: expected a number"),
    ({"processes": [{"ttft_p50_ms": 1.0, "tpot_p50_ms": None, "min": [1]}]}, "processes[0].min: expected a number"),
    ({"context": {"points": [], "longest_stable": None, "stopped": 5, "os_killed": False}},
     "context.stopped: no tokens, reason: expected an object"),
    ({"timing_not_judged": "slow"}, "timing_not_judged: unknown timing_not_judged 'slow'"),
])
def test_a_malformed_block_is_an_error_naming_where_and_the_field(change: dict, path: str) -> None:
    block = {**json.loads(MEASURED), **change}
    with pytest.raises(ValueError) as raised:
        GenerationRecord.from_json(block, "r.json: record 3: llm")
    assert str(raised.value).startswith(f"r.json: record 3: llm: {path}")
    record = Record("t::x", {"name": "m"}, "llama.cpp", checked=True, accuracy={}).to_json()
    with pytest.raises(ValueError, match=r"^a report's record: llm: "):
        Record.from_json({**record, "llm": block})


def test_a_block_that_is_no_object_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^a report's llm block: expected an object, got \[1\]"):
        GenerationRecord.from_json([1])
