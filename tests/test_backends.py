"""The real runtimes on the real fixture models: signatures, outputs, coverage, isolation, measurement."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES

from pytest_edge.backends import all_backends, get_backend
from pytest_edge.backends.executorch.coverage import pte_coverage
from pytest_edge.errors import BackendCrash, BackendError
from pytest_edge import codec
from pytest_edge.worker import BackendWorker, WorkerServer

# Also run by tox -e tflite-runtime: the LiteRT backend on tflite-runtime 2.14 there.
pytestmark = pytest.mark.tflite_runtime_lane



def _available(name: str) -> None:
    reason = get_backend(name).unavailable_reason()
    if reason:
        pytest.skip(reason)


def _server(name: str) -> WorkerServer:
    _available(name)
    return WorkerServer(name)


def _load(server: WorkerServer, artifact: str, shapes: dict | None = None) -> dict:
    return codec.to_json(server.op_load(artifact, str(FIXTURES / artifact), 1, shapes or {}))  # as the pipe carries it


def test_registry_has_the_builtin_backends() -> None:
    names = list(all_backends())
    assert names[:1] == ["onnxruntime-cpu"] and {"litert", "litert-ref", "executorch"} <= set(names)
    assert "onnxruntime-azure" not in names  # a remote provider is not a local backend
    assert get_backend("onnxruntime-xnnpack").unavailable_reason() in (
        None, "this onnxruntime wheel has no XnnpackExecutionProvider")
    with pytest.raises(KeyError, match="unknown backend"):
        get_backend("tensorrt")


def test_decoder_runtimes_are_backends_of_the_one_registry() -> None:
    """llama.cpp and ONNX Runtime GenAI register like every runtime; they run decoders only, so
    tensor models (edge tests, tensor goldens) never get them, while edge_llm tests get every
    runtime that decodes or says why it cannot."""
    from pytest_edge.backends import decoder_backends, reference_order, tensor_backends

    registered, tensors, decoders = set(all_backends()), set(tensor_backends()), list(decoder_backends())
    assert {"llama.cpp", "onnxruntime-genai"} <= registered and not {"llama.cpp", "onnxruntime-genai"} & tensors
    assert decoders[0] == "onnxruntime-cpu" and {"executorch", "llama.cpp", "onnxruntime-genai", "litert"} <= set(decoders)
    assert "litert-ref" not in decoders and get_backend("litert").decodes
    assert not {"llama.cpp", "onnxruntime-genai"} & set(reference_order())
    # Capabilities that exist or not: no method that exists only to raise.
    genai = get_backend("onnxruntime-genai")
    assert genai.tensors is None and genai.decoders is not None and not hasattr(genai, "load")
    assert get_backend("onnxruntime-cpu").tensors is get_backend("onnxruntime-cpu")
    assert get_backend("litert-ref").decoders is None and get_backend("litert").decoders is not None


def _declared_entry_points() -> dict[str, str]:
    """pyproject.toml's backend entry points (the installed metadata may predate them)."""
    import tomllib

    with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["project"]["entry-points"]["pytest_edge.backends"]


@pytest.mark.parametrize("tosa_python", ["", sys.executable])
def test_each_manifest_declares_what_its_backend_module_registers(monkeypatch: pytest.MonkeyPatch,
                                                                  tosa_python: str) -> None:
    """A folder's manifest is what the registry knows of its backends until one is used: the same
    names in the same order, and each declared field the backend's own."""
    from dataclasses import fields

    from pytest_edge.backends import Declared, _loaded

    monkeypatch.setenv("PYTEST_EDGE_TOSA_PYTHON", tosa_python)  # tosa-ref registered where it is set
    for entry, value in _declared_entry_points().items():
        module, _, attribute = value.partition(":")
        declared = getattr(__import__(module, fromlist=[attribute]), attribute)()
        assert declared and all(isinstance(d, Declared) for d in declared), entry
        for source in dict.fromkeys(d.load for d in declared):
            backends = _loaded.__wrapped__(source)
            assert [b.name for b in backends] == [d.name for d in declared if d.load == source], entry
            for backend, manifest in zip(backends, (d for d in declared if d.load == source)):
                differ = {f.name: (getattr(manifest, f.name), getattr(backend, f.name)) for f in fields(manifest)
                          if f.name != "load" and getattr(manifest, f.name) != getattr(backend, f.name)}
                assert not differ and manifest.artifact_suffixes() == backend.artifact_suffixes(), (backend.name, differ)
    assert any(d.name == "tosa-ref" for d in __import__("pytest_edge.backends.ethos_u", fromlist=["manifest"]).manifest()) \
        == bool(tosa_python)


