"""pytest hooks: options, the ``edge`` marker, the ``edge_model`` fixture, the summary. Thin on
purpose: the work happens in :mod:`pytest_edge.session` and the modules it calls."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from .backends import get_backend
from .errors import EdgeError, EdgeInconclusive, UnknownBackend
from .handle import EdgeModel
from .models import Model
from .options import EdgeSpec, parse_marker, parse_ms, parse_names, parse_percent
from .report import build_report, format_table, load_report, table_rows, write_report
from .session import EdgeSession, Settings

SESSION_KEY = pytest.StashKey[EdgeSession]()
PARAM_KEY = pytest.StashKey[EdgeModel]()

# (flag, ini key, help, ini type, default); every flag has an ini key so a project sets its
# policy once in pyproject.toml and CI overrides it on the command line.
_OPTIONS = [
    ("--edge-backends", "edge_backends", "only these backends (comma-separated)", "string", ""),
    ("--edge-require", "edge_require", "fail, not skip, when these backends are unavailable", "string", ""),
    ("--edge-isolation", "edge_isolation", "'process' (default): each backend in its own worker process; "
     "'none': in-process, for pdb", "string", "process"),
    ("--edge-report", "edge_report", "write the JSON conformance report here", "string", ""),
    ("--edge-baseline", "edge_baseline", "a stored report to compare latency, memory and coverage with",
     "string", ""),
    ("--edge-max-regression", "edge_max_regression", "allowed regression against the baseline, e.g. 10%",
     "string", "10%"),
    ("--edge-baseline-models", "edge_baseline_models", "A/B mode: a folder with the baseline's artifacts "
     "(same file names), measured alternately with this run's in the same job", "string", ""),
    ("--edge-processes", "edge_processes", "fresh worker processes per measurement", "string", "3"),
    ("--edge-min-time", "edge_min_time", "least time the timed runs of each process take, e.g. 0.25s",
     "string", "0.25s"),
    ("--edge-reference-backend", "edge_reference_backend", "backend that records golden outputs",
     "string", "onnxruntime-cpu"),
    ("--edge-golden-dir", "edge_golden_dir", "folder of golden outputs (relative to the rootdir)",
     "string", "golden"),
]
_INI_ONLY = [
    ("edge_model_dirs", "folders searched for models by stem", "paths", []),
    ("edge_atol", "default absolute tolerance", "string", "1e-4"),
    ("edge_rtol", "default relative tolerance", "string", "1e-4"),
    ("edge_warmup", "warm-up runs discarded before timing", "string", "5"),
    ("edge_runs", "timed runs", "string", "50"),
    ("edge_threads", "threads given to each runtime that has the setting", "string", "1"),
    ("edge_seed", "seed of the inputs drawn from a signature", "string", "0"),
    ("edge_timeout", "seconds a backend may take for one request before its worker is killed",
     "string", "600"),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("edge", "pytest-edge: deployment conformance of on-device models")
    for flag, ini, help_text, kind, default in _OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=f"{help_text} (ini: {ini})")
        parser.addini(ini, help_text, type=kind, default=default)
    group.addoption("--edge-update-golden", action="store_true", default=False,
                    help="regenerate golden outputs on the reference backend (nothing is written without it)")
    group.addoption("--edge-measure", action="store_true", default=False,
                    help="time and measure memory on every backend, even without budgets (ini: edge_measure)")
    parser.addini("edge_measure", "measure latency and memory even without budgets", type="bool", default=False)
    group.addoption("--edge-strict-timing", action="store_true", default=False,
                    help="a latency regression against a stored baseline fails even when the machine was busy "
                    "(default: inconclusive, a warning) (ini: edge_strict_timing)")
    parser.addini("edge_strict_timing", "fail stored-baseline regressions seen on a busy machine", type="bool",
                  default=False)
    for ini, help_text, kind, default in _INI_ONLY:
        parser.addini(ini, help_text, type=kind, default=default)


def _value(config: pytest.Config, ini: str) -> Any:
    cli = config.getoption(ini, default=None)
    return cli if cli is not None else config.getini(ini)


def settings_from_config(config: pytest.Config) -> Settings:
    """The session's settings from the command line and the project's ini file (CLI wins)."""
    root = Path(config.rootpath)
    isolation = _value(config, "edge_isolation")
    if isolation not in ("process", "none"):
        raise pytest.UsageError(f"--edge-isolation: {isolation!r} is not 'process' or 'none'")
    try:
        baseline_path = _value(config, "edge_baseline")
        baseline = load_report(root / baseline_path) if baseline_path else None
        numbers = {k: float(config.getini(k)) for k in ("edge_atol", "edge_rtol", "edge_timeout")}
        counts = {k: int(config.getini(k)) for k in ("edge_warmup", "edge_runs", "edge_threads", "edge_seed")}
        max_regression = parse_percent(_value(config, "edge_max_regression"))
        processes = int(_value(config, "edge_processes"))
        if processes < 1:
            raise ValueError(f"edge_processes: {processes} must be at least 1")
        min_time_s = parse_ms(_value(config, "edge_min_time"), "edge_min_time") / 1000
        baseline_models = _value(config, "edge_baseline_models")
        if baseline_models and not (root / baseline_models).is_dir():
            raise ValueError(f"--edge-baseline-models: {root / baseline_models} is not a folder")
    except (ValueError, EdgeError) as exc:
        raise pytest.UsageError(f"pytest-edge: {exc}") from exc
    return Settings(
        golden_dir=root / _value(config, "edge_golden_dir"),
        rootdir=root,
        reference_backend=_value(config, "edge_reference_backend"),
        update_golden=config.getoption("--edge-update-golden"),
        isolated=isolation == "process",
        backends=parse_names(_value(config, "edge_backends"), "--edge-backends") or None,
        require=parse_names(_value(config, "edge_require"), "--edge-require") or [],
        atol=numbers["edge_atol"], rtol=numbers["edge_rtol"], timeout_s=numbers["edge_timeout"],
        warmup=counts["edge_warmup"], runs=counts["edge_runs"], threads=counts["edge_threads"],
        seed=counts["edge_seed"],
        measure=config.getoption("--edge-measure") or config.getini("edge_measure"),
        baseline=baseline, max_regression=max_regression,
        model_dirs=[Path(p) for p in config.getini("edge_model_dirs")],
        processes=processes, min_time_s=min_time_s,
        baseline_models=root / baseline_models if baseline_models else None,
        strict_timing=config.getoption("--edge-strict-timing") or config.getini("edge_strict_timing"),
    )


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "edge(model=None, **budgets): check a model on every available backend against golden "
        "outputs and budgets (see pytest-edge's README)")
    settings = settings_from_config(config)
    # Only names the user typed on this run: listing backends imports onnxruntime, which a
    # session that never uses the marker should not pay for.
    for name in [*(settings.backends or []), *settings.require]:
        try:
            get_backend(name)
        except UnknownBackend as exc:
            raise pytest.UsageError(f"pytest-edge: {exc}") from None
    session = EdgeSession(settings)
    config.stash[SESSION_KEY] = session
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistMerge(session), "edge-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


@dataclass(frozen=True)
class EdgeParam:
    """One value of the ``edge_model`` parametrization: a model on a backend, for one test."""

    model: Model
    backend: str | None
    unavailable: str | None
    test_dir: Path
    spec: EdgeSpec = field(compare=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    markers = list(metafunc.definition.iter_markers("edge"))
    if len(markers) > 1:
        raise pytest.Collector.CollectError(
            f"{metafunc.definition.nodeid}: {len(markers)} @pytest.mark.edge markers apply (on the test, its "
            "class or module); one marker must say everything, or the nearest would silently win")
    marker = markers[0] if markers else None
    if marker is None:
        if "edge_model" in metafunc.fixturenames:
            raise pytest.Collector.CollectError(
                f"{metafunc.definition.nodeid}: edge_model needs @pytest.mark.edge(model=...)")
        return
    session = metafunc.config.stash[SESSION_KEY]
    test_dir = Path(metafunc.definition.path).parent
    try:
        spec = parse_marker(marker.args, marker.kwargs)
        model = session.resolve(spec.model, test_dir)
        plan = session.backend_plan(model, spec)
    except EdgeError as exc:
        raise pytest.Collector.CollectError(f"{metafunc.definition.nodeid}: {exc}") from None
    if "edge_model" not in metafunc.fixturenames:
        # A marked test that does not ask for the fixture is still parametrized over backends and
        # gets its golden check on each (pytest_runtest_call builds the handle from the param).
        metafunc.fixturenames.append("edge_model")
    params = []
    for backend, reason in plan:
        required = backend in session.settings.require
        marks = [pytest.mark.skip(reason=reason)] if reason and not required else []
        params.append(pytest.param(EdgeParam(model, backend, reason, test_dir, spec),
                                   id=f"{model.name}-{backend}", marks=marks))
    if not params:
        params.append(pytest.param(EdgeParam(model, None, "no backend selected", test_dir, spec),
                                   id=f"{model.name}-none",
                                   marks=[pytest.mark.skip(reason="no backend selected for this test")]))
    metafunc.parametrize("edge_model", params, indirect=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the backend workers that the selected tests need now, so their runtimes import
    while pytest finishes collecting and starts the first tests (a fixed cost off the clock)."""
    edge = config.stash.get(SESSION_KEY, None)
    if edge is None:
        return
    params = [getattr(item, "callspec", None) and item.callspec.params.get("edge_model") for item in items]
    edge.prestart([p.backend for p in params if isinstance(p, EdgeParam) and p.backend and not p.unavailable])


