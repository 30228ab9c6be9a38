"""Devices that misbehave end a test, never the session, and never hang it: a command that cannot
start, a login banner before the worker's frames, a peer claiming a huge frame, a peer that says
nothing. Each device here is a real process started by its command, as an ssh or adb one is."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

TEST = """
import pytest

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "litert@odd"])
def test_mlp(edge_model):
    pass
"""


def _device_project(pytester: pytest.Pytester, command: str, timeout: int = 600) -> None:
    pytester.makeini(f"[pytest]\nedge_model_dirs = models\nedge_timeout = {timeout}\nedge_devices =\n"
                     f"    odd = {command}\n")
    pytester.makepyfile(TEST)


def _peer(code: str) -> str:
    """A device command: Python code run as the 'worker' on the other end of stdin/stdout."""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def test_a_device_command_that_does_not_exist_skips_its_backends(pytester: pytest.Pytester, models: Path) -> None:
    _device_project(pytester, "adb-not-installed-here -s 1234 shell python3 -m pytest_edge.worker --stdio")
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*device odd cannot be reached: its command 'adb-not-installed-here -s 1234 *' "
                                 "cannot be started: *No such file or directory*"])
    assert "INTERNALERROR" not in result.stdout.str()
    pytester.runpytest_subprocess("--edge-require=litert@odd").assert_outcomes(passed=1, failed=1)


def test_a_login_banner_before_the_worker_is_named_not_waited_for(pytester: pytest.Pytester, models: Path) -> None:
    worker = f"{shlex.quote(sys.executable)} -m pytest_edge.worker --stdio"
    _device_project(pytester, f"sh -c {shlex.quote('echo Welcome to Ubuntu 24.04 LTS; exec ' + worker)}")
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs", timeout=120)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*device odd (*) while trying to start *: the peer sent 'Welcome to Ubuntu*' where "
                                 "a pytest-edge frame was expected*login banner or motd*"])


def test_a_peer_claiming_a_huge_frame_is_refused_before_reading_it(pytester: pytest.Pytester, models: Path) -> None:
    # 0x7fffff00 bytes announced (2 GiB), then the magic, then nothing: the host must neither wait
    # for them nor allocate them.
    _device_project(pytester, _peer("import os, struct, time; os.write(1, struct.pack('!i', 0x7fffff00) + b'PEDG'); "
                                    "time.sleep(60)"))
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs", timeout=120)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*the peer announced a frame of 2147483392 bytes (the limit is 1073741824); "
                                 "refused before reading it*"])


def test_a_silent_peer_is_bounded_by_edge_timeout_at_start(pytester: pytest.Pytester, models: Path) -> None:
    _device_project(pytester, _peer("import time; time.sleep(600)"), timeout=3)
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs", timeout=300)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*litert@odd did not answer within 3 s (edge_timeout) while trying to start*"])
    # clock bound: 3 s for the device plus one pytest session with a golden check, not the 600 s the
    # peer sleeps: the run took 7 s on a 2-core machine at load 6; 200 s leaves room for a machine 3x
    # slower and busy, and is a third of the peer's sleep.
    assert result.duration < 200


@pytest.mark.parametrize("crash", ["SIGILL", "SIGSEGV"])
def test_a_device_whose_worker_crashes_before_hello_fails_never_skips(pytester: pytest.Pytester, models: Path,
                                                                      crash: str) -> None:
    """A worker that dies of its own code at start (a flipped byte in an emulated device's cached
    library: SIGILL) reached the device: its tests fail with the reason, they are not skipped as
    unreachable ones are (a conformance run must not go green on a broken device)."""
    _device_project(pytester, _peer(f"import os, signal; os.kill(os.getpid(), signal.{crash})"))
    result = pytester.runpytest_subprocess("--edge-update-golden", "-rs", timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"*device odd: the worker crashed (signal {crash}) before it said hello*damaged or "
                                 "built for another CPU*device prepare --verify*"])


def test_a_device_that_never_said_hello_is_no_restart_of_the_next_tests_worker(pytester: pytest.Pytester,
                                                                                models: Path) -> None:
    """A device's worker, started at collection, that ended before its hello failed to start: the
    test on it skips with that, and no 'worker restarted' note reaches the next test (a local one,
    which --edge-strict-restarts would fail on it)."""
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_devices =\n    odd = sh -c 'exit 255'\n")
    pytester.makepyfile('''
import pytest

@pytest.mark.edge(model="tiny_mlp", backends=["litert@odd"])
def test_on_the_device(edge_model):
    pass

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
def test_here_after_it(edge_model):
    pass
''')
    result = pytester.runpytest_subprocess("--edge-update-golden", "--edge-strict-restarts", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*device odd cannot be reached: its command ended (exit status 255)*"])
    assert "restarted" not in result.stdout.str()