def test_the_registry_imports_the_backend_a_session_uses_and_no_other() -> None:
    """With the manifests as entry points (pyproject.toml's), listing the backends, their suffixes
    and formats imports no backend module; using one imports its own; a worker told its source
    imports that module without the registry."""
    code = f"""
import importlib.metadata, sys
from pathlib import Path
import pytest_edge.backends as registry
points = tuple(importlib.metadata.EntryPoint(n, v, registry.ENTRY_POINT_GROUP) for n, v in {_declared_entry_points()!r}.items())
registry._entry_points = lambda: points
modules = lambda: sorted(m for m in sys.modules if m.startswith("pytest_edge.backends.") and m.count(".") > 2)
assert registry.format_backend(Path("m.ncnn.param")).name == "ncnn" and ".mnn" in registry.all_artifact_suffixes()
assert registry.reference_order()[0] == "onnxruntime-cpu" and "nnapi" in registry.predicted_targets()
assert modules() == [], modules()
assert type(registry.get_backend("onnxruntime-cpu")).__name__ == "OrtBackend"
assert registry.backend_source("onnxruntime-cpu@pi5") == "pytest_edge.backends.onnxruntime.backend:backends"
assert [m for m in modules() if m.endswith(".backend")] == ["pytest_edge.backends.onnxruntime.backend"], modules()
assert registry.all_backends()["mnn"].distribution == "MNN"  # undeclared: asked of the backend itself
assert registry.get_backend("ncnn-vulkan").name == "ncnn-vulkan"  # a variant: its runtime's module
assert registry.backend_source("ncnn-vulkan") is None
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    worker = ("import sys; from pytest_edge.worker.server import WorkerServer; "
              "WorkerServer('onnxruntime-cpu', source='pytest_edge.backends.onnxruntime.backend:backends'); "
              "print(sorted(m for m in sys.modules if m.endswith('.backend')), 'pytest_edge.backends.mnn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["['pytest_edge.backends.onnxruntime.backend']", "False"], done.stderr


def test_an_edge_test_naming_a_decoder_only_runtime_is_skipped_with_the_reason(pytester: pytest.Pytester,
                                                                               models: Path) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "llama.cpp"])
        def test_mlp(edge_model):
            pass
    """)
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert "llama.cpp runs decoder LLMs only (an edge_llm test), not tensor models" in result.stdout.str()


SUFFIX_BACKENDS = {".onnx": ["onnxruntime-cpu"], ".tflite": ["litert", "litert-ref"], ".pte": ["executorch"]}


@pytest.mark.parametrize("backend", ["onnxruntime-cpu", "litert", "litert-ref", "executorch"])
def test_tiny_cnn_agrees_across_runtimes(backend: str) -> None:
    reference = _server("onnxruntime-cpu")
    _load(reference, "tiny_cnn.onnx")
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (expected,) = reference.op_run("tiny_cnn.onnx", [x])
    server = _server(backend)
    artifact = "tiny_cnn" + get_backend(backend).suffix
    info = _load(server, artifact)
    assert [s["shape"] for s in info["inputs"]] == [[1, 3, 32, 32]]
    assert [s["dtype"] for s in info["outputs"]] == ["float32"]
    (actual,) = server.op_run(artifact, [x])
    assert actual.shape == (1, 10)
    np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)


