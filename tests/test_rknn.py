"""Rockchip RKNPU targets (docs/npu.md, "Rockchip RKNPU"): rknn-toolkit2 builds the project's .onnx
fixtures for rk3588 and runs them in its simulator, in the environment pytest-edge makes for it
(devices/backend_env.py; cached under ~/.cache/pytest-edge/envs, or $PYTEST_EDGE_ENVS, so CI makes
it once). Where it cannot be made (no route to PyPI) these tests skip with the installer's message.
A backend's own environment that cannot be made skips its tests (or fails them under
--edge-require) with pip's own message: checked with a requirement pip cannot install, offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES

from pytest_edge.backends import compile_targets, get_backend, tensor_backends
from pytest_edge.core.plan import expand_patterns
from pytest_edge.devices import backend_env

pytestmark = pytest.mark.skipif(get_backend("rknn-rk3588").unavailable_reason() is not None,
                                reason=str(get_backend("rknn-rk3588").unavailable_reason()))


@pytest.fixture(scope="module")
def made_env() -> backend_env.Environment:
    """The toolkit's environment, made by the product (minutes the first time on a machine)."""
    try:
        return backend_env.make(Path(get_backend("rknn-rk3588").environment), progress=print, label="rknn-rk3588")
    except backend_env.EnvironmentUnmade as exc:
        pytest.skip(f"the rknn-toolkit2 environment cannot be made here: {exc}")


@pytest.fixture
def rknn_env(made_env: backend_env.Environment, pytester: pytest.Pytester,
             monkeypatch: pytest.MonkeyPatch) -> backend_env.Environment:
    """The environment, found by the pytester runs (whose HOME is their own folder) where it was made."""
    monkeypatch.setenv(backend_env.ENVS_VARIABLE, str(made_env.folder.parent))
    return made_env


def _record(pytester: pytest.Pytester, backend: str, report: str = "r.json") -> dict:
    return next(r for r in json.loads((pytester.path / report).read_text())["records"] if r["backend"] == backend)


