from __future__ import annotations

import functools
import importlib
import importlib.util
import shutil
from pathlib import Path
from typing import Iterator

import pytest
from edge_helpers import FIXTURES, UNUSED_PLUGINS, install_backend

import measuring

# Every installed runtime is imported once, before the first pytester test: pytester restores sys.modules
# after each test, and a second import of a C extension in the same process breaks: onnx's aborts it
# (protobuf descriptors); openvino's and MNN's find their cached extension without its submodules
# ("'openvino._pyopenvino' is not a package", "'_mnncengine' is not a package") when an in-process
# pytester run imported them first. Every backend's runtime, not a list, so a new one is covered.
# In registry order: llama.cpp and whisper.cpp each ship a libggml.so.0 (0.25 and 0.13), and a process
# holds one library of a soname, the first loaded; libllama needs symbols 0.13 lacks, whisper.cpp runs
# on 0.25 (docs/speech.md). The product keeps them apart: each runs in its own backend's worker.
# ExecuTorch's whole package (its exporter with torch's operator registrations) too: imported first
# inside an in-process run, it would be imported again after pytester's restore, and torch refuses
# a second TORCH_LIBRARY of a namespace (_inductor_test).
# At the first pytester test, not when this file is imported: pytest imports it in xdist's controller,
# which runs no test, and for `pytest --help` from the repository root (docs/cli.md's block): 8 CPU-s
# each, ExecuTorch's exporter and torch most of it.
@functools.cache
def _import_installed_runtimes() -> None:
    from pytest_edge.backends import all_backends

    modules = ["onnx", *(backend.runtime_module for backend in all_backends().values() if backend.runtime_module)]
    for module in dict.fromkeys(modules):
        if importlib.util.find_spec(module.split(".")[0]) is not None:  # the tflite-runtime lane lacks some
            importlib.import_module(module)


# The third-party plugins no pytester run uses (edge_helpers.UNUSED_PLUGINS) are blocked in them.
# Autouse fixtures are set up before the test's own, so the runtimes are imported before pytester
# takes its snapshot of sys.modules.
@pytest.fixture(autouse=True)
def _pytester_runs_without_unused_plugins(request: pytest.FixtureRequest) -> None:
    if "pytester" in request.fixturenames:
        _import_installed_runtimes()
        request.getfixturevalue("pytester")  # it clears PYTEST_ADDOPTS for its runs: set it after
        request.getfixturevalue("monkeypatch").setenv("PYTEST_ADDOPTS", UNUSED_PLUGINS)


@pytest.fixture
def models(pytester: pytest.Pytester) -> Path:
    """A fresh project with copies of the fixture models in ./models and pytest-edge configured."""
    folder = pytester.path / "models"
    folder.mkdir()
    for path in FIXTURES.iterdir():
        if path.suffix in {".onnx", ".tflite", ".pte", ".data"}:  # .data: ONNX external data
            shutil.copy(path, folder / path.name)
    # One measuring process and no minimum time keep the suite fast; the tests of the measurement
    # protocol and of the merge gate set --edge-processes / --edge-min-time themselves.
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_processes = 1\nedge_min_time = 0\n")
    return folder


NOOPT_BACKEND = """\
import onnxruntime as ort
from pytest_edge.backends.onnxruntime.backend import OrtBackend, OrtModel

class NoOptBackend(OrtBackend):
    def __init__(self):
        super().__init__('CPUExecutionProvider')
        self.name = 'onnxruntime-noopt'

    def load(self, path, *, threads, shapes):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.add_session_config_entry('session.record_ep_graph_assignment_info', '1')
        session = ort.InferenceSession(str(path), options, providers=[self.provider])
        return OrtModel(session, self.provider)

def backends():
    return [NoOptBackend()]
"""


@pytest.fixture
def noopt_backend(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    """ONNX Runtime with every graph optimisation off (install_backend), a real runtime behind the
    same interface. Returns its name."""
    install_backend(pytester, monkeypatch, "noopt", NOOPT_BACKEND)
    return "onnxruntime-noopt"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """What the test's fixtures measure, kept on the item (tests/measuring.py)."""
    with measuring.finding(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """What the test measures, kept on the item before its report is made (tests/measuring.py)."""
    with measuring.finding(item):
        return (yield)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After a failed run, say of each failed test whether it measured anything, as found while it
    ran (tests/measuring.py: a measuring request of pytest-edge's worker client or the machine probe
    in this process, a model timed by the test itself, a pytest it started that asked for
    measurement by flag, ini or marker budget, or whose report holds measured figures), not from its
    name or a marker: a test that measured may have a verdict resting on a clock (the suite stages
    such effects as ratios of what the test measured, far outside the noise: docs/gate.md, "How this
    repository tests the gate"), one that measured nothing failed whatever the machine's speed or
    load. So CI tells a possible flake from a plain failure (docs/ci.md)."""
    failed = terminalreporter.stats.get("failed", [])
    if not failed:
        return
    terminalreporter.section("failed tests: timing or not")
    for report in failed:
        found = measuring.reasons(report)
        if found:
            kind = (f"measured ({'; '.join(found)}): its verdict may rest on a clock; read its figures before "
                    "calling it a flake")
        else:
            kind = "measured nothing: a failure, whatever the machine's speed or load"
        terminalreporter.write_line(f"{report.nodeid}: {kind}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (minutes: a fresh venv, Valgrind, an emulated board) first, in their
    order: under ``-n 2`` the workers then end on short tests together, instead of one worker
    running a two-minute test alone at the end (the lane's tail was about a minute)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
