"""OpenVINO, ncnn and MNN: the real runtimes on the shipped fixture models, against the shipped
goldens (recorded by onnxruntime-cpu). Each test skips with the reason where its runtime is not
installed (the tflite-runtime lane has none of them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_edge import codec
from pytest_edge.backends import InputShapes, all_backends, get_backend
from pytest_edge.errors import BackendError, DoesNotConvert
from pytest_edge.core.models import resolve_model
from pytest_edge.worker import WorkerServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
GOLDEN = ROOT / "golden"


def _server(name: str) -> WorkerServer:
    reason = get_backend(name).unavailable_reason()
    if reason:
        pytest.skip(reason)
    return WorkerServer(name)


def golden_case(model: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The first stored case of the shipped golden of ``model``: its inputs and outputs by name."""
    meta = json.loads((GOLDEN / model / "meta.json").read_text())
    with np.load(GOLDEN / model / meta["cases"][0]) as case:
        inputs = {k.removeprefix("inputs/"): case[k] for k in case.files if k.startswith("inputs/")}
        outputs = {k.removeprefix("outputs/"): case[k] for k in case.files if k.startswith("outputs/")}
    return inputs, outputs


def max_diff_vs_golden(server: WorkerServer, artifact: Path, model: str) -> float:
    """Runs ``artifact`` on the golden's inputs (by position) and returns max |actual - golden|."""
    info = codec.to_json(server.op_load(artifact.name, str(artifact), 1, {}))
    inputs, outputs = golden_case(model)
    assert len(info["inputs"]) == len(inputs) and len(info["outputs"]) == len(outputs)
    actual = server.op_run(artifact.name, list(inputs.values()))
    diffs = []
    for got, want in zip(actual, outputs.values()):
        assert got.shape == want.shape and got.dtype == want.dtype
        diffs.append(float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))))
    return max(diffs)


def test_the_more_runtimes_are_registered() -> None:
    names = list(all_backends())
    assert {"openvino", "ncnn", "mnn"} <= set(names)
    # Their precision/device variants are known by name, so they are reported, not unknown.
    assert get_backend("openvino-bf16").name == "openvino-bf16"
    assert get_backend("ncnn-vulkan").name == "ncnn-vulkan"


# ------------------------------------------------------------------ OpenVINO

@pytest.mark.parametrize("artifact", ["tiny_cnn.onnx", "tiny_cnn.tflite", "tiny_mlp.onnx", "tiny_mlp.tflite"])
def test_openvino_matches_the_shipped_golden(artifact: str) -> None:
    server = _server("openvino")
    diff = max_diff_vs_golden(server, FIXTURES / artifact, artifact.split(".")[0])
    assert diff <= 1e-4, f"openvino on {artifact}: max |diff| {diff:g} vs the onnxruntime-cpu golden"
    info = codec.to_json(server.op_load(artifact, str(FIXTURES / artifact), 1, {}))
    assert info["precision"] == "float32"  # set explicitly: a BF16-capable CPU would default to bf16
    assert info["runtime"]["name"] == "openvino" and info["runtime"]["version"]
    coverage = info["coverage"]
    assert coverage["method"] == "runtime" and coverage["delegates"] == ["CPU"]
    assert coverage["total_ops"] > 0 and coverage["fallback_ops"] == 0


