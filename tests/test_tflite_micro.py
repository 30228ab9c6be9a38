"""tflite-micro: a .tflite under TensorFlow Lite Micro's own interpreter (the tflite-micro wheel),
judged against the goldens like every backend, with its tensor arena in the record and a budget
(docs/backends-more-runtimes.md, "TensorFlow Lite Micro"). Real runtimes only: each test skips with
the reason where tflite-micro (or LiteRT, for a comparison) is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.backends import all_backends, get_backend, tensor_backends
from pytest_edge.errors import BackendError, DoesNotConvert
from pytest_edge import codec
from pytest_edge.worker.server import WorkerServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = FIXTURES.parent / "golden"
KWS = FIXTURES / "npu" / "kws_dscnn_int8.tflite"  # a keyword spotter, full-int8 with int8 I/O
WAKE_WORD = FIXTURES / "npu" / "wake_word_int8.tflite"  # streaming: its state in resource variables
GELU = FIXTURES / "micro" / "gelu_mlp.tflite"  # GELU: LiteRT runs it, TFLM has no kernel for it


def _server(name: str) -> WorkerServer:
    reason = get_backend(name).unavailable_reason()
    if reason:
        pytest.skip(reason)
    return WorkerServer(name)


def tflm_own_report(path: Path) -> dict[str, int]:
    """TFLM's own arena report for ``path``, asked of the wheel directly in a fresh process (an arena
    of 4 MiB, not the backend's choice): ``print_allocations``' total, head and tail, in bytes."""
    code = ("import sys; from tflite_micro import runtime; "
            "runtime.Interpreter.from_file(sys.argv[1], arena_size=1 << 22).print_allocations()")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = {kind: int(n) for kind, n in re.findall(r"Arena allocation (total|head|tail) (\d+) bytes", done.stderr)}
    assert set(found) == {"total", "head", "tail"}, done.stderr
    return found


def test_registered_as_a_tensor_backend_of_tflite_files_that_never_records_goldens() -> None:
    backend = all_backends()["tflite-micro"]
    assert "tflite-micro" in tensor_backends() and backend.artifact_suffixes() == (".tflite",)
    assert backend.reference_priority is None  # LiteRT's kernels record a .tflite's golden, not TFLM's
    assert get_backend("tflite-micro").has_delegate is False and get_backend("tflite-micro").distribution == "tflite-micro"


def test_the_arena_is_tflm_own_report_and_the_flash_the_model() -> None:
    server = _server("tflite-micro")
    for path in (KWS, FIXTURES / "tiny_cnn.tflite", FIXTURES / "counter_state.tflite"):
        arena = codec.to_json(server.op_load(path.name, str(path), None, {}).arena)
        own = tflm_own_report(path)
        assert (arena["total_bytes"], arena["head_bytes"], arena["tail_bytes"]) == (own["total"], own["head"], own["tail"])
        assert arena["total_bytes"] == arena["head_bytes"] + arena["tail_bytes"]
        assert arena["flash_bytes"] == path.stat().st_size
        assert arena["reported_by"].startswith("tflite-micro 0.dev") and "RecordingMicroAllocator" in arena["reported_by"]
    # The keyword spotter's, as measured (tflite-micro 0.dev20261023182759): 24208 = 16000 + 8208 bytes.
    assert tflm_own_report(KWS)["total"] > 16 * 1024


def test_int8_keyword_spotter_agrees_with_litert_reference_kernels_step_for_step() -> None:
    """Full-int8 I/O: TFLM's int8 kernels against LiteRT's reference kernels on the same seeded
    inputs, by output, in int8 steps (measured here: identical, 0 steps on every output)."""
    tflm, litert = _server("tflite-micro"), _server("litert-ref")
    info = codec.to_json(tflm.op_load("kws", str(KWS), None, {}))
    assert info["precision"] == "int8" and [s["dtype"] for s in info["inputs"] + info["outputs"]] == ["int8", "int8"]
    assert codec.to_json(litert.op_load("kws", str(KWS), None, {}).outputs) == info["outputs"]
    rng = np.random.default_rng(5)
    for step in range(8):
        x = rng.integers(-128, 128, (1, 49, 10, 1), dtype=np.int8)
        for name, got, want in zip([s["name"] for s in info["outputs"]], tflm.op_run("kws", [x]), litert.op_run("kws", [x])):
            steps = int(np.max(np.abs(got.astype(np.int32) - want.astype(np.int32))))
            assert steps == 0, f"step {step}: output {name!r} differs by {steps} int8 steps from litert-ref"


def test_a_streaming_wake_word_model_agrees_with_litert_frame_by_frame_with_tflm_own_arena() -> None:
    """The streaming wake-word detector (CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE; int8
    state): one frame per invocation, in order, without a reset between frames, on TFLM and on LiteRT's
    reference kernels, compared per output at each frame (measured here: identical over 16 frames);
    its arena is TFLM's own report (6512 bytes here)."""
    tflm, litert = _server("tflite-micro"), _server("litert-ref")
    info = codec.to_json(tflm.op_load("ww", str(WAKE_WORD), None, {}))
    litert.op_load("ww", str(WAKE_WORD), None, {})
    own = tflm_own_report(WAKE_WORD)
    assert {k: info["arena"][f"{k}_bytes"] for k in ("total", "head", "tail")} == own
    assert info["coverage"]["fallback_op_names"]["CALL_ONCE"] == 1
    rng = np.random.default_rng(3)
    frames = [rng.integers(-128, 128, info["inputs"][0]["shape"], dtype=np.int8) for _ in range(16)]
    seen = []
    for index, frame in enumerate(frames):
        got, want = tflm.op_run("ww", [frame], index == 0), litert.op_run("ww", [frame], index == 0)
        for spec, g, w in zip(info["outputs"], got, want):
            steps = int(np.max(np.abs(g.astype(np.int32) - w.astype(np.int32))))
            assert steps == 0, f"frame {index}: output {spec['name']!r} differs by {steps} int8 steps from litert-ref"
        seen.append(got[0].tolist())
    assert len({str(s) for s in seen}) > 1, "the outputs should move with the frames and the state"
    # A reset is a new stream: the first frame gives the first output again.
    assert tflm.op_run("ww", [frames[0]], True)[0].tolist() == seen[0]