def test_signatures_report_dtypes_and_dynamic_dims() -> None:
    server = _server("onnxruntime-cpu")
    two = _load(server, "two_io.onnx")
    assert [(s["name"], s["dtype"]) for s in two["inputs"]] == [("x", "float32"), ("n", "int32")]
    assert [(s["name"], s["dtype"]) for s in two["outputs"]] == [("y", "float32"), ("m", "int32")]
    assert _load(server, "mlp_dynbatch.onnx")["inputs"][0]["shape"] == ["batch", 16]
    assert _load(server, "conv_dynhw.onnx")["inputs"][0]["shape"] == [1, 3, "height", "width"]
    y, m = server.op_run("two_io.onnx", [np.ones((1, 8), np.float32), np.full((1, 8), 2, np.int32)])
    assert m.dtype == np.int32 and m.tolist() == [[3] * 8]


def test_executorch_two_io_positions_and_dtypes() -> None:
    server = _server("executorch")
    info = _load(server, "two_io.pte")
    assert [s["dtype"] for s in info["inputs"]] == ["float32", "int32"]
    y, m = server.op_run("two_io.pte", [np.ones((1, 8), np.float32), np.full((1, 8), 2, np.int32)])
    assert m.tolist() == [[3] * 8]


@pytest.mark.parametrize("backend", ["litert", "litert-ref"])
def test_stateful_tflite_is_repeatable_after_reset(backend: str) -> None:
    server = _server(backend)
    _load(server, "counter_state.tflite")
    x = np.ones((1, 4), np.float32)
    without_reset = [server.op_run("counter_state.tflite", [x], False)[0].tolist() for _ in range(2)]
    assert without_reset[1] != without_reset[0], "the model keeps state between runs"
    with_reset = [server.op_run("counter_state.tflite", [x], True)[0].tolist() for _ in range(2)]
    assert with_reset == [[[1.0] * 4]] * 2


