"""The spare worker (pytest_edge/worker/spare.py): an interpreter started during collection, before
the session's imports, that the first local worker adopts; killed where none does. Real worker
processes of ONNX Runtime and LiteRT on the fixture models."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from edge_helpers import FIXTURES

from pytest_edge.worker.pool import WorkerPool
from pytest_edge.worker.protocol import Load, Run, Start, request_from, request_json
from pytest_edge.worker.spare import SpareWorker


def _pool() -> WorkerPool:
    return WorkerPool(True, 300.0, on_crash=lambda backend: None, fork="off")


def _ended(process: subprocess.Popen, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return True
        time.sleep(0.02)
    return False


def test_the_first_local_worker_is_the_spare_and_answers_as_a_started_one() -> None:
    pool = _pool()
    spare = pool.spare = SpareWorker()
    process, log = spare.process, spare.log_path
    try:
        pool.prestart(["onnxruntime-cpu", "litert"])
        assert pool.spare is None  # adopted or closed: never kept past the workers' start
        ort, litert = pool.workers["onnxruntime-cpu"], pool.workers["litert"]
        assert ort._process is process and ort.log_path == log  # the spare, with its own log
        assert litert._process is not process and litert._process.poll() is None  # started as always
        model = str(FIXTURES / "tiny_mlp.onnx")
        info = pool.request("onnxruntime-cpu", Load("m", model, 1, {}), Path(model))
        (spec,) = info["inputs"]  # the reply as the frame carries it
        (output,) = pool.request("onnxruntime-cpu", Run("m", [np.ones(spec["shape"], spec["dtype"])]), Path(model))
        assert np.all(np.isfinite(output)) and ort.hello is not None and ort.hello.backend == "onnxruntime-cpu"
        assert spare.adopt() is None  # once
    finally:
        pool.close()
    assert _ended(process) and not log.exists()  # closed as a worker is, its log with it


def test_a_spare_no_worker_adopts_is_killed_when_the_workers_have_started() -> None:
    pool = _pool()
    spare = pool.spare = SpareWorker()
    process, log = spare.process, spare.log_path
    try:
        pool.prestart([])  # every test on a device or a compile-time target: no local worker
        assert pool.spare is None and _ended(process) and not log.exists()
    finally:
        pool.close()


def test_a_worker_under_a_wrapper_or_of_its_own_environment_starts_its_own_process() -> None:
    pool = _pool()
    spare = SpareWorker()
    process = spare.process
    try:
        worker = pool.worker("litert")
        worker.extra_env = {"EDGE_SPARE_TEST": "1"}  # counted mode's variables: a spare was started without them
        worker.launch(spare)
        assert worker._process is not process and spare.process is process  # still the spare's, unused
    finally:
        spare.close()
        pool.close()
    assert _ended(process)


def test_a_spare_that_ended_is_not_adopted_and_the_worker_starts_as_always() -> None:
    pool = _pool()
    spare = SpareWorker()
    spare.process.kill()
    spare.process.wait()
    try:
        worker = pool.worker("onnxruntime-cpu")
        worker.launch(spare)
        assert worker._process is not None and worker._process.poll() is None
        worker.wait_ready()
    finally:
        spare.close()
        pool.close()


def test_a_spare_is_not_adopted_where_the_environment_changed_since_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test module collected after the spare started set a variable (or a path): the worker must
    see it, as one started now would, so it starts as always."""
    pool = _pool()
    spare = SpareWorker()
    process = spare.process
    try:
        monkeypatch.setenv("EDGE_SPARE_TEST_SET_LATER", "1")
        worker = pool.worker("onnxruntime-cpu")
        worker.launch(spare)
        assert worker._process is not process and spare.process is process
        worker.wait_ready()
    finally:
        spare.close()
        pool.close()
    assert _ended(process)


def test_a_spare_whose_backend_cannot_be_served_says_why_naming_it(tmp_path: Path) -> None:
    spare = SpareWorker()
    adopted = spare.adopt()
    assert adopted is not None
    process, fd, log = adopted
    from pytest_edge.worker import frames

    channel = frames.Channel(fd)
    try:
        channel.send_bytes(frames.encode(request_json(Start("no-such-backend"))))
        reply = frames.decode(channel.recv_bytes(frames.MAX_FRAME_BYTES))
        assert reply["ok"] is False and "no-such-backend" in reply["message"]
    finally:
        channel.close()
        assert _ended(process)
        log.unlink(missing_ok=True)


def test_start_names_its_source_only_where_it_has_one() -> None:
    # A device's Start is the frame it always was: a device worker of the last version reads it.
    assert request_json(Start("litert")) == {"op": "start", "args": {"backend": "litert"}}
    sourced = request_json(Start("litert", "pytest_edge.backends.litert.backend:backends"))
    assert sourced["args"]["source"] == "pytest_edge.backends.litert.backend:backends"
    assert request_from(json.loads(json.dumps(sourced))) == Start("litert", "pytest_edge.backends.litert.backend:backends")


ONE_CHECK = """
import pytest

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu"])
def test_mlp(edge_model):
    pass
"""


def _leaked_spare_logs(before: set[Path]) -> list[Path]:
    """Spare logs that appeared since ``before`` and whose session has ended (a live one's is its own)."""
    logs = set(Path(tempfile.gettempdir()).glob("pytest-edge-*-spare-*.log")) - before
    return [log for log in logs if not Path(f"/proc/{log.name.split('-')[2]}").exists()]


def test_a_session_leaves_no_spare_or_log_behind(pytester: pytest.Pytester, models: Path) -> None:
    pytester.makepyfile(ONE_CHECK)
    before = set(Path(tempfile.gettempdir()).glob("pytest-edge-*-spare-*.log"))
    pytester.runpytest_subprocess("--edge-update-golden").assert_outcomes(passed=1)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    collected = pytester.runpytest_subprocess("--collect-only", "-q")  # nothing runs: no spare started
    collected.stdout.fnmatch_lines(["*1 test collected*"])
    pytester.runpytest_subprocess("--edge-isolation=none").assert_outcomes(passed=1)  # the worker is pytest itself
    # A project that names its model folders starts the spare when the session starts; a run that
    # selects no edge test kills it when collection ends.
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest_subprocess("test_plain.py").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("-k", "nothing_matches").assert_outcomes(deselected=2)
    assert _leaked_spare_logs(before) == []