def test_float_models_match_the_onnxruntime_goldens() -> None:
    server = _server("tflite-micro")
    for model in ("tiny_cnn", "tiny_mlp"):
        meta = json.loads((GOLDEN / model / "meta.json").read_text())
        with np.load(GOLDEN / model / meta["cases"][0]) as case:
            inputs = [case[k] for k in case.files if k.startswith("inputs/")]
            outputs = [case[k] for k in case.files if k.startswith("outputs/")]
        server.op_load(model, str(FIXTURES / f"{model}.tflite"), None, {})
        diff = max(float(np.max(np.abs(g - w))) for g, w in zip(server.op_run(model, inputs), outputs))
        assert diff <= 1e-4, f"{model}: max |diff| {diff:g} against the onnxruntime-cpu golden"


def test_a_stateful_model_keeps_its_state_between_steps_and_is_reset_before_a_case() -> None:
    server = _server("tflite-micro")
    server.op_load("c", str(FIXTURES / "counter_state.tflite"), None, {})
    x = np.ones((1, 4), np.float32)
    steps = [server.op_run("c", [x], False)[0].tolist() for _ in range(3)]
    assert steps == [[[1.0] * 4], [[2.0] * 4], [[3.0] * 4]]  # CALL_ONCE, then its variable, step by step
    assert [server.op_run("c", [x], True)[0].tolist() for _ in range(2)] == [[[1.0] * 4]] * 2


def test_an_operator_tflm_has_no_kernel_for_does_not_convert_with_its_own_words() -> None:
    with pytest.raises(DoesNotConvert, match=r"TFLM cannot run .*gelu_mlp.tflite.*Didn't find op for builtin "
                                             r"opcode 'GELU'"):
        _server("tflite-micro").op_load("g", str(GELU), None, {})


def test_a_corrupt_or_truncated_file_is_an_error_naming_the_file_and_the_backend(tmp_path: Path) -> None:
    server = _server("tflite-micro")
    truncated, garbage = tmp_path / "truncated.tflite", tmp_path / "garbage.tflite"
    truncated.write_bytes(KWS.read_bytes()[:20000])
    garbage.write_bytes(b"\x00" * 64)
    with pytest.raises(BackendError, match=r"^tflite-micro: .*truncated.tflite is not a valid TFLite flatbuffer: "
                                           r".*truncated or corrupt \(20000 bytes\)"):
        server.op_load("t", str(truncated), None, {})
    with pytest.raises(BackendError, match=r"^tflite-micro: .*garbage.tflite is not a TFLite flatbuffer"):
        server.op_load("g", str(garbage), None, {})


def test_the_record_keeps_the_arena_block_through_json_and_a_malformed_one_as_it_was() -> None:
    from pytest_edge.backends.arena import TensorArena
    from pytest_edge.core.record import Record

    arena = TensorArena(24208, 16000, 8208, "tflite-micro 0.dev (RecordingMicroAllocator)",
                        {"Persistent buffer data": 5660}, 43464)
    record = Record("t", {"name": "kws"}, "tflite-micro", accuracy={}, arena=arena, checked=True)
    data = record.to_json()
    assert data["arena"]["total_bytes"] == 24208 and data["arena"]["flash_bytes"] == 43464
    assert Record.from_json(json.loads(json.dumps(data))).arena == arena
    for bad in ({"total_bytes": "24208", "head_bytes": 16000, "tail_bytes": 8208}, {"total_bytes": True},
                {"total_bytes": -1, "head_bytes": 0, "tail_bytes": 0}):
        read = Record.from_json({**data, "arena": bad})
        assert read.arena is None and read.extra["arena"] == bad and read.to_json()["arena"] == bad


