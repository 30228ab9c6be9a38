"""The plugin as users meet it: pytester runs of markers, options and failure messages.

The runs are in-process (no interpreter and pytest start each), but where the point is a process:
what a fresh one imports or rewrites, a backend an entry point of the test's folder registers (the
registry is read once per process), a warning count (an in-process run adds pytest's own "already
imported" warning), a verdict on a stored baseline measured in a fresh process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_helpers import LIGHT, calibrated_chain, needs_executorch

from pytest_edge.backends import get_backend
from pytest_edge.judging.regressions import LATENCY_FLOOR_MS

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

# The tests below count outcomes over the backends they name (OpenVINO, ncnn and MNN read or ship
# the same network too: test_more_runtimes.py counts those).
THREE_RUNTIMES = '["onnxruntime-cpu", "litert", "litert-ref", "executorch"]'
CNN_TEST = f"""
import numpy as np, pytest

@pytest.mark.edge(model="tiny_cnn", atol=1e-4, rtol=1e-3, backends={THREE_RUNTIMES})
def test_cnn(edge_model):
    assert edge_model(np.zeros((1, 3, 32, 32), np.float32)).shape == (1, 10)
"""


def test_golden_lifecycle_missing_create_pass_stale_refresh(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_cnn=CNN_TEST)
    missing = pytester.runpytest_inprocess(LIGHT)
    missing.assert_outcomes(failed=3)
    missing.stdout.fnmatch_lines(["*no golden outputs for model 'tiny_cnn'*--edge-update-golden*"])
    assert not (pytester.path / "golden").exists(), "nothing may be written without the flag"

    pytester.runpytest_inprocess(LIGHT, "--edge-update-golden").assert_outcomes(passed=3)
    meta = json.loads((pytester.path / "golden/tiny_cnn/meta.json").read_text())
    assert meta["reference"]["backend"] == "onnxruntime-cpu"
    assert set(meta["artifacts"]) == {"tiny_cnn.onnx", "tiny_cnn.tflite", "tiny_cnn.pte"}
    pytester.runpytest_inprocess(LIGHT).assert_outcomes(passed=3)

    old = meta["artifacts"]["tiny_cnn.tflite"]
    with open(models / "tiny_cnn.tflite", "ab") as handle:
        handle.write(b"\0" * 16)  # a changed artifact (still loadable)
    stale = pytester.runpytest_inprocess(LIGHT)
    stale.assert_outcomes(passed=1, failed=2)
    stale.stdout.fnmatch_lines([f"*stale*tiny_cnn.tflite has sha256 *, the golden*recorded for sha256 {old}*"])

    pytester.runpytest_inprocess(LIGHT, "--edge-update-golden").assert_outcomes(passed=3)
    pytester.runpytest_inprocess(LIGHT).assert_outcomes(passed=3)


def mlp_test(backend: str) -> str:
    """A marked test with an empty body: tiny_mlp on one backend."""
    return f"""
import pytest
@pytest.mark.edge(model="tiny_mlp", backends="{backend}")
def test_mlp(edge_model):
    pass
"""


EXACT_TEST = """
import pytest
@pytest.mark.edge(model="tiny_cnn", atol=0, rtol=0, backends=["onnxruntime-cpu", "litert"])
def test_exact(edge_model):
    pass
"""


def test_exact_tolerance_across_runtimes_reports_worst_element(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(EXACT_TEST)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*litert: output 'y': * of 10 elements differ beyond atol=0, rtol=0; max abs err *, "
        "max rel err *; worst at index (0, *): got *, golden *; would pass with atol=* (rtol=0) "
        "or rtol=* (atol=0); look first at numerics: same direction (cosine *)*",
    ])


def test_suggested_tolerance_really_passes(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(EXACT_TEST)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    line = next(text for text in result.outlines if "would pass with atol=" in text)
    needed = line.split("would pass with atol=")[1].split(" ")[0]
    pytester.makepyfile(f"""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", atol={float(needed) * 1.01}, rtol=0,
                          backends=["onnxruntime-cpu", "litert"])
        def test_exact(edge_model):
            pass
    """)
    pytester.runpytest_inprocess().assert_outcomes(passed=2)


def test_unknown_keyword_is_an_error_of_that_test_alone(pytester: pytest.Pytester, models: Path) -> None:
    """A bad marker is one error naming the test and keyword; the session goes on (pytest would
    stop at a collection error, the other tests with it)."""
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", max_fallbak=0.1)
        def test_typo(edge_model):
            pass

        def test_other():
            pass
    """)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_typo*unknown edge marker keyword(s) 'max_fallbak'*"])
    assert "Interrupted" not in result.stdout.str() and "Traceback" not in result.stdout.str()