def test_openvino_prefers_its_ir_then_onnx_then_tflite(tmp_path: Path) -> None:
    server = _server("openvino")
    import openvino as ov

    for name in ("tiny_cnn.onnx", "tiny_cnn.tflite"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    backend = get_backend("openvino")
    suffixes = backend.artifact_suffixes()
    assert backend.artifact_of(resolve_model("tiny_cnn", [tmp_path], suffixes)).suffix == ".onnx"
    (tmp_path / "tiny_cnn.onnx").unlink()
    assert backend.artifact_of(resolve_model("tiny_cnn", [tmp_path], suffixes)).suffix == ".tflite"
    ov.save_model(ov.Core().read_model(str(FIXTURES / "tiny_cnn.onnx")), str(tmp_path / "tiny_cnn.xml"),
                  compress_to_fp16=False)
    ir = backend.artifact_of(resolve_model("tiny_cnn", [tmp_path], suffixes))
    assert ir.name == "tiny_cnn.xml"
    assert max_diff_vs_golden(server, ir, "tiny_cnn") <= 1e-4
    (tmp_path / "tiny_cnn.bin").unlink()
    with pytest.raises(BackendError, match=r"openvino: .*tiny_cnn.xml is OpenVINO IR without its weights"):
        server.op_load("ir", str(ir), 1, {})


def test_openvino_names_the_file_it_cannot_read(tmp_path: Path) -> None:
    server = _server("openvino")
    # Resource variables (VAR_HANDLE) have no OpenVINO TFLite-frontend type.
    # Resource variables: a borrowed artifact its frontend does not convert (its own outcome).
    with pytest.raises(DoesNotConvert, match=r"does not convert here: OpenVINO's TensorFlow Lite frontend cannot "
                                             r"convert .*counter_state.tflite.*RESOURCE"):
        server.op_load("c", str(FIXTURES / "counter_state.tflite"), 1, {})
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(BackendError, match=r"openvino: .*empty.onnx is empty"):
        server.op_load("e", str(empty), 1, {})


def test_openvino_precision_variants_follow_the_cpu_capabilities() -> None:
    _server("openvino")
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    for name, capability in (("openvino-bf16", "BF16"), ("openvino-f16", "FP16")):
        backend = get_backend(name)
        assert backend.reference_sibling == "openvino"
        reason = backend.unavailable_reason()
        if capability not in capabilities:
            assert reason is not None and f"no {capability}" in reason
            continue
        assert reason is None
        server = WorkerServer(name)
        diff = max_diff_vs_golden(server, FIXTURES / "tiny_cnn.onnx", "tiny_cnn")
        # Reduced precision is really used: further from the golden than float32, still close.
        assert 1e-4 < diff < 0.1, f"{name}: max |diff| {diff:g}"
        assert server.op_load("tiny_cnn.onnx", str(FIXTURES / "tiny_cnn.onnx"), 1, {}).precision in (
            "bfloat16", "float16")


def test_openvino_predicted_coverage_for_a_device_without_its_plugin_is_none() -> None:
    _server("openvino")
    import openvino as ov

    core = ov.Core()
    for target, device in (("gpu", "GPU"), ("npu", "NPU")):
        coverage = get_backend("openvino").predicted_coverage(FIXTURES / "tiny_cnn.onnx", target)
        try:
            core.query_model(core.read_model(str(FIXTURES / "tiny_cnn.onnx")), device)
        except RuntimeError:
            assert coverage is None  # said unavailable: check_coverage reports it cannot be read
        else:
            assert coverage is not None and coverage.method == "predicted" and coverage.delegates == [device]


def test_openvino_in_a_pytest_run(pytester: pytest.Pytester, models: Path) -> None:
    _server("openvino")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["onnxruntime-cpu", "openvino", "openvino-bf16", "openvino-f16"],
                          tolerances={"openvino-bf16": {"atol": 0.1}, "openvino-f16": {"atol": 0.1}},
                          max_fallback=0.0)
        def test_cnn(edge_model):
            pass

        @pytest.mark.edge(model="tiny_mlp", backends=["openvino"], target="gpu", max_fallback=0.0)
        def test_gpu_target(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn", backends=["openvino-bf16"])
        def test_bf16_at_float32_tolerance(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("-rs", "--edge-update-golden", "--edge-report=report.json")
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    expected_skips = sum(c not in capabilities for c in ("BF16", "FP16")) + ("BF16" not in capabilities)
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == expected_skips, result.stdout.str()
    records = json.loads((pytester.path / "report.json").read_text())["records"]
    by_backend = {(r["model"]["name"], r["backend"]): r for r in records}
    cnn = by_backend[("tiny_cnn", "openvino")]
    assert cnn["verdict"] == "passed" and cnn["runtime"]["name"] == "openvino"
    assert cnn["coverage"]["delegates"] == ["CPU"]
    if "BF16" in capabilities:
        # Triage runs the float32 sibling on the same artifact, then both operation by operation.
        result.stdout.fnmatch_lines(["*triage: openvino on the same tiny_cnn.onnx matches the golden*"
                                     "first divergence: tensor*Convolution*"])
    gpu = by_backend[("tiny_mlp", "openvino")]
    if "GPU" not in ov.Core().available_devices:
        assert gpu["verdict"] == "failed"
        result.stdout.fnmatch_lines(["*openvino: delegate coverage cannot be read*"])


# ------------------------------------------------------------------ ncnn

@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_mlp"])
def test_ncnn_matches_the_shipped_golden(model: str) -> None:
    server = _server("ncnn")
    artifact = FIXTURES / f"{model}.ncnn.param"
    diff = max_diff_vs_golden(server, artifact, model)
    assert diff <= 1e-4, f"ncnn on {artifact.name}: max |diff| {diff:g} vs the onnxruntime-cpu golden"
    info = codec.to_json(server.op_load(artifact.name, str(artifact), 1, {}))
    # The batch ncnn does not have is given back: the signature is the .onnx's, in NCHW.
    golden_inputs, golden_outputs = golden_case(model)
    assert [s["shape"] for s in info["inputs"]] == [list(v.shape) for v in golden_inputs.values()]
    assert [s["shape"] for s in info["outputs"]] == [list(v.shape) for v in golden_outputs.values()]
    assert info["precision"] == "float32" and info["runtime"]["name"] == "ncnn"
    coverage = info["coverage"]
    assert coverage["delegates"] == ["cpu"] and coverage["fallback_ops"] == 0 and coverage["total_ops"] > 0
    if model == "tiny_cnn":
        assert "CumulativeSum" in (FIXTURES / "tiny_cnn.ncnn.param").read_text()  # the op XNNPACK leaves out


def test_ncnn_fp16_is_its_default_options_and_vulkan_needs_a_device() -> None:
    server = _server("ncnn-fp16")
    diff = max_diff_vs_golden(server, FIXTURES / "tiny_cnn.ncnn.param", "tiny_cnn")
    # ncnn's defaults store activations in fp16 where the CPU can (x86: F16C): close, not float32-close.
    assert diff < 0.05, f"ncnn-fp16: max |diff| {diff:g}"
    assert get_backend("ncnn-fp16").reference_sibling == "ncnn"
    from pytest_edge.backends.ncnn.backend import vulkan_devices

    reason = get_backend("ncnn-vulkan").unavailable_reason()
    assert (reason is None) == (vulkan_devices() > 0)
    if reason is not None:
        assert "no Vulkan device" in reason


def test_ncnn_names_what_is_missing(tmp_path: Path) -> None:
    server = _server("ncnn")
    param = tmp_path / "tiny_mlp.ncnn.param"
    shutil.copy(FIXTURES / "tiny_mlp.ncnn.param", param)
    with pytest.raises(BackendError, match=r"ncnn: .*tiny_mlp.ncnn.param has no weights file .*tiny_mlp.ncnn.bin"):
        server.op_load("a", str(param), 1, {})
    shutil.copy(FIXTURES / "tiny_mlp.ncnn.bin", tmp_path / "tiny_mlp.ncnn.bin")
    # pnnx's own output has no input shape: said, with the way out.
    param.write_text(param.read_text().replace(" 0=16\n", "\n", 1))
    with pytest.raises(BackendError, match=r"does not give the shape of input 'in0'.*tiny_mlp.pnnx.param.*shapes="):
        server.op_load("b", str(param), 1, {})
    info = codec.to_json(server.op_load("c", str(param), 1, codec.to_json(InputShapes(requested={"in0": (1, 16)}))))
    assert info["outputs"][0]["shape"] == [1, 4]
    # A short line or garbage: the line named, not an IndexError.
    good = param.read_text()
    param.write_text(good + "InnerProduct\n")
    with pytest.raises(BackendError, match=r"tiny_mlp.ncnn.param line \d+ is not a layer .*'InnerProduct'"):
        server.op_load("e", str(param), 1, {})
    param.write_text(good + "Split s 1 2 a\n")
    with pytest.raises(BackendError, match=r"line \d+ declares 1 input and 2 output blobs but names 1"):
        server.op_load("f", str(param), 1, {})
    param.write_text(good)
    # A declared input no machine could hold: refused before ncnn or NumPy allocates it.
    with pytest.raises(BackendError, match=r"input 'in0' \(marker shapes=\): shape \[1, 3, 20000, 20000\] is "
                                           r"1,200,000,000 elements, more than"):
        server.op_load("g", str(param), 1, codec.to_json(InputShapes(requested={"in0": (1, 3, 20000, 20000)})))
    param.write_text(param.read_text().replace("InnerProduct", "NoSuchLayer", 1))
    # What ncnn printed on stderr, quoted: the layer it does not have.
    with pytest.raises(DoesNotConvert, match=r"ncnn: ncnn has no layer NoSuchLayer in .*tiny_mlp.ncnn.param .*"
                                             r"ncnn said: .*layer NoSuchLayer not exists or registered"):
        server.op_load("d", str(param), 1, {})


# ------------------------------------------------------------------ MNN

@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_mlp"])
def test_mnn_matches_the_shipped_golden(model: str) -> None:
    server = _server("mnn")
    artifact = FIXTURES / f"{model}.mnn"
    diff = max_diff_vs_golden(server, artifact, model)
    assert diff <= 1e-4, f"mnn on {artifact.name}: max |diff| {diff:g} vs the onnxruntime-cpu golden"
    info = codec.to_json(server.op_load(artifact.name, str(artifact), 1, {}))
    golden_inputs, _ = golden_case(model)
    assert [s["name"] for s in info["inputs"]] == list(golden_inputs)  # the .onnx's own names
    assert info["precision"] == "float32" and info["runtime"]["name"] == "MNN" and info["runtime"]["version"]
    coverage = info["coverage"]  # the operators one session run went through, all on the CPU
    assert coverage["delegates"] == ["CPU"] and coverage["total_ops"] > 0 and coverage["fallback_ops"] == 0


def test_mnn_gpu_forward_types_are_probed_and_bad_files_named(tmp_path: Path) -> None:
    server = _server("mnn")
    for name in ("mnn-opencl", "mnn-vulkan"):
        reason = get_backend(name).unavailable_reason()
        assert reason is None or "forward type here" in reason
    broken = tmp_path / "broken.mnn"
    broken.write_bytes((FIXTURES / "tiny_mlp.onnx").read_bytes())
    with pytest.raises(BackendError, match=r"mnn: MNN cannot load .*broken.mnn"):
        server.op_load("x", str(broken), 1, {})


def test_ncnn_and_mnn_in_a_pytest_run(pytester: pytest.Pytester, models: Path) -> None:
    """One golden from onnxruntime-cpu, checked on ncnn and MNN, with a coverage budget; a GPU
    variant this machine lacks is skipped with its reason."""
    for backend in ("ncnn", "mnn"):
        _server(backend)
    for name in ("tiny_cnn.ncnn.param", "tiny_cnn.ncnn.bin", "tiny_cnn.mnn"):
        shutil.copy(FIXTURES / name, models / name)
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["onnxruntime-cpu", "ncnn", "mnn", "mnn-vulkan"])
        def test_cnn(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn", backends=["ncnn", "mnn", "mnn-vulkan"], max_fallback=0.0)
        def test_budget(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("-rs", "--edge-update-golden", "--edge-report=report.json")
    records = json.loads((pytester.path / "report.json").read_text())["records"]
    verdicts = {(r["test"].split("[")[0].split("::")[-1], r["backend"]): r["verdict"] for r in records}
    assert verdicts[("test_cnn", "ncnn")] == verdicts[("test_cnn", "mnn")] == "passed", result.stdout.str()
    assert verdicts[("test_budget", "ncnn")] == verdicts[("test_budget", "mnn")] == "passed"
    if get_backend("mnn-vulkan").unavailable_reason():
        result.stdout.fnmatch_lines(["*SKIPPED*MNN has no VULKAN forward type here*"])
    else:  # where it runs, MNN does not say which operators the GPU took
        assert verdicts[("test_budget", "mnn-vulkan")] == "failed"
        result.stdout.fnmatch_lines(["*mnn-vulkan: delegate coverage cannot be read*"])


def test_a_runtime_not_installed_skips_only_its_backends(pytester: pytest.Pytester, models: Path) -> None:
    for backend in ("openvino", "mnn"):
        _server(backend)
    for name in ("tiny_mlp.ncnn.param", "tiny_mlp.ncnn.bin", "tiny_mlp.mnn"):
        shutil.copy(FIXTURES / name, models / name)
    # As if ncnn were uninstalled: importlib finds no spec for a module set to None in sys.modules.
    pytester.makeconftest("import sys\nsys.modules['ncnn'] = None\n")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp")
        def test_mlp(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("-rs", "--edge-update-golden",
                                           "--edge-backends=onnxruntime-cpu,openvino,ncnn,mnn")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*ncnn not installed*"])


def test_inspect_shows_the_more_runtimes_and_an_openvino_target(tmp_path: Path) -> None:
    for backend in ("openvino", "ncnn", "mnn"):
        _server(backend)
    for name in ("tiny_cnn.onnx", "tiny_cnn.ncnn.param", "tiny_cnn.ncnn.bin", "tiny_cnn.mnn"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    done = subprocess.run([sys.executable, "-m", "pytest_edge.cli", "inspect", "tiny_cnn", "--target", "gpu",
                           "--model-dir", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:] if line.strip()}
    assert "31/31 delegated" in rows["openvino"]  # OpenVINO's own count of tiny_cnn.onnx's operations
    assert "6/6 delegated" in rows["ncnn"] and "10/10 delegated" in rows["mnn"]
    import openvino as ov

    if "GPU" not in ov.Core().available_devices:
        assert "openvino cannot predict it here" in rows["predicted"]


def test_weights_files_travel_to_a_device_and_date_the_golden(pytester: pytest.Pytester, models: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """ncnn's .bin and OpenVINO IR's .bin are part of the artifact: sent to a device beside it, and
    recorded in the golden's provenance, so new weights under the same .param make it stale."""
    for backend in ("ncnn", "openvino"):
        _server(backend)
    import openvino as ov

    for name in ("tiny_mlp.ncnn.param", "tiny_mlp.ncnn.bin"):
        shutil.copy(FIXTURES / name, models / name)
    ov.save_model(ov.Core().read_model(str(FIXTURES / "tiny_mlp.onnx")), str(models / "mlp_ir.xml"),
                  compress_to_fp16=False)
    shutil.copy(FIXTURES / "tiny_mlp.onnx", models / "mlp_ir.onnx")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["ncnn", "ncnn@here"])
        def test_mlp(edge_model):
            pass
        @pytest.mark.edge(model="mlp_ir", backends=["openvino", "openvino@here"])
        def test_ir(edge_model):
            pass
    """)
    device = f"here={sys.executable} -m pytest_edge.worker --stdio"
    monkeypatch.setenv("PYTEST_EDGE_CACHE", str(pytester.path / "device-cache"))
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-device", device).assert_outcomes(passed=4)
    meta = json.loads((pytester.path / "golden/tiny_mlp/meta.json").read_text())
    assert {"tiny_mlp.ncnn.param", "tiny_mlp.ncnn.bin"} <= set(meta["artifacts"])
    bundles = list((pytester.path / "device-cache/bundles").glob("*/*.bin"))
    assert sorted(p.name for p in bundles) == ["mlp_ir.bin", "tiny_mlp.ncnn.bin"]
    weights = models / "tiny_mlp.ncnn.bin"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    stale = pytester.runpytest_inprocess("-k", "test_mlp", "--edge-device", device)
    stale.assert_outcomes(failed=2)
    stale.stdout.fnmatch_lines(["*golden for 'tiny_mlp' is stale*tiny_mlp.ncnn.bin*"])


def test_pnnx_output_with_a_layer_ncnn_lacks_does_not_convert_and_says_what_ncnn_said(
        pytester: pytest.Pytester, models: Path) -> None:
    """cumprod_cnn as pnnx writes it (a 'torch.cumprod' layer it could not lower): ncnn's own message,
    on its stderr, is the outcome's reason; reported where ncnn is not targeted, a failure where it is."""
    _server("ncnn")
    for name in ("cumprod_cnn.ncnn.param", "cumprod_cnn.ncnn.bin"):
        shutil.copy(FIXTURES / name, models / name)
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="cumprod_cnn", shapes={"in0": (1, 3, 16, 16)})
        def test_cumprod(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("-rs", "--edge-report=r.json")
    assert result.ret == 0, result.stdout.str()
    record = next(r for r in json.loads((pytester.path / "r.json").read_text())["records"] if r["backend"] == "ncnn")
    assert record["verdict"] == "does not convert"
    assert "ncnn has no layer torch.cumprod" in record["skip_reason"]
    assert "ncnn said: layer torch.cumprod not exists or registered" in record["skip_reason"]
    targeted = pytester.runpytest_inprocess("--edge-backends=ncnn")
    targeted.assert_outcomes(failed=1)
    targeted.stdout.fnmatch_lines(["*layer torch.cumprod not exists or registered*"])


MOBILENET = ("mobilenet_v2.onnx", "mobilenet_v2.ncnn.param", "mobilenet_v2.ncnn.bin", "mobilenet_v2.pnnx.param",
             "mobilenet_v2.mnn")


def _records(pytester: pytest.Pytester, report: str = "r.json") -> dict[tuple[str, str], dict]:
    records = json.loads((pytester.path / report).read_text())["records"]
    return {(r["test"].split("[")[0].split("::")[-1], r["backend"]): r for r in records}


def test_a_network_converted_by_pnnx_and_mnnconvert_passes_with_shapes_given_once_by_the_onnx_name(
        pytester: pytest.Pytester, models: Path) -> None:
    """transformers' MobileNetV2 exported by torch.onnx (dynamic batch, height, width; input 'x'),
    then pnnx and mnnconvert, unedited (fixtures/make_models.py): ``shapes=`` names the ONNX input
    once; ncnn's is pnnx's ``in0``, matched by position, and the record and a failure say so."""
    for backend in ("ncnn", "mnn"):
        _server(backend)
    for name in MOBILENET:
        shutil.copy(FIXTURES / name, models / name)
    pytester.makepyfile("""
        import pytest
        BACKENDS = ["onnxruntime-cpu", "ncnn", "mnn"]

        @pytest.mark.edge(model="mobilenet_v2", backends=BACKENDS, shapes={"x": (1, 3, 64, 64)})
        def test_net(edge_model):
            pass

        @pytest.mark.edge(model="mobilenet_v2", backends=["ncnn"])
        def test_shape_from_the_golden(edge_model):
            pass

        @pytest.mark.edge(model="mobilenet_v2", backends=["ncnn"], shapes={"x": (1, 3, 64, 64)}, atol=1e-9, rtol=0)
        def test_tight(edge_model):
            pass

        @pytest.mark.edge(model="mobilenet_v2", backends=["ncnn"], shapes={"image": (1, 3, 64, 64)})
        def test_typo(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=r.json", "-k", "test_net")
    result.assert_outcomes(passed=3)
    result = pytester.runpytest_inprocess("--edge-report=r.json")
    records = _records(pytester)
    for backend in ("onnxruntime-cpu", "ncnn", "mnn"):
        assert records[("test_net", backend)]["verdict"] == "passed", result.stdout.str()
    ncnn = records[("test_net", "ncnn")]
    assert ncnn["input"] == {"in0": {"shape": [1, 3, 64, 64], "dtype": "float32", "shape_from": "marker shapes="}}
    assert ncnn["accuracy"]["renamed"] == {"inputs": {"x": "in0"}, "outputs": {"logits": "out0"}}
    assert ncnn["accuracy"]["max_abs_err"] < 1e-4 and records[("test_net", "mnn")]["accuracy"]["max_abs_err"] < 1e-4
    assert "renamed" not in records[("test_net", "mnn")]["accuracy"]  # MNN keeps the ONNX names
    # No shapes=: the .ncnn.param has none, the golden's input has one.
    golden_shaped = records[("test_shape_from_the_golden", "ncnn")]
    assert golden_shaped["verdict"] == "passed" and golden_shaped["input"]["in0"]["shape_from"] == "the golden"
    assert records[("test_tight", "ncnn")]["verdict"] == "failed"
    result.stdout.fnmatch_lines(["*ncnn: tensors matched by position, the golden's names -> this artifact's: "
                                 "x -> in0, logits -> out0*"])
    assert records[("test_typo", "ncnn")]["verdict"] == "error"
    assert ("shapes= names 'image', which the model does not have; its inputs are ['in0'] "
            "(the golden's: ['x'], matched by position)") in result.stdout.str()


def test_a_cnn_pnnx_cannot_fully_convert_does_not_convert_on_ncnn_with_its_reason_and_passes_on_mnn(
        pytester: pytest.Pytester, models: Path) -> None:
    """cumsum_cnn as users convert it (torch.onnx, pnnx, mnnconvert; unedited): pnnx leaves a
    pnnx.Expression and an ONNX CumSum layer; ncnn's own refusal is the outcome's reason; MNN passes."""
    for backend in ("ncnn", "mnn"):
        _server(backend)
    for name in ("cumsum_cnn.ncnn.param", "cumsum_cnn.ncnn.bin", "cumsum_cnn.pnnx.param", "cumsum_cnn.mnn"):
        shutil.copy(FIXTURES / name, models / name)
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="cumsum_cnn", backends=["onnxruntime-cpu", "ncnn", "mnn"], shapes={"x": (1, 3, 16, 16)})
        def test_cnn(edge_model):
            pass
    """)
    # The marker names ncnn: it is targeted, so what it cannot run fails, with ncnn's own words.
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=r.json", "-rs")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["ncnn: ncnn has no layer pnnx.Expression in *cumsum_cnn.ncnn.param (the converter's "
                                 "output keeps operators ncnn cannot run; ncnn said: layer pnnx.Expression not exists "
                                 "or registered)"])
    records = _records(pytester)
    assert records[("test_cnn", "onnxruntime-cpu")]["verdict"] == records[("test_cnn", "mnn")]["verdict"] == "passed"
    assert records[("test_cnn", "mnn")]["accuracy"]["max_abs_err"] < 1e-4
    # Where the marker does not name it, the same is reported, not failed.
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="cumsum_cnn", shapes={"x": (1, 3, 16, 16)})
        def test_cnn(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "-rs")
    assert result.ret == 0, result.stdout.str()
    ncnn = _records(pytester)[("test_cnn", "ncnn")]
    assert ncnn["verdict"] == "does not convert"
    assert "ncnn said: layer pnnx.Expression not exists or registered" in ncnn["skip_reason"]


def test_pnnx_output_alone_takes_its_shapes_from_the_pnnx_param_beside_it(pytester: pytest.Pytester, models: Path) -> None:
    """Only pnnx's files, no .onnx: ncnn records the golden itself, with the input shape pnnx wrote in
    its own .pnnx.param (from ``inputshape=``); without that file the error says where shapes come from."""
    _server("ncnn")
    for name in MOBILENET[1:4]:
        shutil.copy(FIXTURES / name, models / name)
    (models / "mobilenet_v2.onnx").unlink()  # the project's fixtures folder has it; this user has not
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="mobilenet_v2")
        def test_net(edge_model):
            assert edge_model.inputs[0].shape == (1, 3, 64, 64)
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-report=r.json")
    assert result.ret == 0 and result.parseoutcomes()["passed"] == 1, result.stdout.str()  # the others: no artifact
    record = _records(pytester)[("test_net", "ncnn")]
    assert record["input"]["in0"]["shape_from"] == "mobilenet_v2.pnnx.param"
    assert record["accuracy"]["reference"] == "ncnn"
    (models / "mobilenet_v2.pnnx.param").unlink()
    shutil.rmtree(pytester.path / "golden")
    result = pytester.runpytest_inprocess("--edge-update-golden")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*does not give the shape of input 'in0'*mobilenet_v2.pnnx.param beside it; "
                                 "give shapes= in the marker*"])