def _handle(item: pytest.Item, param: EdgeParam) -> EdgeModel:
    """The item's EdgeModel, made once (by the fixture, or here for a test that does not ask for it)."""
    handle = item.stash.get(PARAM_KEY, None)
    if handle is None:
        assert param.backend is not None
        handle = EdgeModel(item.config.stash[SESSION_KEY], param.model, param.backend, param.spec,
                           param.test_dir, unavailable=param.unavailable)
        item.stash[PARAM_KEY] = handle
    return handle


@pytest.fixture
def edge_model(request: pytest.FixtureRequest) -> EdgeModel:
    """The test's model loaded on one backend (the fixture is parametrized over backends)."""
    handle = _handle(request.node, request.param)
    if request.config.stash[SESSION_KEY].settings.update_golden and not handle.unavailable:
        # Refresh before the body, so a failing body still leaves a golden. A refresh that cannot
        # run is reported by the check after the body, as a failure of this test, not a setup error.
        try:
            handle.golden  # noqa: B018
        except Exception:  # noqa: BLE001 - the check after the body meets it again and names it
            pass
    return handle


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("edge_model") if callspec else None
    if not isinstance(param, EdgeParam) or param.backend is None:
        return (yield)
    session = item.config.stash[SESSION_KEY]
    try:
        result = yield
    except (Exception, pytest.fail.Exception) as exc:
        # The body failed: its own assertion is the failure; the table still gets the row.
        record = session.error_record(item.nodeid, param.model, param.backend, exc)
        if not isinstance(exc, EdgeError):  # an EdgeError (bad artifact ...) already says what failed
            record.update(verdict="failed", violations=[f"the test body failed: {type(exc).__name__}"])
        raise
    handle = _handle(item, param)
    if handle.unavailable:
        handle.loaded  # raises the --edge-require failure  # noqa: B018
    try:
        record = session.check(item.nodeid, handle.model, handle.backend, handle.spec, handle.test_dir)
    except EdgeError as exc:
        record = getattr(exc, "record", None) or session.error_record(item.nodeid, handle.model, handle.backend, exc)
        _add_properties(item, record)
        raise
    for message in record.get("warnings", []):
        warnings.warn(EdgeInconclusive(message), stacklevel=1)
    _add_properties(item, record)
    return result