def _tflite_ops(path: Path) -> list[str]:
    import importlib

    runtime = importlib.import_module(get_backend("litert-ref").runtime_module)  # LiteRT or tflite-runtime
    interpreter = runtime.Interpreter(
        str(path), experimental_op_resolver_type=runtime.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    return [op["op_name"] for op in interpreter._get_ops_details()]


@pytest.mark.parametrize("model", ["tiny_cnn_int8", "tiny_cnn", "counter_state"])
def test_litert_coverage_counts_every_compute_op(model: str) -> None:
    server = _server("litert")
    coverage = _load(server, f"{model}.tflite")["coverage"]
    compute = _tflite_ops(FIXTURES / f"{model}.tflite")  # the model's operator count
    assert coverage["delegated_ops"] + coverage["fallback_ops"] == coverage["total_ops"] == len(compute)
    ops = server.models[f"{model}.tflite"].interpreter._get_ops_details()
    assert coverage["partitions"] == sum(op["op_name"] == "DELEGATE" for op in ops)
    if model == "tiny_cnn" or (model == "tiny_cnn_int8" and get_backend("litert").distribution == "ai-edge-litert"):
        # tflite-runtime 2.14's default XNNPACK delegate leaves int8 graphs on the CPU kernels.
        assert coverage["fallback_op_names"] == {"CUMSUM": 1}
    ref = _load(_server("litert-ref"), f"{model}.tflite")["coverage"]
    assert ref["delegated_ops"] == 0 and ref["partitions"] == 0 and ref["total_ops"] == len(compute)


def test_int8_model_reports_int8_precision() -> None:
    server = _server("litert")
    assert _load(server, "tiny_cnn_int8.tflite")["precision"] == "int8"
    assert _load(server, "tiny_cnn.tflite")["precision"] == "float32"


def test_onnxruntime_cpu_coverage_is_every_node() -> None:
    import onnx

    coverage = _load(_server("onnxruntime-cpu"), "tiny_cnn.onnx")["coverage"]
    nodes = len(onnx.load(str(FIXTURES / "tiny_cnn.onnx")).graph.node)
    assert coverage["total_ops"] == coverage["delegated_ops"] == nodes and coverage["partitions"] == 1


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_mlp", "two_io"])
def test_pte_fallback_equals_export_time_delegation_info(model: str) -> None:
    """The .pte reading must agree with get_delegation_info at export time, op for op."""
    _available("executorch")
    torch = pytest.importorskip("torch")
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.exir import to_edge_transform_and_lower

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_models
    finally:
        sys.path.remove(str(FIXTURES))
    module, example = make_models._torch_modules(make_models._weights())[model]
    lowered = to_edge_transform_and_lower(torch.export.export(module, example), partitioner=[XnnpackPartitioner()])
    info = get_delegation_info(lowered.exported_program().graph_module)
    export_fallback = {name: row.non_delegated for name, row in info.delegation_by_operator.items()
                       if row.non_delegated and name != "getitem"}
    coverage = pte_coverage(lowered.to_executorch().buffer)
    runtime_fallback = {name.replace("::", "_"): count for name, count in coverage.fallback_op_names.items()}
    assert len(runtime_fallback) == len(export_fallback)
    for name, count in runtime_fallback.items():
        (match,) = [k for k in export_fallback if k.startswith(name + "_")]
        assert export_fallback[match] == count
    assert coverage.partitions == info.num_delegated_subgraphs
    assert not coverage.approximate
    # The shipped .pte reads the same as the freshly lowered program, and so does one whose
    # delegate payloads are inline in the flatbuffer rather than in segments after it.
    assert pte_coverage((FIXTURES / f"{model}.pte").read_bytes()) == coverage
    from executorch.exir import ExecutorchBackendConfig

    from pytest_edge.backends.executorch.program import INLINE, SEGMENT, read_plans

    inline = lowered.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=False)).buffer
    assert {loc for plan in read_plans(inline) for loc, _ in plan.delegate_data} <= {INLINE}
    assert {loc for plan in read_plans(lowered.to_executorch().buffer) for loc, _ in plan.delegate_data} <= {SEGMENT}
    assert pte_coverage(inline) == coverage


@pytest.mark.parametrize("artifact, backend", [("tiny_cnn.onnx", "onnxruntime-cpu"),
                                               ("tiny_cnn.tflite", "litert"),
                                               ("tiny_cnn.pte", "executorch")])
def test_truncated_artifact_gives_clear_error_and_worker_survives(tmp_path: Path, artifact: str, backend: str) -> None:
    _available(backend)
    broken = tmp_path / artifact
    data = (FIXTURES / artifact).read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    worker = BackendWorker(backend)
    try:
        with pytest.raises(BackendError) as error:
            worker.call("load", "broken", str(broken), 1, {}, artifact=str(broken))
        assert backend in str(error.value) and str(broken) in str(error.value)
        good = worker.call("load", "good", str(FIXTURES / artifact), 1, {}, artifact=artifact)
        assert good["inputs"][0]["shape"] == [1, 3, 32, 32]
    finally:
        worker.close()


