"""Devices: backends whose worker runs on another machine, started by a command and speaking the
protocol over its stdin/stdout. Tested with a command device (a local process, exactly what an
`adb shell ...` or any wrapper would start) and with a real SSH server on loopback."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loopback import device_python, start_sshd
from pytest_edge.worker import frames, protocol

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

MLP_TEST = """
import numpy as np, pytest

@pytest.mark.edge(model="tiny_mlp", backends=[{backends}])
def test_mlp(edge_model):
    assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)
"""


def worker_command(cache: Path) -> str:
    return f"env PYTEST_EDGE_CACHE={shlex.quote(str(cache))} {shlex.quote(sys.executable)} -m pytest_edge.worker --stdio"


@pytest.mark.tflite_runtime_lane  # the device's codec and LiteRT on NumPy 1.x
def test_command_device_runs_checks_and_measures_there(pytester: pytest.Pytester, models: Path) -> None:
    cache = pytester.path / "device-cache"
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_processes = 2\nedge_min_time = 0\n"
                     f"edge_devices =\n    board = {worker_command(cache)}\n")
    pytester.makepyfile(MLP_TEST.format(backends='"onnxruntime-cpu", "litert@board", "onnxruntime-cpu@board"'))
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-measure", "--edge-report=r.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*tiny_mlp*litert@board*passed*", "*tiny_mlp*onnxrunt*@board*passed*"])
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    remote = records["litert@board"]
    assert remote["device"]["name"] == "board" and remote["device"]["machine"]["cores"] == os.cpu_count()
    assert len(remote["processes"]) == 2 and remote["latency_ms"]["p50"] > 0
    assert "device" not in records["onnxruntime-cpu"]
    # Artifacts travelled by content into the device's own cache (goldens stayed on the host).
    names = sorted(p.name for p in cache.iterdir())
    assert any(n.endswith(".tflite") for n in names) and all(len(n.split(".")[0]) == 64 for n in names)
    assert not list(cache.glob("*.npz"))
    # A second run ships nothing: the device's cache has the artifacts by content (an artifact is
    # shipped when it is loaded, measured or not: no measuring processes needed to see it).
    stamps = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    pytester.runpytest_inprocess().assert_outcomes(passed=3)
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == stamps


def test_unreachable_device_skips_its_backends_unless_required(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_devices =\n"
                     "    gone = ssh -o BatchMode=yes -o ConnectTimeout=2 -p 1 nobody@127.0.0.1 true\n")
    pytester.makepyfile(MLP_TEST.format(backends='"onnxruntime-cpu", "litert@gone"'))
    result = pytester.runpytest_inprocess("--edge-update-golden", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*device gone cannot be reached: its command ended (exit status 255)*"])
    required = pytester.runpytest_inprocess("--edge-require=litert@gone")
    required.assert_outcomes(passed=1, failed=1)


def test_a_pattern_selects_every_runtime_of_a_device(pytester: pytest.Pytester, models: Path) -> None:
    """``--edge-backends='litert*@board'``: each registered runtime matching it on that device, no
    list kept by hand; a pattern that matches nothing is an error naming it."""
    cache = pytester.path / "device-cache"
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_devices =\n    board = {worker_command(cache)}\n")
    pytester.makepyfile("""
        import numpy as np, pytest

        @pytest.mark.edge(model="tiny_mlp")
        def test_mlp(edge_model):
            assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)
    """)
    result = pytester.runpytest_inprocess("--edge-backends=litert*@board", "--co", "-q")
    result.stdout.fnmatch_lines(["*test_mlp[[]tiny_mlp-litert-ref@board[]]", "*test_mlp[[]tiny_mlp-litert@board[]]",
                                 "*2 tests collected*"])
    wrong = pytester.runpytest_inprocess("--edge-backends=*@nowhere")
    assert wrong.ret == pytest.ExitCode.TESTS_FAILED
    wrong.stdout.fnmatch_lines(["*backend pattern '*@nowhere' matches no backend (registered: *; devices: board)*"])


def test_unknown_device_is_a_usage_error(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(MLP_TEST.format(backends='"litert@nowhere"'))
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*litert@nowhere: no device 'nowhere' in edge_devices*"])


def test_device_that_drops_fails_that_test_and_reconnects(pytester: pytest.Pytester, models: Path) -> None:
    cache = pytester.path / "device-cache"
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_devices =\n    board = {worker_command(cache)}\n")
    pytester.makepyfile("""
        import os, signal, threading, pytest, numpy as np

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu@board"])
        def test_drops(edge_model, request):
            from pytest_edge.plugin import SESSION_KEY
            from pytest_edge.worker.protocol import Measure
            pool = request.config.stash[SESSION_KEY].pool
            info = edge_model.loaded
            worker = pool.workers["onnxruntime-cpu@board"]
            threading.Timer(1.0, lambda: worker._process.kill()).start()  # the connection dies mid-request
            pool.request(info.backend, Measure(info.key, [np.ones((1, 16), np.float32)], 10**7, 50), info.artifact)

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu@board"])
        def test_after(edge_model):
            assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)
    """)
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-processes=1")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*device board dropped the connection*while onnxruntime-cpu@board was trying to*"])


def _start_device(tmp_path: Path, cache: Path) -> subprocess.Popen:
    return subprocess.Popen(shlex.split(worker_command(cache)), stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _frame(process: subprocess.Popen, message: object) -> object:
    """One request to a device worker by hand, in multiprocessing.Connection's framing."""
    from multiprocessing.connection import Connection

    writer = Connection(os.dup(process.stdin.fileno()), readable=False)
    reader = Connection(os.dup(process.stdout.fileno()), writable=False)
    writer.send_bytes(frames.encode(message))
    return frames.decode(reader.recv_bytes())


