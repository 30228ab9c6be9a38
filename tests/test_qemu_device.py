"""The emulated aarch64 device (``qemu:aarch64``): the runtimes' real aarch64 wheels under QEMU's
user-mode emulator, provisioned from Debian's and PyPI's packages.

The device is provisioned once per test session into a stable folder (PYTEST_EDGE_TEST_DEVICE_CACHE,
else the user's ~/.cache/pytest-edge/devices), so reruns on the same machine reuse it; where it
cannot be had (no mmdebstrap, no network, another OS or CPU) these tests skip with the reason. The
skip path itself and a misspelt kind need no emulator and always run."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_edge.devices import qemu as qemu_device
from pytest_edge.devices import qemu_build
from pytest_edge.core.record import NOT_JUDGED, NOT_MEASURED

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="session")
def device_cache() -> Path:
    """The provisioned device's cache folder (provisioned here on first use, timed)."""
    problem = qemu_device.host_problem()
    if problem:
        pytest.skip(problem)
    recipe = qemu_device.recipe_for("aarch64")
    if not (recipe.has("onnxruntime") and recipe.has("ai-edge-litert")):
        # The device mirrors the host's runtimes: one environment with both (not the tflite-runtime
        # lane) runs these tests, and provisions one device, not one per environment.
        pytest.skip("the qemu:aarch64 tests run where onnxruntime and ai-edge-litert are both installed")
    root = Path(os.environ.get("PYTEST_EDGE_TEST_DEVICE_CACHE") or qemu_device.default_cache())
    if qemu_device.state(root, recipe) != "ready" and qemu_device.tool_problem():
        pytest.skip(qemu_device.tool_problem())
    started = time.monotonic()
    try:
        qemu_device.provision(root, "aarch64", lambda line: print(f"pytest-edge: {line}", file=sys.stderr))
    except qemu_device.ProvisionError as exc:
        pytest.skip(f"the qemu:aarch64 device cannot be provisioned here: {exc}")
    print(f"qemu:aarch64 device ready in {time.monotonic() - started:.1f} s ({root})", file=sys.stderr)
    return root


def _project(pytester: pytest.Pytester, cache: Path, device_in_ini: bool = True) -> None:
    # One measuring process with few runs: every instruction is emulated.
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n"
                     f"edge_warmup = 1\nedge_runs = 5\nedge_device_cache = {cache}\n"
                     + ("edge_devices =\n    arm64 = qemu:aarch64\n" if device_in_ini else ""))


def _device_folder(cache: Path) -> Path:
    return cache / qemu_device.recipe_for("aarch64").key


@pytest.mark.slow
def test_arm64_checks_host_goldens_records_aarch64_and_judges_no_timing(
        pytester: pytest.Pytester, models: Path, device_cache: Path) -> None:
    _project(pytester, device_cache)
    pytester.makepyfile("""
        import numpy as np, pytest

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert", "onnxruntime-cpu@arm64",
                                                      "litert@arm64"])
        def test_mlp(edge_model):
            assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu@arm64"], max_load_ms=0.001)
        def test_budget(edge_model):
            pass
    """)
    manifest = _device_folder(device_cache) / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    result = pytester.runpytest_subprocess("--edge-update-golden", "--edge-report=r.json")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*onnxruntime-cpu@arm64 were not measured (emulated device: timing and "
                                 "memory are not the target's*"])
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    on_device = [r for r in records if r["backend"].endswith("@arm64")]
    assert {r["backend"] for r in on_device} == {"onnxruntime-cpu@arm64", "litert@arm64"}
    for record in on_device:
        machine = record["device"]["machine"]
        assert machine["arch"] == "aarch64" and machine["emulated"].startswith("qemu-user ")
        assert machine["os"].endswith(tuple(f"aarch64-with-glibc2.{n}" for n in range(30, 45)))
        assert record["accuracy"]["reference"] == "onnxruntime-cpu"  # the host's golden, checked on ARM
        # By default an emulator's figures are not taken at all: not measured, not judged, said so.
        assert record["timing_not_judged"] == NOT_MEASURED.reason and record["load_ms"] is None
        assert record["latency_ms"] is None and record["peak_memory_mb"] is None
    assert all("timing_not_judged" not in r for r in records if not r["backend"].endswith("@arm64"))
    meta = json.loads((pytester.path / "golden/tiny_mlp/meta.json").read_text())
    assert meta["reference"]["isa"] == platform.machine()

    # A second session provisions nothing; edge_emulated_timing = record measures without judging,
    # = judge judges the load-time budget too (and it is missed).
    recorded = pytester.runpytest_subprocess("-o", "edge_emulated_timing=record", "-k", "budget", "--edge-report=r2.json")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*onnxruntime-cpu@arm64 were recorded, not judged*"])
    (measured,) = json.loads((pytester.path / "r2.json").read_text())["records"]
    assert measured["timing_not_judged"] == NOT_JUDGED.reason and measured["load_ms"] > 0
    judged = pytester.runpytest_subprocess("-o", "edge_emulated_timing=judge", "-k", "budget")
    judged.assert_outcomes(failed=1)
    judged.stdout.fnmatch_lines(["*onnxruntime-cpu@arm64*load*"])
    assert "provisioning" not in judged.stdout.str() + judged.stderr.str()
    assert manifest.stat().st_mtime_ns == stamp