@pytest.fixture
def edge_benchmark(request: pytest.FixtureRequest):
    """``edge_benchmark(edge_model)``: the worker's timed runs, shown in pytest-benchmark's table."""
    pytest.importorskip("pytest_benchmark", reason="edge_benchmark needs pytest-benchmark")
    from .bench import record_benchmark

    benchmark = request.getfixturevalue("benchmark")

    def run(model: EdgeModel, feeds: Any = None, warmup: int | None = None, runs: int | None = None) -> dict:
        return record_benchmark(benchmark, model, feeds, warmup, runs)

    return run


def _add_properties(item: pytest.Item, record: dict[str, Any]) -> None:
    """Key figures as JUnit XML properties (``--junitxml``)."""
    latency = record.get("latency_ms") or {}
    coverage = record.get("coverage") or {}
    figures = {"edge_backend": record.get("backend"), "edge_verdict": record.get("verdict"),
               "edge_max_abs_err": (record.get("accuracy") or {}).get("max_abs_err"),
               "edge_fallback": coverage.get("fallback"), "edge_partitions": coverage.get("partitions"),
               "edge_p50_ms": latency.get("p50"), "edge_p99_ms": latency.get("p99"),
               "edge_load_ms": record.get("load_ms"), "edge_peak_memory_mb": record.get("peak_memory_mb")}
    item.user_properties.extend((k, v) for k, v in figures.items() if v is not None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if excinfo is not None and isinstance(excinfo.value, EdgeError) and not item.config.getoption("fulltrace"):
        # The message names the file and backend; a traceback into the plugin adds nothing.
        report.longrepr = f"{excinfo.value}"
    if call.when == "setup" and report.skipped:
        param = getattr(item, "callspec", None) and item.callspec.params.get("edge_model")
        if isinstance(param, EdgeParam) and param.backend is not None:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            item.config.stash[SESSION_KEY].skipped_record(
                item.nodeid, param.model, param.backend, reason.removeprefix("Skipped: "))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    edge = config.stash.get(SESSION_KEY, None)
    if edge is None:
        return
    if _is_xdist_worker(config):
        config.workeroutput["edge_records"] = json.dumps(edge.records)
        config.workeroutput["edge_under_load"] = edge.timing_under_load
        config.workeroutput["edge_measured"] = edge.measured_any
        config.workeroutput["edge_inconclusive"] = edge.inconclusive
        return
    path = _value(config, "edge_report")
    if path and edge.records:
        target = Path(config.rootpath) / path
        try:
            write_report(target, build_report(edge.records, edge.machine))
        except OSError as exc:
            # The table and pytest's summary still print; the exit status says something failed.
            edge.report_error = f"pytest-edge: cannot write the report {target}: {exc.strerror or exc}"
            if session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    edge = config.stash.get(SESSION_KEY, None)
    if edge is None or _is_xdist_worker(config) or not edge.records:
        return
    terminalreporter.section("pytest-edge conformance")
    for line in format_table(table_rows(edge.records)):
        terminalreporter.write_line(line)
    if any((r.get("coverage") or {}).get("method") == "predicted" for r in edge.records):
        terminalreporter.write_line("* coverage predicted from the execution provider's support rules")
    if edge.timing_under_load:
        terminalreporter.write_line(
            "note: some timings ran under load (other processes kept more than half a core busy; see "
            "timing_under_load in the report): their latency figures are noisier than on an idle machine")
    if edge.inconclusive:
        terminalreporter.write_line(
            f"note: {edge.inconclusive} latency regression(s) against the stored baseline were inconclusive "
            "because the machine was busy (see the warnings); A/B mode (--edge-baseline-models) is not fooled by load")
    workers = getattr(config.option, "numprocesses", None)
    if workers and edge.measured_any:
        terminalreporter.write_line(
            f"note: timing and memory ran one at a time across the {workers} xdist workers, but correctness "
            "tests of other workers ran beside them; for the steadiest figures run without -n")
    path = _value(config, "edge_report")
    if edge.report_error:
        terminalreporter.write_line(edge.report_error, red=True, bold=True)
    elif path:
        terminalreporter.write_line(f"report: {Path(config.rootpath) / path}")


class XdistMerge:
    """Controller side of pytest-xdist: gather every worker's records (registered only with xdist)."""

    def __init__(self, session: EdgeSession) -> None:
        self.session = session

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        self.session.records.extend(json.loads(output.get("edge_records", "[]")))
        self.session.timing_under_load |= bool(output.get("edge_under_load"))
        self.session.measured_any |= bool(output.get("edge_measured"))
        self.session.inconclusive += int(output.get("edge_inconclusive", 0))