def test_device_worker_opens_nothing_outside_its_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    device = _start_device(tmp_path, cache)
    try:
        hello = _frame(device, protocol.request_json(protocol.Start("onnxruntime-cpu")))
        assert hello["ok"] and hello["value"]["protocol"] == protocol.PROTOCOL_VERSION
        assert hello["value"]["machine"]["cores"] == os.cpu_count()
        for path in ("/etc/passwd", "../../etc/passwd", "0" * 64 + ".onnx/../../x"):
            reply = _frame(device, protocol.request_json(protocol.Load("k", path, 1)))
            assert not reply["ok"] and "is not an artifact name of this device's cache" in reply["message"]
        bad = protocol.Put("0" * 64 + ".onnx", __import__("numpy").frombuffer(b"not that", dtype="uint8"))
        reply = _frame(device, protocol.request_json(bad))
        assert not reply["ok"] and "arrived with sha256" in reply["message"]
        assert not any(cache.glob("*.onnx"))
    finally:
        device.kill()


def test_protocol_version_mismatch_names_both_versions(pytester: pytest.Pytester, models: Path) -> None:
    """A peer speaking another protocol version (an older pytest-edge on the device)."""
    peer = pytester.path / "old_peer.py"
    peer.write_text(
        "import os, struct, sys\n"
        "header = b'{\"ok\": true, \"value\": {\"protocol\": 0}}'\n"
        "frame = struct.pack('<4sHI', b'PEDG', 0, len(header)) + header\n"
        "sys.stdin.buffer.read(1)\n"
        "os.write(1, struct.pack('!i', len(frame)) + frame)\n")
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_devices =\n    old = {sys.executable} {peer}\n")
    pytester.makepyfile(MLP_TEST.format(backends='"litert@old"'))
    result = pytester.runpytest_inprocess("--edge-update-golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*protocol version 0 from the peer, this side speaks {protocol.PROTOCOL_VERSION}*"])


# ------------------------------------------------------------------ a real SSH device