def test_native_crash_is_reported_with_signal_and_worker_restarts() -> None:
    _available("onnxruntime-cpu")
    import threading

    artifact = str(FIXTURES / "tiny_mlp.onnx")
    worker = BackendWorker("onnxruntime-cpu")
    try:
        worker.call("load", "m", artifact, 1, {}, artifact=artifact)
        pid = worker.call("ping")
        assert pid != os.getpid()
        # Dies during a request (a long timed run): that request fails with the signal.
        threading.Timer(1.0, os.kill, (pid, signal.SIGSEGV)).start()
        with pytest.raises(BackendCrash, match=r"crashed \(signal SIGSEGV\) while trying to measure .*tiny_mlp"):
            worker.call("measure", "m", [np.zeros((1, 16), np.float32)], 10**7, 50, artifact=artifact)
        # Dies between requests: the next request starts a new process, loads the model there
        # again and answers, as if nothing happened.
        pid = worker.call("ping")
        worker.call("load", "m", artifact, 1, {}, artifact=artifact)
        os.kill(pid, signal.SIGKILL)
        worker._process.wait(timeout=30)
        (out,) = worker.call("run", "m", [np.ones((1, 16), np.float32)], artifact=artifact)
        assert out.shape[0] == 1 and worker.restarted and worker.call("ping") not in (pid, os.getpid())
    finally:
        worker.close()


def test_measurement_protocol_figures_are_consistent() -> None:
    server = _server("litert")
    _load(server, "tiny_cnn.tflite")
    x = np.zeros((1, 3, 32, 32), np.float32)
    result = codec.to_json(server.op_measure("tiny_cnn.tflite", [x], 3, 40))
    lat = result["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"]
    assert result["measured_runs"] == 40 and result["warmup_runs"] == 3
    assert result["first_inference_ms"] > 0
    # 40 runs of a ~50 us model last a few ms: too short for two drift windows of 0.05 s, no figure.
    assert result["drift"] is None and result["probe_drift"] is None
    assert result["peak_memory_mb"] is not None and result["peak_memory_mb"] >= result["steady_memory_mb"] - 1e-9


def _weights_model(path: Path, megabytes: int) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = int((megabytes * 2**20 / 4) ** 0.5)
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_peak_memory_grows_with_weight_size(tmp_path: Path) -> None:
    """Measured in fresh worker processes: a 64 MB weight must show up, a 4 MB one must not look like it."""
    _available("onnxruntime-cpu")
    peaks = {}
    for megabytes in (4, 64):
        path = _weights_model(tmp_path / f"w{megabytes}.onnx", megabytes)
        worker = BackendWorker("onnxruntime-cpu")
        try:
            worker.call("load", "m", str(path), 1, {})
            n = int((megabytes * 2**20 / 4) ** 0.5)
            peaks[megabytes] = worker.call("measure", "m", [np.ones((1, n), np.float32)], 1, 5)["peak_memory_mb"]
        finally:
            worker.close()
    assert peaks[64] - peaks[4] > 50, peaks


def test_memory_falls_back_to_a_fresh_worker_where_hwm_cannot_be_reset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (isolation none) with clear_refs refused: the second model's peak would inherit
    the first's, so the session measures it again in a fresh worker process."""
    _available("onnxruntime-cpu")
    from pytest_edge.measurement import timing as measure
    from pytest_edge.core.marker import MarkerSpec
    from pytest_edge.run.session import EdgeSession, Settings

    monkeypatch.setattr(measure, "reset_hwm", lambda: False)
    session = EdgeSession(Settings(golden_dir=tmp_path, rootdir=tmp_path, isolated=False,
                                   model_dirs=[FIXTURES]))
    try:
        spec = MarkerSpec(runs=5, warmup=1)
        session.load(session.plan(session.resolve("tiny_mlp"), "onnxruntime-cpu", spec))
        plan = session.plan(session.resolve("tiny_cnn"), "onnxruntime-cpu", spec)
        second = session.load(plan)
        server = session.pool.workers["onnxruntime-cpu"]._server
        feeds = [np.zeros((1, 3, 32, 32), np.float32)]
        assert server.op_measure(second.key, feeds, 1, 5).peak_memory_mb is None
        result = session.measure(second, feeds, plan)
        assert result.peak_memory_mb is not None and result.peak_memory_mb > 0
    finally:
        session.close()