def test_input_shapes_map_the_golden_names_by_position_where_the_artifact_names_differ() -> None:
    shapes = InputShapes(requested={"x": (1, 3, 8, 8)}, golden=(("x", (1, 3, 4, 4)), ("mask", (1, 4))),
                         beside=((1, 3, 2, 2), (1, 2)), beside_source="m.pnnx.param")
    assert shapes.for_inputs(["x", "mask"]) == {"x": (1, 3, 8, 8)}  # same names: as given
    assert shapes.for_inputs(["mask", "x"]) == {"x": (1, 3, 8, 8)}  # same set, another order: by name
    assert shapes.for_inputs(["in0", "in1"]) == {"in0": (1, 3, 8, 8)}  # by position
    resolved, sources = shapes.resolve(["in0", "in1"], [None, None])
    assert resolved == [(1, 3, 8, 8), (1, 4)] and sources == {"in0": "marker shapes=", "in1": "the golden"}
    resolved, sources = shapes.resolve(["in0", "in1"], [None, (1, 7)])
    assert resolved == [(1, 3, 8, 8), (1, 7)] and sources["in1"] == "the artifact"
    alone = InputShapes(beside=((1, 3, 2, 2),), beside_source="m.pnnx.param")
    assert alone.resolve(["in0"], [None]) == ([(1, 3, 2, 2)], {"in0": "m.pnnx.param"})
    # A count that differs matches nothing by position (the signature check says what differs).
    assert InputShapes(golden=(("x", (1,)),), beside=((1,), (2,))).resolve(["a"], [None]) == ([(1,)], {"a": "the golden"})
    assert InputShapes(requested={"x": (2,)}, golden=(("x", (1,)), ("y", (1,)))).for_inputs(["a"]) == {"x": (2,)}
    assert codec.from_json(InputShapes, codec.to_json(shapes), "x") == shapes