@pytest.fixture(scope="module")
def ssh_device(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Debian's sshd on loopback with a key of its own; the device command logs in with ssh."""
    sshd = start_sshd(tmp_path_factory.mktemp("sshd"))
    cache = sshd.key.parent / "cache"
    yield f"{sshd.ssh()} env PYTEST_EDGE_CACHE={shlex.quote(str(cache))} {shlex.quote(device_python())} -m pytest_edge.worker --stdio"
    sshd.stop()


@pytest.mark.slow
@pytest.mark.tflite_runtime_lane  # NumPy 1.x here, the main .venv's NumPy 2 on the device
def test_ssh_device(pytester: pytest.Pytester, models: Path, ssh_device: str) -> None:
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_processes = 2\nedge_min_time = 0\n"
                     f"edge_devices =\n    pi = {ssh_device}\n")
    pytester.makepyfile(MLP_TEST.format(backends='"onnxruntime-cpu", "onnxruntime-cpu@pi", "litert@pi"'))
    result = pytester.runpytest_inprocess("--edge-update-golden", "--edge-measure", "--edge-report=r.json")
    result.assert_outcomes(passed=3)
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert records["litert@pi"]["device"]["name"] == "pi" and records["litert@pi"]["latency_ms"]["p50"] > 0
    if device_python() != sys.executable:  # the other lane's environment: another NumPy, another LiteRT
        here_numpy_1 = np.__version__.startswith("1.")
        assert records["litert@pi"]["runtime"]["name"] == ("ai-edge-litert" if here_numpy_1 else "tflite-runtime")
        assert records["litert@pi"]["device"]["machine"]["numpy"].startswith("2." if here_numpy_1 else "1.")
    # --edge-device on the command line, with xdist: tests of the device run beside the local ones.
    pytester.makepyfile(test_any_backend="""
        import pytest
        @pytest.mark.edge(model="tiny_mlp")
        def test_mlp(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("-n", "2", "--edge-device", f"pi2={ssh_device}", "--edge-measure",
                                           "--edge-backends=onnxruntime-cpu,litert@pi2", "test_any_backend.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*tiny_mlp*litert@pi2*passed*"])


@pytest.mark.slow
def test_edge_llm_over_the_ssh_device(pytester: pytest.Pytester, ssh_device: str) -> None:
    """A decoder exported by Optimum (Qwen2), checked on the SSH device: the artifact travels by
    content, the device's worker generates PyTorch's greedy tokens against the golden recorded
    here, and TTFT/TPOT are measured in fresh workers there (the record's device block names it)."""
    llm = Path(__file__).resolve().parent.parent / "fixtures" / "llm"
    shutil.copytree(llm / "optimum_qwen2", pytester.path / "models" / "qwen")
    greedy = json.loads((llm / "optimum_qwen2" / "pytorch_greedy.json").read_text())
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_processes = 2\n"
                     f"edge_devices =\n    pi = {ssh_device}\n")
    pytester.makepyfile(f"""
        import pytest
        @pytest.mark.edge_llm(model="qwen", prompts={greedy["prompts"][:1]}, new_tokens=8,
                              backends=["onnxruntime-cpu", "onnxruntime-cpu@pi"], runs=2, warmup=1)
        def test_qwen(edge_llm):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "--edge-backends=onnxruntime-cpu").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-measure", "--edge-report=r.json")
    result.assert_outcomes(passed=2)
    records = {r["backend"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    remote = records["onnxruntime-cpu@pi"]
    assert remote["device"]["name"] == "pi" and remote["device"]["machine"]["cores"] == os.cpu_count()
    assert remote["llm"]["prompts"][0]["tokens"] == greedy["tokens"][0]
    assert remote["accuracy"]["reference"] == "onnxruntime-cpu" and remote["accuracy"]["token_agreement"] == 1.0
    assert len(remote["llm"]["processes"]) == 2 and remote["llm"]["ttft_ms"]["p50"] > 0
    assert "device" not in records["onnxruntime-cpu"]