def _host_saturates() -> bool:
    """Whether this host's ONNX Runtime kernel for u8 x s8 saturates on int8_u8s8_matmul (x86 AVX2
    without VNNI), against onnx.reference's exact integer arithmetic, on the golden's inputs."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    from pytest_edge.accuracy.inputs import DEFAULT_SEED, generate_case
    from pytest_edge.backends import TensorSpec

    path = str(FIXTURES / "int8_u8s8_matmul.onnx")
    x = generate_case([TensorSpec("x", (1, 64), "float32")], {}, DEFAULT_SEED)["x"]
    host = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return not np.array_equal(host, ReferenceEvaluator(path).run(None, {"x": x})[0])


@pytest.mark.slow
def test_cross_isa_mismatch_fails_on_the_arm_side_naming_the_isa(
        pytester: pytest.Pytester, models: Path, device_cache: Path) -> None:
    if platform.machine() != "x86_64":
        pytest.skip(f"the goldens must be recorded on x86-64 to differ from aarch64 (this is {platform.machine()})")
    _project(pytester, device_cache, device_in_ini=False)  # the device from the command line this time
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="cast_overflow", backends=["onnxruntime-cpu", "onnxruntime-cpu@arm64"])
        def test_cast(edge_model):
            pass

        @pytest.mark.edge(model="int8_u8s8_matmul", backends=["onnxruntime-cpu", "onnxruntime-cpu@arm64"])
        def test_int8(edge_model):
            pass
    """)
    result = pytester.runpytest_subprocess("--edge-update-golden", "--edge-device", "arm64=qemu:aarch64")
    saturates = _host_saturates()
    # cast_overflow differs on every x86 host; the int8 model only where x86's kernel saturates
    # (AVX2 without VNNI; AVX512-VNNI and AVX-VNNI are exact, like ARM).
    result.assert_outcomes(passed=4 - 1 - saturates, failed=1 + saturates)
    result.stdout.fnmatch_lines([
        "*FAILED*test_cast*cast_overflow-onnxruntime-cpu@arm64*",
    ])
    result.stdout.fnmatch_lines([
        "*cross-ISA: onnxruntime-cpu@arm64 ran the same artifact the golden was recorded from (cast_overflow.onnx*"
        "on aarch64 (emulated: qemu-user *the golden was recorded by onnxruntime-cpu on x86_64: the ISA differs "
        "(x86_64 vs aarch64)*worst element: output 'y' at index*2147483647 on aarch64, -2147483648 in the golden "
        "(x86_64); first node whose output differs between the two machines: tensor 'y', the output of Cast*",
    ])
    failed = {line.split("::")[-1].split(" ")[0] for line in result.stdout.lines if line.startswith("FAILED")}
    assert ("test_int8[int8_u8s8_matmul-onnxruntime-cpu@arm64]" in failed) == saturates, failed
    assert not any("@arm64" not in name for name in failed)  # only ever the emulated side