def _golden(pytester: pytest.Pytester, model: str) -> None:
    """Record ``model``'s golden with the reference backend (ONNX Runtime), as a project does."""
    pytester.makepyfile(golden_of=f"""
        import pytest
        @pytest.mark.edge(model="{model}", backends=["onnxruntime-cpu"])
        def test_golden(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("golden_of.py", "--edge-update-golden").assert_outcomes(passed=1)


def test_the_targets_are_named_never_defaults() -> None:
    """rknn-* run tensors but are no test's unless named (like the Ethos-U targets); the toolkit's other
    platforms are known by name."""
    assert {"rknn-rk3588", "rknn-rk3588-int8", "rknn-rk3576", "rknn-rk3566", "rknn-rk3568", "rknn-rk3562"} <= set(compile_targets())
    assert not [name for name in tensor_backends() if name.startswith("rknn")]
    assert get_backend("rknn-rv1106-int8").quantized and get_backend("rknn-rv1106").platform == "rv1106"
    # A pattern selects them on this machine; a device's pattern (every runtime on pi5) does not: the
    # toolkit's environment is made here.
    registry = {**tensor_backends(), **compile_targets()}
    assert "rknn-rk3588-int8" in expand_patterns(["rknn-rk3588*"], registry, {})
    on_device = expand_patterns(["*@pi5"], registry, {"pi5": "ssh pi5 python3 -m pytest_edge.worker --stdio"})
    assert on_device and not [name for name in on_device if name.startswith("rknn")]


@pytest.mark.slow
def test_tiny_cnn_float16_on_the_simulator_is_within_the_marker_tolerance(
        pytester: pytest.Pytester, models: Path, rknn_env: backend_env.Environment) -> None:
    """float16 on rk3588's simulator against ONNX Runtime's golden: within atol 5e-3 (measured: max |diff|
    1.3e-3); the record keeps the toolkit's version, the build options and the .rknn's size. The same
    outputs fail the default 1e-4, naming the output."""
    _golden(pytester, "tiny_cnn")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["rknn-rk3588"], atol=5e-3, rtol=0)
        def test_npu(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn", backends=["rknn-rk3588"])
        def test_npu_default_tolerance(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("test_tiny_cnn_float16_on_the_simulator_is_within_the_marker_tolerance.py",
                                           "--edge-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_npu_default_tolerance*rknn-rk3588*"])
    assert "'y'" in result.stdout.str() or "y:" in result.stdout.str()
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    passed = next(r for r in records if "test_npu[" in r["test"])
    runtime = passed["runtime"]
    assert (runtime["name"], runtime["version"]) == ("rknn-toolkit2", "2.5.0")
    assert runtime["target_platform"] == "rk3588" and runtime["build"] == {"do_quantization": False, "float_dtype": "float16"}
    assert runtime["rknn_bytes"] > 10_000 and "simulator" in runtime["executed"]
    # The toolkit's intermediate graphs (check0_base_optimize.onnx, ...) stay out of the project.
    assert not list(pytester.path.rglob("check*_*.onnx"))
    print("float16 max |diff|:", passed["accuracy"])


@pytest.mark.slow
def test_tiny_cnn_int8_calibrated_on_the_golden_inputs(pytester: pytest.Pytester, models: Path,
                                                       rknn_env: backend_env.Environment) -> None:
    """int8, calibrated on the golden's inputs: judged by cosine and SNR (measured: cosine 0.99998, max
    |diff| 0.03), where float16's atol fails."""
    _golden(pytester, "tiny_cnn")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["rknn-rk3588-int8"], min_cosine=0.999, min_snr_db=30)
        def test_int8(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn", backends=["rknn-rk3588-int8"], atol=5e-3, rtol=0)
        def test_int8_float_tolerance(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("test_tiny_cnn_int8_calibrated_on_the_golden_inputs.py", "--edge-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    passed = next(r for r in records if "test_int8[" in r["test"])
    assert passed["verdict"] == "passed" and passed["runtime"]["build"]["do_quantization"] is True
    calibration = passed["runtime"]["build"]["calibration"]  # every golden case (one here), at load
    assert calibration["samples"] == 1 and calibration["source"].startswith("the golden's 1 case(s)")
    assert passed["runtime"]["built"] == "at load" and passed["runtime"]["rknn_bytes"] > 10_000
    print("int8 accuracy:", passed["accuracy"])


@pytest.mark.slow
def test_a_perturbed_model_fails_naming_the_output(pytester: pytest.Pytester, models: Path,
                                                   rknn_env: backend_env.Environment) -> None:
    """tiny_cnn with one weight tensor scaled by 1.5, judged on rk3588 against tiny_cnn's golden: fails
    naming its output."""
    import onnx
    from onnx import numpy_helper

    _golden(pytester, "tiny_cnn")
    model = onnx.load(str(FIXTURES / "tiny_cnn.onnx"))
    weight = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    onnx.save(model, str(models / "tiny_cnn_perturbed.onnx"))
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn_perturbed", reference="tiny_cnn", backends=["rknn-rk3588"], atol=5e-3, rtol=0)
        def test_npu(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("test_a_perturbed_model_fails_naming_the_output.py", "--edge-report=r.json")
    result.assert_outcomes(failed=1)
    record = _record(pytester, "rknn-rk3588")
    assert record["verdict"] == "failed"
    assert "'y'" in result.stdout.str() or "y:" in result.stdout.str() or "output y" in result.stdout.str()


@pytest.mark.slow
def test_a_model_the_toolkit_cannot_build_does_not_convert_with_its_reason(
        pytester: pytest.Pytester, models: Path, rknn_env: backend_env.Environment) -> None:
    """int8_u8s8_matmul (QLinearMatMul): the toolkit's build fails in its own shape inference. Targeted,
    the test fails with the toolkit's reason; selected by a pattern, it is reported as does not convert."""
    _golden(pytester, "int8_u8s8_matmul")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="int8_u8s8_matmul")
        def test_npu(edge_model):
            pass
    """)
    name = "test_a_model_the_toolkit_cannot_build_does_not_convert_with_its_reason.py"
    targeted = pytester.runpytest_inprocess(name, "--edge-backends=rknn-rk3588")
    targeted.assert_outcomes(failed=1)
    targeted.stdout.fnmatch_lines(["*rknn-rk3588: does not convert here: rknn-toolkit2 cannot build*int8_u8s8_matmul.onnx"
                                   " for rk3588: *InferenceError*"])
    selected = pytester.runpytest_inprocess(name, "--edge-backends=rknn-rk3588*", "--edge-report=r.json")
    assert selected.ret == 0
    record = _record(pytester, "rknn-rk3588")
    assert record["verdict"] == "does not convert" and "rknn-toolkit2 cannot build" in record["skip_reason"]
    # int8 is built at its first run: the toolkit's own reason, read from its log.
    quantized = _record(pytester, "rknn-rk3588-int8")
    assert quantized["verdict"] == "does not convert"
    assert "build: If a quantized model has been import, please set do_quantization = False." in quantized["skip_reason"]


OWN_ENV_BACKEND = """\
from pathlib import Path
from pytest_edge.backends.onnxruntime.backend import OrtBackend

class OwnEnvBackend(OrtBackend):
    environment = Path(__file__).resolve().parent / "ownenv"

    def __init__(self):
        super().__init__('CPUExecutionProvider')
        self.name = 'onnxruntime-ownenv'

def backends():
    return [OwnEnvBackend()]
"""


def test_an_environment_that_cannot_be_made_skips_with_the_installer_s_message(
        pytester: pytest.Pytester, models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend whose environment names a wheel pip cannot find: its test is skipped with pip's own
    message (no network needed), and fails under --edge-require; nothing half-made is left."""
    plugins = pytester.path / "plugins"
    (plugins / "edge_ownenv-0.1.dist-info").mkdir(parents=True)
    (plugins / "edge_ownenv-0.1.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: edge-ownenv\nVersion: 0.1\n")
    (plugins / "edge_ownenv-0.1.dist-info/entry_points.txt").write_text("[pytest_edge.backends]\nownenv = edge_ownenv:backends\n")
    (plugins / "edge_ownenv.py").write_text(OWN_ENV_BACKEND)
    (plugins / "ownenv").mkdir()
    missing = pytester.path / "wheels" / "nowhere-1.0-py3-none-any.whl"
    (plugins / "ownenv" / "requirements.txt").write_text(f"{missing}\n")
    envs = pytester.path / "envs"
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    monkeypatch.setenv(backend_env.ENVS_VARIABLE, str(envs))
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-ownenv"])
        def test_own(edge_model):
            pass
    """)
    # In a fresh process: the backend is registered by an entry point of this test's folder, and the
    # registry of backends is read once per process.
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*onnxruntime-ownenv: its environment cannot be made*pip exit status*",
                                 "*nowhere-1.0-py3-none-any.whl*"])
    assert "making the environment of onnxruntime-ownenv" in result.stdout.str() + result.stderr.str()  # progress
    assert not [p for p in envs.iterdir() if not p.name.endswith(".lock")]  # the temporary folder is gone
    required = pytester.runpytest_subprocess("--edge-require=onnxruntime-ownenv")
    required.assert_outcomes(failed=1)
    required.stdout.fnmatch_lines(["*its environment cannot be made*"])


def test_the_environment_key_follows_the_requirements(tmp_path: Path) -> None:
    """The folder an environment lives in is keyed by its requirement files: edited requirements make
    a new environment, the same ones find the old."""
    (tmp_path / "requirements.txt").write_text("numpy==1.26.4\n")
    first = backend_env.EnvSpec.of(tmp_path).key
    assert backend_env.EnvSpec.of(tmp_path).key == first
    (tmp_path / "requirements-no-deps.txt").write_text("something==1\n")
    assert backend_env.EnvSpec.of(tmp_path).key != first
    assert backend_env.state(tmp_path, tmp_path / "envs")[0] == "absent"
    shutil.rmtree(tmp_path)
    with pytest.raises(FileNotFoundError, match="requirements.txt"):
        backend_env.EnvSpec.of(tmp_path)


@pytest.mark.slow
def test_the_toolkit_s_worker_is_bounded_in_memory(pytester: pytest.Pytester, models: Path,
                                                  rknn_env: backend_env.Environment,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Below what the toolkit needs (it maps about 1.1 GB for tiny_cnn), the load fails naming the
    limit and how to raise it: an error of the test, not a "does not convert" and not the machine's
    memory taken."""
    _golden(pytester, "tiny_cnn")
    monkeypatch.setenv("PYTEST_EDGE_TOOL_MEMORY", "500MB")  # every tool's bound (backends/toolprocess.py)
    pytester.makepyfile("""
        import pytest
        @pytest.mark.edge(model="tiny_cnn", backends=["rknn-rk3588"], atol=5e-3, rtol=0)
        def test_npu(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("test_the_toolkit_s_worker_is_bounded_in_memory.py", "--edge-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rknn-rk3588: rknn-toolkit2 ran out of the worker's memory with *tiny_cnn.onnx "
                                 "(its limit: 500 MiB; PYTEST_EDGE_TOOL_MEMORY sets it*"])
    assert _record(pytester, "rknn-rk3588")["verdict"] != "does not convert"