@pytest.mark.parametrize("marker, message", [
    ('backends=["litrt"]', "*test_bad*unknown backend 'litrt'*"),
    ('p50_ms="12 parsecs"', "*test_bad*p50_ms: cannot parse '12 parsecs'*"),
    ('peak_memory_mb="64XB"', "*test_bad*peak_memory_mb: cannot parse '64XB'*"),
    ('max_fallback=1.5', "*test_bad*max_fallback: 1.5 is above 1*"),
])
def test_bad_marker_values_name_the_test_and_keyword(pytester: pytest.Pytester, models: Path,
                                                     marker: str, message: str) -> None:
    pytester.makepyfile(f"""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", {marker})
        def test_bad(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_missing_model_names_where_it_looked(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="no_such_model")
        def test_missing(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_missing*model 'no_such_model' not found*models/no_such_model*"])


def test_skips_name_the_reason_and_require_turns_them_into_failures(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="mlp_dynbatch", backends=["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
        def test_onnx_only(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1, skipped=3)
    result = pytester.runpytest_inprocess("-rs")
    result.stdout.fnmatch_lines(["*no .pte artifact for mlp_dynbatch*"])
    result.stdout.fnmatch_lines(["*no .tflite artifact for mlp_dynbatch*"])
    required = pytester.runpytest_inprocess("--edge-require=executorch")
    required.assert_outcomes(passed=1, failed=1, skipped=2)
    required.stdout.fnmatch_lines(["*executorch is required (--edge-require) but unavailable: no .pte artifact*"])


def test_backend_narrowing_by_option_marker_and_ini(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", skip_backends=["litert-ref"])
        def test_mlp(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-backends=onnxruntime-cpu,litert,litert-ref",
                                           "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_mlp[[]tiny_mlp-onnxruntime-cpu[]]", "*test_mlp[[]tiny_mlp-litert[]]"])
    assert "litert-ref" not in result.stdout.str()
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_backends = litert\n")
    result = pytester.runpytest_inprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_mlp[[]tiny_mlp-litert[]]", "1 test collected*"])


def test_empty_body_still_checks_golden_and_fixture_is_added(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
        def test_no_fixture():
            pass
    """)
    result = pytester.runpytest_inprocess("-v")
    result.stdout.fnmatch_lines(["*test_no_fixture[[]tiny_mlp-onnxruntime-cpu[]] FAILED*",
                                 "*no golden outputs for model 'tiny_mlp'*"])