def _prepare(cache: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest_edge.cli", "device", "prepare", "--kind", "qemu:aarch64",
                             "--cache", str(cache)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.mark.slow
def test_killed_provisioning_is_rebuilt_once_by_concurrent_sessions_and_damage_repaired(
        tmp_path: Path, device_cache: Path) -> None:
    """A fresh cache folder of its own: a provisioning killed half-way, then two at once (one builds,
    one waits), then a file deleted from the result (its part is rebuilt) and a byte flipped in
    another part (found by the repair's full check, rebuilt too)."""
    from pytest_edge.devices.folder import damage

    cache = tmp_path / "devices"
    killed = _prepare(cache)
    assert killed.stdout is not None
    for line in killed.stdout:
        if "unpacking Python" in line:  # qemu is in the temporary folder; the root filesystem is not
            os.killpg(killed.pid, signal.SIGKILL)
            break
    killed.wait(timeout=60)
    folder = _device_folder(cache)
    assert list(cache.glob(".tmp-*")) and not folder.exists()

    first, second = _prepare(cache), _prepare(cache)
    outputs = [p.communicate(timeout=900)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    assert sum("provisioning a qemu:aarch64 device" in o for o in outputs) == 1, outputs
    assert sum("waiting for another session" in o for o in outputs) == 1, outputs
    assert not list(cache.glob(".tmp-*")) and qemu_device.state(cache, qemu_device.recipe_for("aarch64")) == "ready"
    # With the bytecode of the device's Python: a worker compiles nothing under the emulator.
    python = qemu_device.recipe_for("aarch64").python
    tag = f"cpython-{python.replace('.', '')}"
    assert (folder / "rootfs" / "usr" / "lib" / f"python{python}" / "__pycache__" / f"os.{tag}.pyc").is_file()
    assert (folder / "site" / "numpy" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert list(cache.glob(f"plugins/*/pytest_edge/worker/__pycache__/server.{tag}.pyc"))

    # One repair checks both rules (one rebuild of a part, not two: each downloads it again): the
    # part the cheap check finds damaged (site: a file missing) is rebuilt and an intact one
    # (rootfs) is kept; a file of a part that would be kept, changed on disk (qemu: same size, a
    # flipped byte), is never blessed into the new manifest: the repair checks what it keeps and
    # rebuilds that part from its source.
    numpy_init = folder / "site" / "numpy" / "__init__.py"
    numpy_init.unlink()
    emulator = folder / "qemu" / "qemu-aarch64"
    original = emulator.read_bytes()
    emulator.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    state = qemu_device.state(cache, qemu_device.recipe_for("aarch64"))
    assert state.startswith("damaged:") and "numpy/__init__.py is missing" in state
    assert damage(folder, qemu_device.COMPONENTS)[1] == {"site"}  # sizes alone: the flipped byte is not seen
    repair = _prepare(cache)
    output = repair.communicate(timeout=900)[0]
    assert repair.returncode == 0, output
    assert "rebuilding its qemu, site" in output, output
    assert "unpacking Python" not in output, output  # the root filesystem was kept
    assert numpy_init.is_file() and emulator.read_bytes() == original
    assert qemu_device.state(cache, qemu_device.recipe_for("aarch64")) == "ready"


def test_without_qemu_the_device_backends_skip_unless_required(
        pytester: pytest.Pytester, models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No device folder and no mmdebstrap to make one: a skip with the reason, a failure when required."""
    monkeypatch.setenv("PATH", str(pytester.path / "empty-bin"))
    _project(pytester, pytester.path / "no-devices")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "onnxruntime-cpu@arm64"])
        def test_mlp(edge_model):
            pass
    """)
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    reason = qemu_device.host_problem() or "*no qemu:aarch64 device in*provisioning needs mmdebstrap on PATH*"
    result.stdout.fnmatch_lines([f"SKIPPED*{reason}*"])
    required = pytester.runpytest_subprocess("--edge-require=onnxruntime-cpu@arm64")
    required.assert_outcomes(passed=1, failed=1)
    # The command line says the same: the device is absent, and preparing it names what is missing.
    listing = pytester.run(sys.executable, "-m", "pytest_edge.cli", "device", "list")
    assert listing.ret == 0
    listing.stdout.fnmatch_lines(["device*kind*state*runtimes*where*",
                                  f"arm64*qemu:aarch64*{qemu_device.host_problem() or 'absent'}*"])
    if qemu_device.host_problem() is None:
        listing.stdout.fnmatch_lines([f"*onnxruntime {qemu_device.recipe_for('aarch64').wheels[0][1]}*"])
    prepare = pytester.run(sys.executable, "-m", "pytest_edge.cli", "device", "prepare")
    assert prepare.ret == 1
    missing = qemu_device.host_problem() or "provisioning needs mmdebstrap on PATH"
    prepare.stderr.fnmatch_lines([f"arm64: cannot be provisioned: {missing}*"])
    assert not (pytester.path / "no-devices").exists() or not any((pytester.path / "no-devices").iterdir())


def test_unknown_device_kind_is_a_usage_error(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_devices =\n    rv = qemu:riscv64\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'qemu:riscv64' is not a device kind; known: qemu:aarch64*"])


def test_report_compare_judges_only_coverage_of_an_emulated_record() -> None:
    """`pytest-edge report compare` on a record whose timing was not judged (an emulated device):
    a 10x latency and 5x memory are not regressions there, a delegate coverage drop still is."""
    from pytest_edge.judging.figures import GateFigures
    from pytest_edge.judging.regressions import check_baseline

    old = {"backend": "litert@arm64", "latency_ms": {"p50": 1.0}, "peak_memory_mb": 100.0, "coverage": {"fallback": 0.0}}
    new = {**old, "latency_ms": {"p50": 10.0}, "peak_memory_mb": 500.0, "coverage": {"fallback": 0.5}}
    assert len(check_baseline(GateFigures.from_json(new), GateFigures.from_json(old), 0.1)) == 3
    only = check_baseline(GateFigures.from_json({**new, "timing_not_judged": NOT_JUDGED.reason}),
                          GateFigures.from_json(old), 0.1)
    assert only == ["litert@arm64: delegate coverage dropped: fallback 50.0% against the baseline 0.0%"]


@pytest.mark.parametrize("content", [
    '{"files": {"lib.so": 5}}',                                   # an entry that is not [size, sha256]
    '{"files": {"lib.so": ["12", "' + "a" * 64 + '"]}}',          # a size that is a string
    '{"files": {"../../etc/passwd": [1, "' + "a" * 64 + '"]}}',   # a path out of the folder
    '{"files": {"lib.so": [1, "not a digest"]}}',
    '[' * 100000 + ']' * 100000,                                  # nesting deep enough to exhaust the parser
    '{"files": []}', "not json", ""])
def test_a_hostile_manifest_is_unreadable_and_rebuilt_never_an_exception(tmp_path: Path, content: str) -> None:
    from pytest_edge.devices.folder import damage, read_manifest, size_mb

    (tmp_path / "manifest.json").write_text(content)
    assert read_manifest(tmp_path) is None and size_mb(tmp_path) == 0
    problem, broken = damage(tmp_path, ["rootfs", "site"])
    assert "missing or unreadable" in problem and broken == {"rootfs", "site"}


def test_a_file_replaced_by_a_same_size_link_or_other_bytes_is_damage(tmp_path: Path) -> None:
    """What a repair keeps must be what the manifest says: a link put where a file was (of the same
    size, pointing out of the cache) is damage by sizes alone; other bytes of the same size by the
    full check (``device prepare --verify``, and every repair before it keeps a part)."""
    from pytest_edge.devices.folder import damage, write_manifest

    (tmp_path / "site").mkdir()
    (tmp_path / "rootfs").mkdir()
    lib = tmp_path / "site" / "lib.so"
    lib.write_bytes(b"\x7fELF" + bytes(60))
    (tmp_path / "rootfs" / "python").write_bytes(b"#!" + bytes(30))
    write_manifest(tmp_path, {})
    assert damage(tmp_path, ["rootfs", "site"], full=True) == (None, set())
    outside = tmp_path.parent / "outside.so"
    outside.write_bytes(bytes(64))
    lib.unlink()
    lib.symlink_to(outside)
    problem, broken = damage(tmp_path, ["rootfs", "site"])
    assert "lib.so is not a regular file (a link, or another kind)" in problem and broken == {"site"}
    lib.unlink()
    lib.write_bytes(b"\x7fELF" + bytes(59) + b"\x01")  # a flipped byte, same size
    assert damage(tmp_path, ["rootfs", "site"]) == (None, set())  # sizes alone cannot tell
    problem, broken = damage(tmp_path, ["rootfs", "site"], full=True)
    assert "lib.so does not have the sha256 of the manifest" in problem and broken == {"site"}


def test_a_provisioning_command_dies_with_the_session() -> None:
    """pip and mmdebstrap run with PR_SET_PDEATHSIG (kept over exec): orphaned by a SIGKILLed
    session they would recreate the temporary folder the next session removed."""
    if platform.system() != "Linux":
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    said = qemu_build._run([sys.executable, "-c", "import ctypes, os; v = ctypes.c_int(); "
                             "ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value, os.getppid())"], "probe")
    signal_number, parent = map(int, said.split())
    assert signal_number == signal.SIGKILL and parent == os.getpid()
    with pytest.raises(qemu_device.ProvisionError, match=r"probe failed \(exit status 3\): \S+python\S* -c "):
        qemu_build._run([sys.executable, "-c", "raise SystemExit(3)"], "probe")
    with pytest.raises(qemu_device.ProvisionError, match=r"no-such-tool-here: No such file or directory"):
        qemu_build._run(["no-such-tool-here", "--version"], "probe")


@pytest.mark.slow
def test_edge_llm_on_the_emulated_arm_device(pytester: pytest.Pytester, device_cache: Path) -> None:
    """A decoder exported by Optimum (Qwen2) on onnxruntime-cpu@arm64: the device's worker runs the
    aarch64 onnxruntime and gives PyTorch's greedy tokens against the host's golden; its timing is
    an emulator's, so a TTFT budget is not measured there (said in the record), and the ARM test passes."""
    shutil.copytree(FIXTURES / "llm" / "optimum_qwen2", pytester.path / "models" / "qwen")
    greedy = json.loads((FIXTURES / "llm" / "optimum_qwen2" / "pytorch_greedy.json").read_text())
    _project(pytester, device_cache)
    pytester.makepyfile(f"""
        import pytest
        @pytest.mark.edge_llm(model="qwen", prompts={greedy["prompts"][:1]}, new_tokens=8, ttft_ms=0.001,
                              backends=["onnxruntime-cpu", "onnxruntime-cpu@arm64"])
        def test_qwen(edge_llm):
            pass
    """)
    pytester.runpytest_subprocess("--edge-update-golden", "--edge-backends=onnxruntime-cpu").assert_outcomes(failed=1)
    result = pytester.runpytest_subprocess("--edge-backends=onnxruntime-cpu@arm64", "--edge-report=r.json")
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    assert record["device"]["machine"]["arch"] == "aarch64" and record["device"]["machine"]["emulated"]
    assert record["llm"]["prompts"][0]["tokens"] == greedy["tokens"][0]
    assert record["llm"]["timing_not_judged"] == NOT_MEASURED.reason and record["load_ms"] is None


@pytest.mark.slow
def test_a_litert_decoder_on_the_emulated_arm_device_and_llama_cpp_said_absent(pytester: pytest.Pytester,
                                                                               device_cache: Path) -> None:
    """litert-torch's prefill/decode export on litert@arm64: the aarch64 ai-edge-litert gives
    PyTorch's greedy tokens against the host's golden. The device is not provisioned with
    llama-cpp-python (PyPI has its sdist only; a source build under the emulator is not attempted):
    llama.cpp@arm64 is skipped with that reason, not run on the host."""
    llm = FIXTURES / "llm"
    shutil.copytree(llm / "litert_llama", pytester.path / "models" / "llama")
    shutil.copy(llm / "gguf_llama" / "model.gguf", pytester.path / "models" / "llama" / "model.gguf")
    greedy = json.loads((llm / "litert_llama" / "pytorch_greedy.json").read_text())
    _project(pytester, device_cache)
    pytester.makepyfile(f"""
        import pytest
        @pytest.mark.edge_llm(model="llama", prompts={greedy["prompts"][:1]}, new_tokens=8,
                              backends=["litert", "litert@arm64", "llama.cpp@arm64"])
        def test_llama(edge_llm):
            pass
    """)
    pytester.runpytest_subprocess("--edge-update-golden", "--edge-backends=litert").assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("-rs", "--edge-backends=litert@arm64,llama.cpp@arm64",
                                           "--edge-report=r.json")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*qemu:aarch64 device installs only onnxruntime and ai-edge-litert, "
                                 "not llama-cpp-python*"])
    (record,) = [r for r in json.loads((pytester.path / "r.json").read_text())["records"] if r["verdict"] == "passed"]
    assert record["backend"] == "litert@arm64" and record["device"]["machine"]["arch"] == "aarch64"
    assert record["llm"]["prompts"][0]["tokens"] == greedy["tokens"][0]