def test_workers_start_from_any_main_module(tmp_path: Path) -> None:
    """A script without a __main__ guard, or code piped to `python -`, must not be re-run by a worker."""
    _available("onnxruntime-cpu")
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import numpy as np\n"
        "from pytest_edge.worker import BackendWorker\n"
        "print('main ran')\n"
        "w = BackendWorker('onnxruntime-cpu')\n"
        f"w.call('load', 'm', {str(FIXTURES / 'tiny_mlp.onnx')!r}, 1, {{}})\n"
        "print(w.call('run', 'm', [np.ones((1, 16), np.float32)])[0].shape)\n"
        "w.close()\n")
    import subprocess

    for command in ([sys.executable, str(script)], [sys.executable, "-"]):
        stdin = script.read_text() if command[-1] == "-" else None
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["main", "ran", "(1,", "4)"]


def test_pte_payload_of_an_unreadable_delegate_counts_once_and_is_approximate() -> None:
    """A delegate whose payload format pytest-edge does not know (executorch's own demo backend)."""
    _available("executorch")
    torch = pytest.importorskip("torch")
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    class AddThenCumsum(torch.nn.Module):
        def forward(self, x, y):
            return torch.cumsum(x + y, 0)

    example = (torch.ones(3), torch.ones(3))
    lowered = to_edge_transform_and_lower(torch.export.export(AddThenCumsum(), example),
                                          partitioner=[AddMulPartitionerDemo()])
    coverage = pte_coverage(lowered.to_executorch().buffer)
    assert coverage.approximate and coverage.delegates == ["BackendWithCompilerDemo"]
    assert (coverage.partitions, coverage.delegated_ops, coverage.fallback_op_names) == (1, 1, {"aten::cumsum": 1})


def test_a_worker_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A measuring worker orphaned by a SIGKILLed pytest must not keep a core busy: a parent that
    starts a worker and is killed takes the worker with it (Linux PR_SET_PDEATHSIG)."""
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import pathlib, sys, time\n"
        "from pytest_edge.worker import BackendWorker\n"
        "w = BackendWorker('onnxruntime-cpu'); w.launch(); w.wait_ready()\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(w._process.pid))\n"
        "time.sleep(600)\n")])
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        worker = int(pid_file.read_text())
        assert Path(f"/proc/{worker}").exists()
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    def running(pid: int) -> bool:  # a zombie (dead, waiting for whoever adopted it to reap it) is not
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    for _ in range(100):
        if not running(worker):
            break
        time.sleep(0.05)
    assert not running(worker), "the worker outlived the pytest process that started it"


def test_logs_of_killed_sessions_are_removed(tmp_path: Path) -> None:
    from pytest_edge.worker import remove_stale_logs

    dead = tmp_path / "pytest-edge-999999999-litert.log"
    live = tmp_path / f"pytest-edge-{os.getpid()}-litert.log"
    other = tmp_path / "pytest-edge-notes.log"
    for path in (dead, live, other):
        path.write_text("x")
    assert remove_stale_logs(tmp_path) == [dead]
    assert live.exists() and other.exists()


def test_an_executorch_measuring_process_imports_the_runtime_without_the_exporter() -> None:
    """A fresh process that imports the backend's runtime runs a .pte without executorch.exir's
    package (the exporter: ~4 s and ~140 MB of every measuring process), and a later
    ``import executorch.exir`` still gets the real package."""
    _available("executorch")
    script = f"""
import sys
import numpy as np
from pytest_edge.backends import get_backend
backend = get_backend("executorch")
backend.import_runtime()
model = backend.load({str(FIXTURES / "tiny_cnn.pte")!r}, threads=1, shapes={{}})
out = model.run([np.zeros((1, 3, 32, 32), np.float32)])
print("exporter", "executorch.exir.capture" in sys.modules, "outputs", len(out), out[0].shape)
import executorch.exir
print("real init", hasattr(executorch.exir, "to_edge_transform_and_lower"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exporter False outputs 1 (1, 10)" in done.stdout and "real init True" in done.stdout, done.stdout