def test_truncated_artifact_fails_that_test_only(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(CNN_TEST + """
@pytest.mark.edge(model="tiny_mlp")
def test_mlp(edge_model):
    pass
""")
    pytester.runpytest_inprocess(LIGHT, "--edge-update-golden").assert_outcomes(passed=6)
    for suffix in (".onnx", ".tflite"):
        data = (models / f"tiny_cnn{suffix}").read_bytes()
        (models / f"tiny_cnn{suffix}").write_bytes(data[: len(data) // 3])
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    result = pytester.runpytest_inprocess(LIGHT, "--edge-update-golden", "-p", "no:cacheprovider")
    # The golden of tiny_cnn cannot be refreshed from a truncated reference: its tests fail, with the
    # file and backend named; the other model's tests go on and pass.
    result.assert_outcomes(passed=3, failed=3)
    text = result.stdout.str()
    assert "onnxruntime-cpu failed to load" in text and "tiny_cnn.onnx" in text
    assert "Traceback" not in text


def test_native_crash_fails_one_test_and_the_worker_restarts(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import os, signal, subprocess, threading, time

        import pytest

        def litert_workers():  # this session's only: other sessions may run beside it
            found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "pytest_edge.worker litert "],
                                   capture_output=True, text=True).stdout.split()
            return [int(pid) for pid in found]

        def cpu_seconds(pid):
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        def segfault_the_measuring_worker(shared):
            # Wait for the measurement's fresh worker (on a busy machine it may start late) to have
            # spent a CPU second, far more than its import and load: it is in its ten million
            # warm-up runs then, whatever the load. Then crash it.
            for _ in range(1200):
                fresh = [pid for pid in litert_workers() if pid not in shared]
                try:
                    if fresh and all(cpu_seconds(pid) > 1.0 for pid in fresh):
                        for pid in fresh:
                            os.kill(pid, signal.SIGSEGV)
                        return
                except OSError:
                    pass
                time.sleep(0.05)

        @pytest.mark.edge(model="tiny_mlp", backends=["litert"])
        def test_crash(edge_model):
            threading.Thread(target=segfault_the_measuring_worker, args=(litert_workers(),), daemon=True).start()
            edge_model.with_protocol(warmup=10**7).measure()

        @pytest.mark.edge(model="tiny_mlp", backends=["litert"])
        def test_after(edge_model):
            pass
    """)
    # Spawned workers: the test finds them by their command line (a forked one is the zygote's
    # child and has the zygote's; tests/test_fork.py crashes forked workers).
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-processes=1", "--edge-fork=off")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*the litert runtime crashed (signal SIGSEGV) while trying to measure *tiny_mlp.tflite*"])
    # clock bound: the crash must end the measurement instead of the 600 s edge_timeout (its ten
    # million warm-up runs end with the process); a loaded CI runner took 66 s for the whole run, and
    # 450 s leaves that room for a machine 3x slower and busy, still under the timeout it tells apart.
    assert result.duration < 450


KILLED_WORKER_TEST = """
import os, signal, subprocess, time

import pytest

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
def test_killed(edge_model):
    edge_model(*[__import__("numpy").zeros(s.shape, s.dtype) for s in edge_model.inputs])
    # The session's one worker: onnxruntime-cpu's, in the spare interpreter it adopted
    # (``pytest_edge.worker --spare FD``), or one started for it (``pytest_edge.worker onnxruntime-cpu FD``).
    found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "pytest_edge.worker (--spare|onnxruntime-cpu) "],
                           capture_output=True, text=True).stdout.split()
    assert found, "no onnxruntime-cpu worker of this session"
    for pid in found:
        os.kill(int(pid), signal.SIGKILL)  # as the OOM killer does
    # Dead between requests: a zombie whose threads have all exited (only then can it be reaped;
    # a request during its exit meets a crash, which fails the test as crashes do).
    def exiting(pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return "Z" not in stat.read().split()[2] or len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    for pid in found:
        while exiting(pid):
            time.sleep(0.01)
"""


def test_a_worker_killed_during_a_test_is_restarted_with_a_warning_never_silently(
        pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(KILLED_WORKER_TEST)
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("--edge-report=r.json", "-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([
        "*EdgeWorkerRestarted: onnxruntime-cpu: its worker process died (signal SIGKILL) between requests*"
        "lost with it: tiny_mlp*",
        "*note: 1 backend worker(s) died between requests and were restarted*"])
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["verdict"] == "passed" and "signal SIGKILL" in record["restarts"][0]
    strict = pytester.runpytest_subprocess("--edge-strict-restarts")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*onnxruntime-cpu: its worker process died (signal SIGKILL)*"])


@needs_executorch
def test_report_fields_and_table(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(CNN_TEST)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=out/report.json")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*pytest-edge conformance*", "model*backend*max |Δ|*coverage*parts*P50 ms*P99 ms*"
                                 "load ms*peak MB*verdict*", "tiny_cnn*executorch*passed*",
                                 "tiny_cnn*litert *passed*", "tiny_cnn*litert-ref*passed*",
                                 "tiny_cnn*onnxruntime-cpu*passed*"])
    report = json.loads((pytester.path / "out/report.json").read_text())
    assert report["schema"] == "pytest-edge/report/1"
    assert set(report["machine"]) >= {"cpu", "cores", "memory_mb", "os", "python"}
    fields = {"test", "model", "backend", "runtime", "precision", "threads", "input", "warmup_runs",
              "measured_runs", "coverage", "load_ms", "first_inference_ms", "latency_ms", "peak_memory_mb",
              "steady_memory_mb", "drift", "accuracy", "verdict", "violations"}
    by_backend = {r["backend"]: r for r in report["records"]}
    assert set(by_backend) == {"onnxruntime-cpu", "litert", "litert-ref", "executorch"}
    for record in by_backend.values():
        assert fields <= set(record)
        assert record["latency_ms"] is None and record["peak_memory_mb"] is None  # not measured: null
        assert record["input"] == {record["input"] and next(iter(record["input"])): {"shape": [1, 3, 32, 32],
                                                                                   "dtype": "float32"}}
        assert record["accuracy"]["reference"] == "onnxruntime-cpu"
    assert by_backend["litert"]["runtime"]["delegates"] == ["XNNPACK"]
    assert by_backend["litert"]["coverage"]["fallback_op_names"] == {"CUMSUM": 1}
    assert by_backend["executorch"]["coverage"]["fallback_op_names"] == {"aten::cumsum": 1}
    assert by_backend["litert-ref"]["coverage"]["delegated_ops"] == 0


@needs_executorch
def test_xdist_gives_same_verdicts_and_one_merged_report(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(test_a=CNN_TEST, test_b="""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", max_fallback=0.0, backends=["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
        def test_mlp(edge_model):
            pass
        @pytest.mark.edge(model="tiny_cnn", max_fallback=0.0, backends=["litert", "executorch"])
        def test_cnn_strict(edge_model):
            pass
    """)
    serial = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=serial.json", "--edge-measure")
    serial.assert_outcomes(passed=8, failed=2)
    # Twice: the second run (without --edge-update-golden) reads what two workers wrote concurrently
    # in the first; it is also the plain `-n 2` run, which a third session only repeated. The second
    # measures (a fresh process a record): its report is the one compared and checked below.
    for flags in (("--edge-update-golden",), ("--edge-measure",)):
        parallel = pytester.runpytest_inprocess("-n", "2", *flags, "--edge-report=par.json")
        parallel.assert_outcomes(passed=8, failed=2)
    verdicts = lambda name: sorted((r["test"], r["verdict"]) for r in  # noqa: E731
                                   json.loads((pytester.path / name).read_text())["records"])
    assert verdicts("serial.json") == verdicts("par.json")
    records = json.loads((pytester.path / "par.json").read_text())["records"]
    measured = [r for r in records if r["verdict"] != "skipped"]
    assert len(measured) == 10 and all(r["latency_ms"]["p50"] > 0 for r in measured)
    parallel.stdout.fnmatch_lines(["*pytest-edge conformance*"])


@needs_executorch
def test_fallback_budget_names_operators(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", max_fallback=0.0, backends=["litert", "executorch", "onnxruntime-cpu"])
        def test_strict(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn", max_fallback=0.2, max_partitions=1,
                          backends=["litert", "executorch"])
        def test_loose(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(
        ["*litert: fallback 16.7% (1 of 6 operators on default CPU kernels) > max_fallback 0.0%; fell back: CUMSUM x1*"])
    result.stdout.fnmatch_lines(["*executorch: fallback 12.5% (1 of 8 operators on default CPU kernels) > "
                                 "max_fallback 0.0%; fell back: aten::cumsum x1*"])


def test_predicted_target_coverage(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", target="coreml", max_fallback=0.2,
                          backends=["onnxruntime-cpu", "litert"])
        def test_coreml(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(failed=1, passed=1)  # litert keeps its runtime figure (16.7 %)
    result.stdout.fnmatch_lines(
        ["*onnxruntime-cpu: fallback 25.0% (predicted) (2 of 8 operators*CumSum x1, Flatten x1*"])


def test_stateful_tflite_is_reset_before_each_case(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import numpy as np, pytest
        CASES = [{"x": np.full((1, 4), 1, np.float32)}, {"x": np.full((1, 4), 2, np.float32)}]

        @pytest.mark.edge(model="counter_state", inputs=lambda: CASES, atol=0, rtol=0, backends=["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
        def test_counter(edge_model):
            golden = edge_model.golden
            assert [c.outputs[edge_model.outputs[0].name].tolist() for c in golden.cases] == [[[1.0] * 4], [[2.0] * 4]]
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2, skipped=2)
    pytester.runpytest_inprocess().assert_outcomes(passed=2, skipped=2)


def test_user_inputs_with_int_scalar_and_shapes(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import numpy as np, pytest

        @pytest.mark.edge(model="two_io", inputs={"x": np.ones((1, 8), np.float32), "n": np.full((1, 8), 3)},
                          backends=["onnxruntime-cpu", "litert", "litert-ref"])
        def test_two_io(edge_model):
            assert edge_model.golden.cases[0].outputs["m"].tolist() == [[4] * 8]

        @pytest.mark.edge(model="conv_dynhw", shapes={"x": (1, 3, 12, 20)}, backends=["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
        def test_hw(edge_model):
            assert edge_model.golden.cases[0].outputs["y"].shape == (1, 8, 12, 20)

        @pytest.mark.edge(model="conv_dynhw", backends=["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
        def test_hw_without_shapes(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "-k", "without_shapes")
    result.assert_outcomes(failed=1, skipped=3)
    result.stdout.fnmatch_lines(["*input 'x' has a dynamic dimension 'height' at axis 2*shapes=*"])
    # Once a golden exists it fixes the shapes, with or without shapes= in the marker.
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "not without").assert_outcomes(passed=2, skipped=5)
    pytester.runpytest_inprocess().assert_outcomes(passed=3, skipped=8)


@pytest.mark.timing
def test_latency_and_memory_budgets_below_and_above(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", p50_ms="60s", p99_ms=60000, peak_memory_mb="4GB", max_load_ms="60s",
                          backends=["onnxruntime-cpu", "litert"], runs=20)
        def test_generous(edge_model):
            pass

        @pytest.mark.edge(model="tiny_mlp", p50_ms="1ns", p99_ms="1ns", peak_memory_mb=0, max_load_ms="1ns",
                          backends=["onnxruntime-cpu", "litert"], runs=20)
        def test_impossible(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=report.json")
    result.assert_outcomes(passed=2, failed=2)
    # The record keeps what each budget found, typed: the keyword, the figure, its value and budget.
    records = {(r["test"].split("[")[0].split("::")[-1], r["backend"]): r
               for r in json.loads((pytester.path / "report.json").read_text())["records"]}
    assert "budget_findings" not in records[("test_generous", "litert")]
    found = {f["check"]: f for f in records[("test_impossible", "litert")]["budget_findings"]}
    assert set(found) == {"p50_ms", "p99_ms", "peak_memory_mb", "max_load_ms"}
    assert found["p50_ms"]["figure"] == "P50 latency" and found["p50_ms"]["unit"] == "ms"
    # clock bound: a budget of 1 ns, which no machine meets.
    assert found["p50_ms"]["budget"] == 1e-06 and found["p50_ms"]["value"] > 1e-06
    assert found["p50_ms"]["message"] in records[("test_impossible", "litert")]["violations"]
    result.stdout.fnmatch_lines([
        "*4 check(s) failed on litert*",
        "*litert: P50 latency * ms > p50_ms 1e-06 ms (over 20 runs)*",
        "*litert: P99 latency * ms > p99_ms 1e-06 ms (over 20 runs) [[]weak evidence: P99 from only 20 runs*",
        "*litert: peak memory * MB over the runtime's baseline > peak_memory_mb 0 MB*",
        "*litert: load time * ms > max_load_ms 1e-06 ms*",
    ])


CHAIN_TEST = """
import pytest
@pytest.mark.edge(model="chain", backends="onnxruntime-cpu")
def test_chain(edge_model):
    pass
"""


def _scaled(report: dict, factor: float) -> dict:
    """The report as if the model had cost ``factor`` times what was measured: every timed figure,
    the fastest runs included (a costlier model moves them too); the machine probe stays."""
    for record in report["records"]:
        record["latency_ms"] = {k: v * factor for k, v in record["latency_ms"].items()}
        for process in record["processes"]:
            for key in ("p50", "p99", "min"):
                process[key] *= factor
    return report


@pytest.mark.timing
def test_baseline_regression_gate(pytester: pytest.Pytester, models: Path) -> None:
    """A stored baseline 100x faster than this run fails the gate; 1000x slower passes. The model is
    the chain calibrated on this machine (P50 at least 0.5 ms here, edge_helpers.calibrated_chain) and
    the baseline is this run's own figures scaled, so the regression is at least 0.49 ms, a hundred
    times the gate's 0.005 ms floor, on a machine of any speed (tiny_mlp's "100x" was 4.95 us on an
    AMD EPYC, under the floor, and passed). The fastest runs are scaled too, so no rule of the gate
    can call it interference or a slower machine: it fails without --edge-strict-timing."""
    calibrated_chain().write(models / "chain.onnx")
    pytester.makepyfile(CHAIN_TEST)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-measure", "--edge-report=base.json")
    base = json.loads((pytester.path / "base.json").read_text())
    assert len(base["records"][0]["processes"]) == 1  # edge_processes = 1 in this project
    # clock bound: the staging means something here: the chain was grown on this machine to a P50 of
    # 0.5 ms at least; measured again in a fresh process it may read less (a calibration on a busy
    # moment), and 10x the floor, 0.05 ms, leaves a factor of 10 for that while the 100x change
    # stays ten times the floor.
    assert base["records"][0]["latency_ms"]["p50"] > 10 * LATENCY_FLOOR_MS
    base["records"][0]["coverage"]["fallback"] = 0.0
    (pytester.path / "fast.json").write_text(json.dumps(_scaled(base, 0.01)))  # the stored run was 100x faster
    # Three processes a measurement: against a one-process baseline the test's spread comes from
    # these, and with one process a measurement (two after the re-measure, one degree of freedom)
    # a 100x regression once went undetected in CI when the two processes' P50s lay 3x apart.
    result = pytester.runpytest_inprocess("--edge-baseline=fast.json", "--edge-max-regression=10%",
                                           "--edge-processes=3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: P50 latency * ms (geometric mean of 6 process P50s; pooled over the runs, as in "
                                 "the table: * ms) is +*% "
                                 "against the baseline * ms (allowed +10%; *); measured twice in fresh processes: "
                                 "+*%, then +*% (CPU probe *%, fastest runs *% over 6 processes)",
                                 "*merge gate (against stored numbers): 1 compared, 1 regressed, 0 inconclusive*"])
    slow = _scaled(base, 1000)
    slow["records"][0]["peak_memory_mb"] = 1e6
    (pytester.path / "slow.json").write_text(json.dumps(slow))
    pytester.runpytest_inprocess("--edge-baseline=slow.json").assert_outcomes(passed=1)


@pytest.mark.timing
def test_stored_baseline_regression_the_machine_explains_is_inconclusive(pytester: pytest.Pytester,
                                                                         models: Path) -> None:
    """A regression against stored numbers that the machine itself explains (its probe ran as much
    slower as the model) is a warning by default (the run passes), a failure with
    --edge-strict-timing. Staged as ratios of this run's own figures, on the chain calibrated here (P50
    at least 0.5 ms): the stored model ran 10x faster (its fastest runs too, so neither fastest-run
    rule applies) and the stored machine probe 100x faster. The model is +900 % (above +10 % twice
    by 9x, and at least 4.5 ms, far above the 0.005 ms floor on any machine) and, divided by the
    machine's slowdown, -90 % (it must stay below +10 %: an 11x margin for fresh processes that vary
    by 10-70 % on a busy 2-core runner). The gate's other reason, a busy machine, is checked on
    recorded figures in test_stats_and_gate.py (whether a spinner is seen is below)."""
    calibrated_chain().write(models / "chain.onnx")
    pytester.makepyfile(CHAIN_TEST)
    pytester.runpytest_subprocess("--edge-update-golden", "--edge-measure", "--edge-report=base.json",
                                  "--edge-min-time=0.3s", "--edge-processes=3")
    base = _scaled(json.loads((pytester.path / "base.json").read_text()), 0.1)
    for process in base["records"][0]["processes"]:
        process["probe_us"] *= 0.01
    (pytester.path / "fast.json").write_text(json.dumps(base))
    gate = ("--edge-baseline=fast.json", "--edge-report=r.json", "--edge-min-time=0.3s", "-W", "default",
            "--edge-processes=3")
    lenient = pytester.runpytest_subprocess(*gate)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    strict = pytester.runpytest_subprocess(*gate, "--edge-strict-timing")
    lenient.assert_outcomes(passed=1, warnings=1)
    lenient.stdout.fnmatch_lines(["*EdgeInconclusive*P50 latency*inconclusive: the machine itself ran *x slower than "
                                  "when the baseline was measured*"])
    # The warning points at the test (its file and line), not at the plugin's hook.
    lenient.stdout.fnmatch_lines(["*test_stored_baseline_regression_the_machine_explains_is_inconclusive.py:[0-9]*: "
                                  "EdgeInconclusive*"])
    assert "plugin.py" not in lenient.stdout.str()
    lenient.stdout.fnmatch_lines(["*latency regression(s) against the stored baseline were inconclusive*"])
    assert record["baseline_check"]["verdict"] == "inconclusive"
    strict.assert_outcomes(failed=1)


@pytest.mark.timing
def test_other_processes_spinning_mark_the_timing_under_load(pytester: pytest.Pytester, models: Path) -> None:
    """Two other processes spinning while a 0.3 s window is timed: the record says so (other
    processes' CPU time from /proc/stat against a threshold of 0.5 cores). Two, so that it holds
    however the machine's cores are laid out: on 2 free cores they use about 1.3 of them; pinned to
    one core (taskset -c 0, where they share the measured core) two thirds of it. One spinner pinned
    beside the measurement would take half of it, exactly the threshold (a coin flip on an idle machine)."""
    import subprocess
    import sys

    pytester.makepyfile(mlp_test("onnxruntime-cpu"))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        pytester.runpytest_inprocess("--edge-measure", "--edge-report=r.json", "--edge-min-time=0.3s")
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    # clock bound: CPU time of two spinners over the window, a share of cores (1.3 of 2 free, 0.67 of
    # one pinned, 2 where there are more): the docstring's reason, whatever the machine's speed.
    assert record["timing_under_load"] is True and record["other_cores_busy"] > 0.5, record["other_cores_busy"]


@pytest.mark.timing
def test_ab_mode_catches_a_slower_model_and_passes_an_unchanged_one(pytester: pytest.Pytester) -> None:
    """--edge-baseline-models: each artifact and its twin of the same name, measured A B A B in
    fresh processes in this job; the paired ratio decides. The twins are the chain calibrated on this
    machine (P50 at least 0.5 ms here) and the slower model is that chain with twice the layers:
    twice the work (+100 %, at least 0.5 ms more, far from the noise and the 0.005 ms floor on a
    machine of any speed) in a file of the same size and the same memory (the layers are one Loop's
    trip count), so the gate fails it on time alone: only P50 latency may be found failed."""
    chain = calibrated_chain()
    for folder, work in (("main", 1.0), ("same", 1.0), ("slow", 2.0)):
        (pytester.path / folder).mkdir()
        chain.write(pytester.path / folder / "chain.onnx", work)
    pytester.makepyfile(CHAIN_TEST)
    gate = ("--edge-baseline-models=main", "--edge-processes=3", "--edge-min-time=0.1s", "--edge-report=r.json")
    for folder, outcome in (("same", "passed"), ("slow", "failed")):
        pytester.makeini(f"[pytest]\nedge_model_dirs = {folder}\nedge_golden_dir = golden_{folder}\n")
        result = pytester.runpytest_inprocess(*gate, "--edge-update-golden")  # the golden in the same session
        result.assert_outcomes(**{outcome: 1})
        record = json.loads((pytester.path / "r.json").read_text())["records"][0]
        check = record["baseline_check"]
        assert check["mode"] == "ab" and check["baseline"] == "main/chain.onnx"
        # clock bound: the slowest process's P50 over the fastest's is 1 at least by definition.
        assert len(record["processes"]) == 3 and record["process_spread"] >= 1.0
        failed = [f["figure"] for f in check.get("findings") or [] if f["verdict"] == "failed"]
        assert failed == ([] if outcome == "passed" else ["P50 latency"]), failed
        # The golden written in the same session passed: the gate's finding is the only violation.
        violations = record.get("violations") or []
        assert len(violations) == len(failed) and all("P50 latency" in v for v in violations), violations
    result.stdout.fnmatch_lines(["*P50 latency * ms (geometric mean of 8 process P50s; *) is +*% against the baseline "
                                 "twin * ms (allowed +10%; paired t=* over 8 A/B pairs*); measured twice in fresh "
                                 "processes: +*%, then +*% (CPU probe *%, fastest runs +*% over 8 pairs)"])


def test_junit_properties(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(mlp_test("litert"))
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-measure", "--junitxml=junit.xml")
    xml = (pytester.path / "junit.xml").read_text()
    for name in ("edge_backend", "edge_p50_ms", "edge_peak_memory_mb", "edge_fallback", "edge_load_ms"):
        assert f'name="{name}"' in xml


def test_isolation_none_runs_in_process(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import os, pytest
        @pytest.mark.edge(model="tiny_mlp", backends="onnxruntime-cpu")
        def test_mlp(edge_model, request):
            from pytest_edge.plugin import SESSION_KEY
            edge_model.inputs
            assert request.config.stash[SESSION_KEY].pool.workers["onnxruntime-cpu"].call("ping") == os.getpid()
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-isolation=none").assert_outcomes(passed=1)


def test_corrupt_golden_names_the_file(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(CNN_TEST)
    pytester.runpytest_inprocess(LIGHT, "--edge-update-golden").assert_outcomes(passed=3)
    (case,) = (pytester.path / "golden/tiny_cnn").glob("case_000-*.npz")
    case.write_bytes(case.read_bytes()[:40])
    result = pytester.runpytest_inprocess(LIGHT)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines([f"*corrupt golden file {case}*--edge-update-golden*"])


def test_edge_benchmark_fills_pytest_benchmark_table(pytester: pytest.Pytester, models: Path) -> None:
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert"])
        def test_speed(edge_model, edge_benchmark):
            result = edge_benchmark(edge_model, runs=30, warmup=2)
            assert len(result["samples_ns"]) == 30
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--benchmark-json=bench.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*benchmark: 2 tests*", "*test_speed[[]tiny_mlp-litert[]]*"])
    bench = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert {b["extra_info"]["edge_backend"] for b in bench} == {"onnxruntime-cpu", "litert"}
    assert all(b["stats"]["rounds"] == 30 and b["stats"]["median"] > 0 for b in bench)


def test_third_party_onnx_with_int64_scalar_input(pytester: pytest.Pytester, models: Path) -> None:
    """Several inputs, one an int64 scalar given through inputs=; a model not in fixtures/."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "kf"], ["y"])],
        "scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
                  helper.make_tensor_value_info("k", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(models / "scale.onnx"))
    pytester.makepyfile("""
        import numpy as np, pytest
        @pytest.mark.edge(model="scale", inputs={"x": np.ones((2, 4), np.float32), "k": 3}, backends=["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
        def test_scale(edge_model):
            assert edge_model.golden.cases[0].inputs["k"].dtype == np.int64
            assert edge_model.run({"x": np.ones((2, 4)), "k": np.int64(2)})["y"].tolist() == [[2.0] * 4] * 2
    """)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=1, skipped=3)
    pytester.runpytest_inprocess().assert_outcomes(passed=1, skipped=3)