def test_a_borrowed_artifact_that_does_not_convert_is_reported_and_fails_only_where_targeted(
        pytester: pytest.Pytester, models: Path) -> None:
    """OpenVINO cannot convert the stateful counter_state.tflite: installing it does not turn a green
    suite red (its own outcome, counted), but a lane that targets OpenVINO fails naming the reason."""
    _server("openvino")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="counter_state")
        def test_counter(edge_model):
            pass
    """)
    # tflite-micro, where installed, runs the stateful model too (its own kernels and variables).
    micro = int(get_backend("tflite-micro").unavailable_reason() is None)
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=2 + micro, skipped=6 - micro)
    result = pytester.runpytest_inprocess("-rs", "--edge-report=r.json", "--edge-summary=r.md")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["counter_s*openvino*does not convert [[]1[]]*",
                                 "*1 do(es) not convert here (counter_state on openvino)*"])
    record = next(r for r in json.loads((pytester.path / "r.json").read_text())["records"]
                  if r["backend"] == "openvino")
    assert record["verdict"] == "does not convert" and "Unexpected type: RESOURCE" in record["skip_reason"]
    assert "1 does not convert" in (pytester.path / "r.md").read_text().splitlines()[0]
    for targeting in (["--edge-backends=openvino,litert"], ["--edge-require=openvino"]):
        targeted = pytester.runpytest_inprocess(*targeting)
        targeted.assert_outcomes(**({"passed": 1} if "--edge-backends" in targeting[0] else
                                    {"passed": 2 + micro, "skipped": 5 - micro}),
                                 failed=1)
        targeted.stdout.fnmatch_lines(["*openvino: does not convert here: OpenVINO's TensorFlow Lite frontend*"])
