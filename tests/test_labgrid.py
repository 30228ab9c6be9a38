"""Board farms through labgrid, with the real engine on loopback: a labgrid coordinator and an
exporter started here, two NetworkService resources pointing at two real sshd instances (two
"boards"), two places tagged ``board=rpi4``. pytest sessions reserve, acquire and release places
with labgrid's own client, and reach the boards with the SSH device path."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopback import Farm, device_python, free_port, start_farm, start_sshd
from pytest_edge.devices.labgrid import FarmRequest, FarmSettings
from pytest_edge.devices.labgrid_client import PlaceState

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

# A test that holds its board until the test says so (a file appears), so that sessions overlap.
HOLDING_TEST = """
import os, time
import numpy as np, pytest

@pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu@rpi"])
def test_on_a_board(edge_model):
    assert edge_model(np.ones((1, 16), np.float32)).shape == (1, 4)
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["EDGE_TEST_HOLD_UNTIL"]) and time.monotonic() < deadline:
        time.sleep(0.1)
"""


# ------------------------------------------------------------------ the pure parts


def test_a_farm_device_names_a_place_or_tags() -> None:
    assert FarmRequest.parse("labgrid:rpi4-01") == FarmRequest(place="rpi4-01")
    request = FarmRequest.parse(" labgrid:board=rpi4, ram=8g ")
    assert request.tags == (("board", "rpi4"), ("ram", "8g")) and request.filters() == ["board=rpi4", "ram=8g"]
    assert FarmRequest.parse("labgrid:rpi4-01").filters() == ["name=rpi4-01"]
    assert FarmRequest.parse("labgrid:") == FarmRequest()
    for bad in ("labgrid:Board=rpi4", "labgrid:board=RPI", "labgrid:a b", "labgrid:board=rpi4,=x"):
        with pytest.raises(ValueError, match="labgrid"):
            FarmRequest.parse(bad)


def test_the_worker_command_takes_only_the_network_service_placeholders() -> None:
    with pytest.raises(ValueError, match=r"unknown placeholder.*'host'"):
        FarmSettings(command="ssh {host} python3 -m pytest_edge.worker --stdio")
    with pytest.raises(ValueError, match="edge_labgrid_wait"):
        FarmSettings(wait_s=float("nan"))
    # A positional or indexed field passes the placeholder names and broke only once a place was
    # acquired (IndexError): refused at configuration, naming the key.
    for bad in ("ssh {} {address}", "ssh {address!z}", "ssh {address:{}}"):
        with pytest.raises(ValueError, match=r"edge_labgrid_command: .* cannot be filled in"):
            FarmSettings(command=bad)
    assert FarmSettings(command="ssh -p {port} {username}@{address} echo {{}}").command


def test_bad_farm_configuration_is_a_usage_error_naming_the_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nedge_devices =\n    rpi = labgrid:Board=rpi4\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*labgrid:Board=rpi4*'Board=rpi4' is not a labgrid tag*"])
    pytester.makeini("[pytest]\nedge_labgrid_wait = soon\nedge_devices =\n    rpi = labgrid:board=rpi4\n")
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*edge_labgrid_wait = 'soon': expected a number of seconds*"])


def test_without_labgrid_a_farm_device_says_which_extra_to_install(pytester: pytest.Pytester, models: Path) -> None:
    # labgrid made unimportable in the session (what a machine without the extra has): the
    # device's tests skip naming the extra, the local ones run.
    pytester.makeconftest("import sys\nsys.modules['labgrid'] = None\n")
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_devices =\n    rpi = labgrid:board=rpi4\n")
    pytester.makepyfile(HOLDING_TEST.replace('backends=["onnxruntime-cpu@rpi"]',
                                             'backends=["onnxruntime-cpu", "onnxruntime-cpu@rpi"]'))
    (pytester.path / "go").write_text("")
    os.environ["EDGE_TEST_HOLD_UNTIL"] = str(pytester.path / "go")
    try:
        result = pytester.runpytest_subprocess("--edge-update-golden", "-rs")
    finally:
        del os.environ["EDGE_TEST_HOLD_UNTIL"]
    result.assert_outcomes(passed=1, skipped=1)
    # (fnmatch reads [...] as a character class: ? stands for the brackets)
    result.stdout.fnmatch_lines(["*device rpi (labgrid:board=rpi4): labgrid is not installed*"
                                 "pip install 'pytest-edge?labgrid?'*"])


# ------------------------------------------------------------------ a farm on loopback


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Farm:
    folder = tmp_path_factory.mktemp("farm")
    first = start_sshd(folder / "sshd-a")
    # Both boards take the same key (a farm's CI key): one command for every place.
    boards = {"rpi-a": first}
    try:  # the sshd instances stop also where the farm cannot start (skipped: no labgrid in the tflite lane)
        boards["rpi-b"] = start_sshd(folder / "sshd-b", client_key=first.key)
        started = start_farm(folder / "labgrid", {name: (sshd.port, {"board": "rpi4", "site": name.removeprefix("rpi-")})
                                                  for name, sshd in boards.items()}, first.user, ssh_key=first.key)
        yield started
        started.stop()
    finally:
        for sshd in boards.values():
            sshd.stop()


def _farm_project(path: Path, farm: Farm, wait_s: float = 120, device: str = "labgrid:board=rpi4") -> None:
    worker = (f"env PYTEST_EDGE_CACHE={shlex.quote(str(path / 'board-cache'))} {shlex.quote(device_python())} "
              "-m pytest_edge.worker --stdio")
    command = (f"ssh -p {{port}} -i {farm.ssh_key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
               f"-o BatchMode=yes -o LogLevel=ERROR {{username}}@{{address}} {worker}")
    (path / "pytest.ini").write_text(
        f"[pytest]\nedge_model_dirs = models\nedge_labgrid_coordinator = {farm.address}\n"
        f"edge_labgrid_wait = {wait_s}\nedge_labgrid_command = {command}\n"
        f"edge_devices =\n    rpi = {device}\n")
    (path / "test_board.py").write_text(HOLDING_TEST)


def _session(path: Path, *args: str, hold_until: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "EDGE_TEST_HOLD_UNTIL": str(hold_until or path / "go")}
    if hold_until is None:
        (path / "go").write_text("")
    # SIGINT as a terminal sends it: a suite started in the background by a shell without job control
    # inherits SIGINT ignored, and the session held its board to the test's own deadline, passing.
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args], cwd=path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _project(tmp_path: Path, name: str, models: Path, farm: Farm, **kwargs) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "models").symlink_to(models)
    _farm_project(path, farm, **kwargs)
    return path


def _wait_until(condition, seconds: float, what: str, log: Path | None = None) -> None:
    """Until ``condition()``. With ``log`` (a coordinator's), the condition is read again when the
    coordinator says something there (an acquisition, a release, an exporter's resources), else
    every few seconds: a condition that runs labgrid-client is a fresh Python importing grpc (0.4 s
    of CPU), and polled every 0.2 s it took most of a core from the sessions it waited for."""
    deadline = time.monotonic() + seconds
    while True:
        said = _said(log)
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        again = min(deadline, time.monotonic() + (3.0 if log else 0.2))
        while time.monotonic() < again and _said(log) == said:
            time.sleep(0.1)


def _said(log: Path | None) -> int:
    """How much the coordinator said in ``log``, less the connections of labgrid-client calls (the
    waits' own among them)."""
    if log is None or not log.exists():
        return 0
    return sum(1 for line in log.read_text(errors="replace").splitlines() if "client connected" not in line)


def _records(path: Path) -> list[dict]:
    return json.loads((path / "r.json").read_text())["records"]


def test_sessions_share_two_boards_and_a_third_waits_then_skips(farm: Farm, models: Path, tmp_path: Path) -> None:
    """Also a session's own course, read from the first one (a session of its own cost one more
    pytest, worker and seven labgrid-client calls): it reserves a place by tags, runs and measures
    there, its record names the place, and it releases the place at its end."""
    hold = tmp_path / "release-boards"
    first, second = (_project(tmp_path, name, models, farm) for name in ("first", "second"))
    sessions = [_session(path, "--edge-update-golden", "--edge-report=r.json", *measure, hold_until=hold)
                for path, measure in ((first, ["--edge-measure"]), (second, []))]
    try:
        _wait_until(lambda: all(farm.acquired().values()), 120, "both places acquired by the two sessions",
                    farm.folder / "coordinator.log")
        # All boards busy: a third session waits edge_labgrid_wait seconds, then skips with the reason.
        third = _project(tmp_path, "third", models, farm, wait_s=3)
        started = time.monotonic()
        waited = _session(third, "--edge-update-golden")
        out, _ = waited.communicate(timeout=120)
        assert waited.returncode == 0 and "1 skipped" in out, out
        # clock bound: a wait's lower bound (edge_labgrid_wait = 3 s): no machine's speed or load shortens it.
        assert time.monotonic() - started >= 3
        assert "no free place tagged board=rpi4 at " in out and "within 3 s (edge_labgrid_wait)" in out, out
        assert "rpi-a acquired by" in out and "rpi-b acquired by" in out, out
        # --edge-require: the same wait fails the test instead.
        required = _session(third, "--edge-update-golden", "--edge-require=onnxruntime-cpu@rpi")
        out, _ = required.communicate(timeout=120)
        assert required.returncode == 1 and "1 failed" in out, out
    finally:
        hold.write_text("")
    outputs = [session.communicate(timeout=300)[0] for session in sessions]
    assert [session.returncode for session in sessions] == [0, 0], outputs
    places = {_records(path)[0]["device"]["machine"]["farm"]["place"] for path in (first, second)}
    assert places == {"rpi-a", "rpi-b"}  # one board per session
    assert farm.acquired() == {"rpi-a": None, "rpi-b": None}  # released at the end
    (record,) = _records(first)
    assert record["backend"] == "onnxruntime-cpu@rpi" and record["latency_ms"]["p50"] > 0
    block = record["device"]["machine"]["farm"]
    assert block["engine"] == "labgrid" and block["coordinator"] == farm.address
    assert block["place"] in ("rpi-a", "rpi-b") and block["exporter"] == "lab"
    assert block["tags"] == {"board": "rpi4", "site": block["place"].removeprefix("rpi-")}
    assert "labgrid: waiting up to 120 s for a place tagged board=rpi4" in outputs[0]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_killed_session_frees_its_board(farm: Farm, models: Path, tmp_path: Path, how: signal.Signals) -> None:
    """SIGKILL and SIGTERM end pytest with no cleanup of its own (the guard releases the place);
    SIGINT is pytest's KeyboardInterrupt (the session's own end releases it)."""
    project = _project(tmp_path, "killed", models, farm)
    session = _session(project, "--edge-update-golden", hold_until=tmp_path / "never")
    try:
        _wait_until(lambda: any(farm.acquired().values()), 120, "the session acquired a place",
                    farm.folder / "coordinator.log")
        session.send_signal(how)
        # A bound on a hang, not a figure: pytest's own end (SIGINT) releases through labgrid-client,
        # a fresh Python that took over a minute to start on a CI run pinned to one core.
        session.wait(timeout=300)
        assert session.returncode != 0, session.stdout.read()  # ended by the signal, not by the test's deadline
        _wait_until(lambda: not any(farm.acquired().values()), 30, "the killed session's place released",
                    farm.folder / "coordinator.log")
    finally:
        session.kill()


def test_xdist_workers_take_one_board_each(farm: Farm, models: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, "xdist", models, farm)
    (project / "test_board.py").write_text(HOLDING_TEST + HOLDING_TEST.replace("test_on_a_board", "test_on_a_board_too"))
    session = _session(project, "-n", "2", "--edge-update-golden", "--edge-report=r.json")
    out, _ = session.communicate(timeout=300)
    assert session.returncode == 0, out
    places = {record["device"]["machine"]["farm"]["place"] for record in _records(project)}
    assert places == {"rpi-a", "rpi-b"}, out  # each xdist worker reserved a board of its own
    assert farm.acquired() == {"rpi-a": None, "rpi-b": None}


def test_an_existing_reservation_is_used_and_left_to_its_owner(farm: Farm, models: Path, tmp_path: Path) -> None:
    # As a CI job that reserved a board itself: `labgrid-client reserve --wait --shell name=rpi-b`.
    token = farm.client("reserve", "--wait", "--shell", "name=rpi-b").strip().removeprefix("export LG_TOKEN=")
    project = _project(tmp_path, "token", models, farm, device="labgrid:")
    env = {**os.environ, "LG_TOKEN": token, "EDGE_TEST_HOLD_UNTIL": str(project / "go")}
    (project / "go").write_text("")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--edge-update-golden",
                           "--edge-report=r.json"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _records(project)[0]["device"]["machine"]["farm"]["place"] == "rpi-b"
    assert f"Reservation '{token}'" in farm.client("reservations")  # the job's, not cancelled by the session
    farm.client("cancel-reservation", token)
    assert farm.acquired() == {"rpi-a": None, "rpi-b": None}


def test_place_listing_is_read_from_labgrid_client_show(farm: Farm) -> None:
    state = PlaceState.parse(farm.client("-p", "rpi-a", "show"))
    assert state.name == "rpi-a" and state.tags == {"board": "rpi4", "site": "a"} and state.acquired is None
    ((exporter, params),) = state.services  # labgrid's own output: the place's matching resource
    assert exporter == "lab" and params["address"] == "127.0.0.1" and isinstance(params["port"], int)


def test_a_place_by_name_and_one_the_job_acquired_itself(farm: Farm, models: Path, tmp_path: Path) -> None:
    project = _project(tmp_path, "by-name", models, farm, device="labgrid:rpi-a")
    out, _ = (session := _session(project, "--edge-update-golden", "--edge-report=r.json")).communicate(timeout=300)
    assert session.returncode == 0, out
    assert _records(project)[0]["device"]["machine"]["farm"]["place"] == "rpi-a"
    # A job that acquired rpi-b before pytest (LG_PLACE, the device `labgrid:`): used, left acquired.
    farm.client("-p", "rpi-b", "acquire")
    try:
        project = _project(tmp_path, "acquired", models, farm, device="labgrid:")
        env = {**os.environ, "LG_PLACE": "rpi-b", "EDGE_TEST_HOLD_UNTIL": str(project / "go")}
        (project / "go").write_text("")
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--edge-update-golden",
                               "--edge-report=r.json"], cwd=project, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _records(project)[0]["device"]["machine"]["farm"]["place"] == "rpi-b"
        assert farm.acquired()["rpi-b"] is not None and farm.acquired()["rpi-a"] is None
    finally:
        farm.client("-p", "rpi-b", "release")


def test_the_board_farm_page_sets_up_a_farm_as_written(tmp_path: Path) -> None:
    """docs/board-farms.md: its exporter configuration and the admin's commands, run as written
    against a coordinator of their own; its CI job names known options."""
    import yaml

    from pytest_edge.core.settings import OPTIONS
    from test_readme import BOARD_FARMS, blocks

    if importlib.util.find_spec("labgrid") is None:
        pytest.skip("labgrid is not installed (the labgrid extra; scripts/bootstrap.sh installs it)")
    page = blocks(BOARD_FARMS)
    exporter_yaml, workflow = (b.code for b in page if b.lang == "yaml")
    daemons, places = (b.code for b in page if b.lang == "bash")
    (tmp_path / "exporter.yaml").write_text(exporter_yaml)
    # As written, but on a free port instead of labgrid's 20408 (a coordinator of an earlier run
    # may still be going away there).
    port = str(free_port())
    daemons = daemons.replace("20408", port)
    env = {**os.environ, "LG_COORDINATOR": f"127.0.0.1:{port}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    log = open(tmp_path / "admin.log", "wb")
    admin = subprocess.Popen(["bash", "-euo", "pipefail", "-c", daemons + "\nwait"], cwd=tmp_path, env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        farm = Farm(address=f"127.0.0.1:{port}", folder=tmp_path, processes=[])
        # Generous: under a loaded CI (Valgrind-counted tests beside it) two grpc processes start slowly.
        try:
            _wait_until(lambda: "lab-3/rpi4-02/NetworkService" in farm.client("resources", check=False), 180,
                        "the page's exporter registered its resources", tmp_path / "admin.log")
        except AssertionError as exc:
            said = [line for line in (tmp_path / "admin.log").read_text().splitlines()
                    if "client connected" not in line]  # the polls' own connections say nothing
            raise AssertionError(f"{exc}; the daemons said: {chr(10).join(said)[-2000:]}") from None
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", places], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.split() == ["rpi4-01", "rpi4-02"]  # `labgrid-client places`
        state = PlaceState.parse(farm.client("-p", "rpi4-02", "show"))
        assert state.tags == {"board": "rpi4", "ram": "8g"}
        assert state.services == [("lab-3", {"address": "192.168.10.52", "port": 22, "username": "ci",
                                             "extra": state.services[0][1].get("extra")})]
    finally:
        os.killpg(admin.pid, signal.SIGTERM)
        admin.wait(timeout=30)
    flags = {option.flag for option in OPTIONS if option.flag}
    run = yaml.safe_load(workflow)["jobs"]["conformance"]["steps"][-1]["run"]
    used = {word.partition("=")[0] for word in shlex.split(run) if word.startswith("--edge")}
    assert used and used <= flags, used - flags