def test_misspelt_backend_option_is_a_usage_error(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_inprocess("--edge-backends=onnxruntime-cpu,litrt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-edge: unknown backend 'litrt'; known: onnxruntime-cpu, litert-ref, executorch, litert*"])


@needs_executorch
def test_memory_budget_just_below_and_above_the_measured_peak_on_every_backend(
        pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", atol=1e-4, rtol=1e-3)
        def test_cnn(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-measure", "--edge-report=m.json")
    # Every backend installed here that runs tiny_cnn (OpenVINO, ncnn, MNN too where installed).
    peaks = {r["backend"]: r["peak_memory_mb"] for r in json.loads((pytester.path / "m.json").read_text())["records"]
             if r["verdict"] == "passed"}
    assert set(peaks) >= {"onnxruntime-cpu", "litert", "litert-ref", "executorch"} and all(peaks.values())
    tests = ["import pytest"]
    for backend, peak in peaks.items():
        name = backend.replace("-", "_")
        for label, factor in (("below", 0.5), ("above", 3.0)):
            tests.append(f"@pytest.mark.edge(model='tiny_cnn', atol=1e-4, rtol=1e-3, backends=['{backend}'], "
                         f"peak_memory_mb={peak * factor!r})\ndef test_{label}_{name}(edge_model):\n    pass\n")
    pytester.makepyfile(test_budgets="\n".join(tests))
    result = pytester.runpytest_inprocess("test_budgets.py", "-v")
    for backend in peaks:
        name = backend.replace("-", "_")
        result.stdout.fnmatch_lines([f"*test_below_{name}*FAILED*"], consecutive=False)
        result.stdout.fnmatch_lines([f"*test_above_{name}*PASSED*"], consecutive=False)
    result.assert_outcomes(passed=len(peaks), failed=len(peaks))


def test_failing_body_keeps_its_row_in_table_and_report(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
        def test_body_fails(edge_model):
            assert edge_model.inputs[0].shape == (2, 16), "wrong shape"
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: wrong shape*", "tiny_mlp*onnxruntime-cpu*failed*"])
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    assert record["verdict"] == "failed" and record["violations"] == ["the test body failed: AssertionError"]


def test_signature_mismatch_names_artifact_backend_and_golden(pytester: pytest.Pytester, models: Path) -> None:
    (models / "odd.onnx").write_bytes((models / "tiny_cnn.onnx").read_bytes())
    (models / "odd.tflite").write_bytes((models / "tiny_mlp.tflite").read_bytes())  # not the same network
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="odd", backends=["onnxruntime-cpu", "litert"])
        def test_odd(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*signature mismatch: *odd.tflite on litert does not match the golden signature "
                                 "recorded in *golden/odd/meta.json (from onnxruntime-cpu): "
                                 "input 'x': shape [[]1, 16[]]*"])


def test_nan_outputs_are_a_clear_error(pytester: pytest.Pytester, models: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "log",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(models / "log.onnx"))
    pytester.makepyfile("""
        import numpy as np, pytest
        @pytest.mark.edge(model="log", inputs={"x": -np.ones((1, 4), np.float32)}, backends="onnxruntime-cpu")
        def test_log(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu: output 'y' of *log.onnx has 4 NaN and 0 Inf values*"])
    assert not (pytester.path / "golden/log").exists(), "no golden may be written from NaN outputs"


@pytest.mark.tflite_runtime_lane  # tflite-runtime 2.14's delegate names no tensor: its triage says less
def test_triage_runs_the_same_artifact_without_its_delegate(pytester: pytest.Pytester, models: Path) -> None:
    # "quantized" pairs the float .onnx with the int8 .tflite: same signature, not the same numbers.
    (models / "quantized.onnx").write_bytes((models / "tiny_cnn.onnx").read_bytes())
    (models / "quantized.tflite").write_bytes((models / "tiny_cnn_int8.tflite").read_bytes())
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="quantized", atol=1e-4, backends=["onnxruntime-cpu", "litert"])
        def test_artifact(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn", atol=0, rtol=0, tolerances={"litert-ref": {"atol": 1e-3}},
                          backends=["onnxruntime-cpu", "litert"])
        def test_kernels(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*triage: litert-ref on the same quantized.tflite also differs from the golden (y): the artifact itself "
        "disagrees with the reference onnxruntime-cpu*",
        "*triage: litert-ref on the same tiny_cnn.tflite matches the golden: the litert delegate's kernels diverge, "
        "not the artifact*",
    ])
    if get_backend("litert").distribution == "ai-edge-litert":
        # tflite-runtime 2.14 does not delegate with all tensors preserved, so it has nothing to name.
        result.stdout.fnmatch_lines(["*first divergence: tensor *, the output of CONV_2D (node 1) on XNNPACK "
                                     "(max |Δ| * against litert-ref)*"])
        # A golden recorded by the delegate-free sibling itself: the operator is named too.
        sibling = pytester.runpytest_inprocess("--edge-update-golden", "--edge-reference-backend=litert-ref",
                                                "-k", "test_kernels")
        sibling.stdout.fnmatch_lines([
            "*triage: the golden comes from litert-ref on the same artifact: the litert delegate's kernels "
            "diverge, not the artifact; first divergence: tensor *, the output of CONV_2D (node 1) on XNNPACK*"])
        # ONNX Runtime misses that golden too; its node-by-node line says where the golden came from.
        sibling.stdout.fnmatch_lines(["*note that the golden itself was recorded by litert-ref on tiny_cnn.tflite, "
                                      "not by onnxruntime-cpu*"])


def test_third_party_backend_registers_through_entry_points(pytester: pytest.Pytester, models: Path,
                                                             noopt_backend: str) -> None:
    """An installed distribution adds a runtime configuration without touching pytest-edge: here ONNX
    Runtime with every graph optimisation off, a real runtime behind the same interface."""
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["onnxruntime-cpu", "onnxruntime-noopt"], max_fallback=0)
        def test_cnn(edge_model):
            assert edge_model.coverage.total_ops == 8
    """)
    result = pytester.runpytest_subprocess("--edge-update-golden", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_cnn[[]tiny_cnn-onnxruntime-noopt[]] PASSED*"])


def test_reference_backend_and_golden_dir_options(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert-ref"])
        def test_mlp(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-reference-backend=litert-ref",
                                  "--edge-golden-dir=refs/golden").assert_outcomes(passed=2)
    meta = json.loads((pytester.path / "refs/golden/tiny_mlp/meta.json").read_text())
    assert meta["reference"]["backend"] == "litert-ref" and meta["reference"]["artifact"] == "tiny_mlp.tflite"
    assert not (pytester.path / "golden").exists()
    # the same policy from the ini file, with the measurement protocol's defaults
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_golden_dir = refs/golden\n"
                     "edge_reference_backend = litert-ref\nedge_runs = 7\nedge_warmup = 2\nedge_measure = true\n"
                     "edge_processes = 2\nedge_min_time = 0\n")
    pytester.runpytest_inprocess("--edge-report=r.json").assert_outcomes(passed=2)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    # 7 runs in each of 2 fresh processes, pooled
    assert {(r["measured_runs"], r["warmup_runs"]) for r in records} == {(14, 2)}
    assert all([p["runs"] for p in r["processes"]] == [7, 7] for r in records)
    assert {r["accuracy"]["reference"] for r in records} == {"litert-ref"}


def test_fixture_without_marker_and_bad_isolation_are_usage_errors(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile("def test_unmarked(edge_model):\n    pass\n")
    result = pytester.runpytest_inprocess()
    result.stdout.fnmatch_lines(["*test_unmarked: edge_model needs @pytest.mark.edge(model=...)*"])
    result = pytester.runpytest_inprocess("--edge-isolation=thread")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--edge-isolation: 'thread' is not 'process' or 'none'*"])


def test_a_session_without_the_marker_imports_no_runtime(pytester: pytest.Pytester) -> None:
    # Nor NumPy, nor the session and what it runs: the plugin's presence alone costs a run without
    # edge tests little (every module pytest_edge imports is assertion-rewritten by pytest, again on
    # every run where bytecode is not written).
    pytester.makepyfile("""
        import sys
        def test_nothing_heavy():
            heavy = {"onnxruntime", "executorch", "torch", "ai_edge_litert", "tflite_runtime", "numpy",
                     "pytest_edge.run.session", "pytest_edge.backends", "pytest_edge.worker.client"}
            assert not heavy & set(sys.modules)
    """)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_the_package_is_not_assertion_rewritten(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest marks an entry-point plugin's package for rewriting; the plugin unmarks it, so what it
    # imports after itself loads as plain modules (a rewrite is 2.2x a plain compile, every run
    # where no bytecode is written). The package found on sys.path, as a wheel installs it: an
    # editable install's finder is one pytest's hook never rewrites from.
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    pytester.makepyfile("""
        import sys
        from _pytest.assertion.rewrite import AssertionRewritingHook
        import pytest_edge.core.plan  # imported after the plugin, as the session's modules are

        def test_plain_modules():
            loaders = {name: type(getattr(module, "__loader__", None)) for name, module in list(sys.modules.items())
                       if name.startswith("pytest_edge")}
            assert loaders["pytest_edge.plugin"] is AssertionRewritingHook  # the hook did see the package
            assert {name for name, loader in loaders.items() if loader is AssertionRewritingHook} \\
                == {"pytest_edge", "pytest_edge.plugin"}
    """)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_misspelt_reference_backend_fails_with_its_name(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(mlp_test("onnxruntime-cpu"))
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-reference-backend=onnxruntime-cpux")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*edge_reference_backend: unknown backend 'onnxruntime-cpux'*"])
