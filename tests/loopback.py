"""Real servers on 127.0.0.1 for the device tests: Debian's sshd with a key of its own, and a
labgrid farm (a coordinator, an exporter with NetworkService resources, places with tags) set up
as a farm's admin does it, with labgrid's own programs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


# The tflite-runtime lane's environment (NumPy 1.x, tflite-runtime), built by `tox -e tflite-runtime`
# (scripts/test.sh runs that lane first), and the main one (NumPy 2, ai-edge-litert): each is the
# other's device, proving the codec across NumPy major versions both ways.
OTHER_ENV = Path(__file__).resolve().parent.parent / ".tox" / "tflite-runtime" / "bin" / "python"
MAIN_ENV = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
IN_OTHER_ENV = Path(sys.prefix).resolve() == OTHER_ENV.parent.parent.resolve()


def device_python() -> str:
    """The Python a loopback device runs: the other lane's where it exists, else this one."""
    other = MAIN_ENV if IN_OTHER_ENV else OTHER_ENV
    return str(other) if other.exists() else sys.executable


@dataclass
class Sshd:
    port: int
    key: Path  # the client's private key
    user: str
    server: subprocess.Popen

    def ssh(self) -> str:
        """``ssh ... user@127.0.0.1`` (a device command goes on after it)."""
        return (f"ssh -p {self.port} -i {self.key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                f"-o BatchMode=yes -o LogLevel=ERROR {self.user}@127.0.0.1")

    def stop(self) -> None:
        self.server.kill()
        self.server.wait()


def start_sshd(folder: Path, client_key: Path | None = None) -> Sshd:
    """Debian's sshd on a free loopback port, logging in with a key made here or ``client_key``
    (skips without sshd)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd) or shutil.which("ssh") is None:
        pytest.skip("openssh-server/openssh-client not installed (scripts/test.sh installs them as root)")
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("host", "client") if client_key is None else ("host",):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)], check=True)
    client_key = client_key or folder / "client"
    shutil.copy(client_key.with_suffix(".pub"), folder / "authorized_keys")
    port = free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
        f"PidFile {folder / 'sshd.pid'}\nSetEnv PYTHONUNBUFFERED=1\nMaxStartups 50\n")
    os.makedirs("/run/sshd", exist_ok=True)
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")], stderr=open(folder / "log", "wb"))
    if not _wait_for_port(port, server):
        server.kill()
        pytest.skip(f"sshd did not start: {(folder / 'log').read_text()[-500:]}")
    return Sshd(port=port, key=client_key, user=os.environ.get("USER") or "root", server=server)


LABGRID_CLIENT = [sys.executable, "-c", "from labgrid.remote.client import main; main()"]


@dataclass
class Farm:
    """A labgrid coordinator and one exporter on loopback; ``client(...)`` runs labgrid-client."""

    address: str
    folder: Path
    processes: list[subprocess.Popen]
    ssh_key: Path | None = None  # the key the boards' sshd take

    def client(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        done = subprocess.run([*LABGRID_CLIENT, "-x", self.address, *args], capture_output=True, text=True,
                              timeout=60, env=env)
        if check and done.returncode != 0:
            raise AssertionError(f"labgrid-client {' '.join(args)}: {done.stderr or done.stdout}")
        return done.stdout

    def acquired(self) -> dict[str, str | None]:
        """place -> who holds it (HOST/USER), or None. One ``labgrid-client -v places`` (each place's
        ``show``): tests poll this, and every call is a fresh Python importing grpc, which a poll of
        ``places`` then ``show`` per place tripled, starving the sessions it waits for."""
        holders: dict[str, str | None] = {}
        place = None
        for line in self.client("-v", "places").splitlines():
            if line.startswith("Place '") and line.endswith("':"):
                place = line[len("Place '"):-len("':")]
            elif place is not None and line.strip().startswith("acquired:"):
                holder = line.split(":", 1)[1].strip()
                holders[place] = None if holder == "None" else holder
        return holders

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def start_farm(folder: Path, boards: dict[str, tuple[int, dict[str, str]]], username: str,
               ssh_key: Path | None = None) -> Farm:
    """A coordinator, an exporter ``lab`` with a NetworkService per board (name -> (ssh port,
    tags)) and a place per board matching it, tagged."""
    if importlib.util.find_spec("labgrid") is None:
        pytest.skip("labgrid is not installed (the labgrid extra; scripts/bootstrap.sh installs it)")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    # The coordinator keeps its places in its working folder (places.yaml).
    coordinator = subprocess.Popen(
        [sys.executable, "-c", "from labgrid.remote.coordinator import main; main()", "-l", address],
        cwd=folder, stdout=open(folder / "coordinator.log", "wb"), stderr=subprocess.STDOUT)
    farm = Farm(address=address, folder=folder, processes=[coordinator], ssh_key=ssh_key)
    if not _wait_for_port(port, coordinator, 30):
        farm.stop()
        pytest.skip(f"labgrid-coordinator did not start: {(folder / 'coordinator.log').read_text()[-500:]}")
    (folder / "exporter.yaml").write_text("".join(
        f"{name}:\n  NetworkService:\n    address: 127.0.0.1\n    port: {ssh_port}\n    username: {username}\n"
        for name, (ssh_port, _) in boards.items()))
    exporter = subprocess.Popen(
        [sys.executable, "-c", "from labgrid.remote.exporter import main; main()", "-c", address, "-n", "lab",
         "--hostname", "127.0.0.1", str(folder / "exporter.yaml")],
        cwd=folder, stdout=open(folder / "exporter.log", "wb"), stderr=subprocess.STDOUT)
    farm.processes.append(exporter)
    deadline = time.monotonic() + 30
    while not all(f"lab/{name}/NetworkService" in farm.client("resources", check=False) for name in boards):
        if time.monotonic() > deadline or exporter.poll() is not None:
            farm.stop()
            pytest.skip(f"labgrid-exporter did not register: {(folder / 'exporter.log').read_text()[-500:]}")
        time.sleep(0.2)
    for name, (_, tags) in boards.items():
        farm.client("-p", name, "create")
        farm.client("-p", name, "add-match", f"lab/{name}/NetworkService")
        farm.client("-p", name, "set-tags", *(f"{key}={value}" for key, value in tags.items()))
    return farm