def test_check_arena_names_both_figures_and_a_backend_without_an_arena() -> None:
    from pytest_edge.backends.arena import TensorArena
    from pytest_edge.checks import BUDGET, check_arena

    arena = TensorArena(24208, 16000, 8208, "tflite-micro 0.dev (RecordingMicroAllocator)")
    [found] = check_arena(arena, {"max_arena_kb": 22.0}, "tflite-micro")
    assert found.message == ("tflite-micro: tensor arena 23.64 KiB (24208 bytes: head 16000, tail 8208; tflite-micro "
                             "0.dev (RecordingMicroAllocator)) > max_arena_kb 22 KiB (22528 bytes)")
    assert (found.check, found.value, found.budget, found.unit) == ("max_arena_kb", 24208 / 1024, 22.0, "KiB")
    assert check_arena(arena, {"max_arena_kb": 24.0}, "tflite-micro") == []  # 24576 bytes: it fits
    assert check_arena(arena, {"max_arena_kb": None}, "tflite-micro") == []
    [none] = check_arena(None, {"max_arena_kb": 24.0}, "litert")
    assert none.value is None and "litert reports none" in none.message
    assert BUDGET["max_arena_kb"].parse("24KB", "max_arena_kb") == 24.0 and not BUDGET["max_arena_kb"].measured


# ------------------------------------------------------------ as users meet it (pytester)


def _project(models: Path, *paths: Path) -> None:
    for path in paths:
        shutil.copy(path, models / path.name)


def test_the_wake_word_outputs_are_judged_and_the_arena_is_in_the_report(pytester: pytest.Pytester,
                                                                        models: Path) -> None:
    _server("tflite-micro")
    _server("litert-ref")
    _project(models, KWS)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="kws_dscnn_int8", backends=["litert-ref", "tflite-micro"], atol=0, rtol=0)
        def test_kws(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=2)
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    micro = records["tflite-micro"]
    assert micro["accuracy"]["reference"] == "litert-ref" and micro["accuracy"]["max_abs_err"] == 0
    own = tflm_own_report(KWS)
    assert {k: micro["arena"][f"{k}_bytes"] for k in ("total", "head", "tail")} == own
    assert micro["arena"]["flash_bytes"] == micro["artifact_bytes"] == KWS.stat().st_size
    assert micro["precision"] == "int8" and micro["coverage"]["partitions"] == 0
    assert "arena" not in records["litert-ref"]  # a runtime that plans no arena has no block


def test_max_arena_kb_below_the_arena_fails_naming_both_figures(pytester: pytest.Pytester, models: Path) -> None:
    _server("tflite-micro")
    _server("litert-ref")
    _project(models, KWS)
    own = tflm_own_report(KWS)["total"]
    below, above = own // 1024 - 1, own // 1024 + 1  # KiB
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.edge(model="kws_dscnn_int8", backends=["tflite-micro"], max_arena_kb={below})
        def test_small_device(edge_model):
            pass

        @pytest.mark.edge(model="kws_dscnn_int8", backends=["tflite-micro"], max_arena_kb={above})
        def test_large_device(edge_model):
            pass

        @pytest.mark.edge(model="kws_dscnn_int8", backends=["litert-ref"], max_arena_kb={above})
        def test_no_arena_here(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-backends=litert-ref")
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert (f"tflite-micro: tensor arena {own / 1024:.2f} KiB ({own} bytes: head " in out
            and f"> max_arena_kb {below} KiB ({below * 1024} bytes)" in out), out
    assert "litert-ref: max_arena_kb=" in out and "reports none" in out
    records = {r["test"].split("::")[1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    finding = records["test_small_device[kws_dscnn_int8-tflite-micro]"]["budget_findings"][0]
    assert (finding["check"], finding["value"], finding["budget"], finding["unit"]) == \
        ("max_arena_kb", own / 1024, below, "KiB")
    assert records["test_large_device[kws_dscnn_int8-tflite-micro]"]["verdict"] == "passed"


def test_a_model_tflm_cannot_run_is_reported_and_fails_only_where_targeted(pytester: pytest.Pytester,
                                                                          models: Path) -> None:
    _server("tflite-micro")
    _server("litert-ref")
    _project(models, GELU)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="gelu_mlp")
        def test_mlp(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-backends=litert-ref")
    result = pytester.runpytest_inprocess("-rs", "--edge-report=r.json")
    assert result.ret == 0, result.stdout.str()
    record = next(r for r in json.loads((pytester.path / "r.json").read_text())["records"] if r["backend"] == "tflite-micro")
    assert record["verdict"] == "does not convert"
    assert "gelu_mlp.tflite" in record["skip_reason"] and "Didn't find op for builtin opcode 'GELU'" in record["skip_reason"]
    targeted = pytester.runpytest_inprocess("--edge-backends=litert-ref,tflite-micro")
    targeted.assert_outcomes(passed=1, failed=1)
    targeted.stdout.fnmatch_lines(["*tflite-micro*does not convert here: TFLM cannot run *gelu_mlp.tflite*GELU*"])
