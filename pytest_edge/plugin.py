"""pytest hooks: options, the ``edge`` marker, the ``edge_model`` fixture, the summary. Thin on
purpose: the work happens in :mod:`pytest_edge.run.session` and the modules it calls.

Every pytest session imports this module, edge tests or not: at the top only what registers the
options and reads the settings; the session and what it runs (NumPy, the backends, the workers,
the reports) are imported when the first edge test is collected (:func:`~pytest_edge.stash.edge_session`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest


def _not_rewritten(package: str) -> None:
    """pytest assertion-rewrites every module of an entry-point plugin's package when it is imported
    (parse to an AST, rewrite, compile: 2.2x a plain compile, every run where no bytecode is written,
    and never from pip's .pyc). This package has no assertion a user reads, so its modules imported
    after this one load as plain modules. pytest has no public way to unmark a name: its hook's
    set, guarded (another pytest only rewrites them as before)."""
    for hook in sys.meta_path:
        marked = getattr(hook, "_must_rewrite", None)
        if isinstance(marked, set) and package in marked:
            marked.discard(package)
            cache = getattr(hook, "_marked_for_rewrite_cache", None)
            if isinstance(cache, dict):
                cache.clear()


_not_rewritten(__name__.rpartition(".")[0])
# The package's imports come after that call, so they are not rewritten either.
from .core import settings as edge_settings
from .core.settings import Settings
from .errors import (EdgeError, EdgeInconclusive, EdgeWorkerRestarted, UnknownBackend, visible,
                     visible_longrepr)
from .golden.use import USE_KEY, GoldenUse, find_unused
from .parametrize import fixture_target, item_plan, item_target, parametrize, setup_error_target
from .stash import PROGRESS_KEY, SESSION_KEY, SETTINGS_KEY, close_spare, edge_session, start_spare
from .xdist_merge import XdistMerge, send_to_controller

if TYPE_CHECKING:
    from .run.decoder_plan import LlmTarget
    from .run.speech_plan import SpeechTarget
    from .core.plan import Plan
    from .run.session import Outcome
    from .edge_model import EdgeModel, LlmHandle, SpeechHandle
    from .report.history import OverTime  # noqa: F401 - named by OVER_TIME_KEY's type

HANDLE_KEY = pytest.StashKey["EdgeModel"]()
OVER_TIME_KEY = pytest.StashKey["OverTime"]()  # what --edge-openmetrics and --edge-history wrote, the creeps
def pytest_addoption(parser: pytest.Parser) -> None:
    # Every flag has an ini key, so a project sets its policy once in pyproject.toml and CI
    # overrides it on the command line; the table and the defaults live in settings.py.
    group = parser.getgroup("edge", "pytest-edge: deployment conformance of on-device models")
    for option in edge_settings.OPTIONS:
        if option.flag:
            # argparse %-formats help texts: a bare "10%" would make `pytest --help` raise.
            text = f"{option.help} (ini: {option.ini})".replace("%", "%%")
            if option.takes_value:
                group.addoption(option.flag, dest=option.ini, default=None, help=text)
            else:
                group.addoption(option.flag, dest=option.ini, action="store_true", default=None, help=text)
        parser.addini(option.ini, option.help, type=option.kind, default=option.default)
    group.addoption("--edge-device", dest="edge_device", action="append", default=[], metavar="NAME=COMMAND",
                    help="a device whose backends are BACKEND@NAME (repeatable; ini: edge_devices)")
    group.addoption("--edge-update-golden", action="store_true", default=False,
                    help="regenerate golden outputs on the reference backend (nothing is written without it)")


def settings_from_config(config: pytest.Config) -> Settings:
    """The session's settings from the command line and the project's ini file (CLI wins), with
    --edge-baseline's report read now, so a bad file is a usage error before collection."""
    try:
        settings = edge_settings.from_config(config)
        if settings.baseline_path is not None:
            from .report.json_report import load_report

            # Read once, typed, for the gate and the pages alike: a record no Record holds is a usage
            # error now, not a gate or a page that cannot read it later.
            settings.baseline = load_report(settings.baseline_path)
        return settings
    except (EdgeError, ValueError) as exc:  # ValueError: read_report's, naming the file
        raise pytest.UsageError(f"pytest-edge: {exc}") from exc


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "edge(model=None, **budgets): check a model on every available backend against golden "
        "outputs and budgets (see pytest-edge's docs/marker.md)")
    config.addinivalue_line(
        "markers", "edge_llm(model, prompts, new_tokens=16, **budgets): greedy generation on every available "
        "backend against golden token ids and first-step logits, TTFT/TPOT/memory budgets (see docs/llm.md)")
    config.addinivalue_line(
        "markers", "edge_asr(model, audio, new_tokens=16, reference=None, **budgets): a speech "
        "export's greedy tokens and transcripts on every available speech backend against the golden's, WER/CER "
        "budgets against a reference= export (see docs/speech.md)")
    settings = settings_from_config(config)
    # Only names the user typed on this run: listing backends imports onnxruntime, which a
    # session that never uses the marker should not pay for.
    if settings.backends or settings.require:
        from .backends import get_backend
        from .core.plan import is_pattern

        for name in [*(n for n in settings.backends or [] if not is_pattern(n)), *settings.require]:
            try:
                get_backend(name)
            except UnknownBackend as exc:
                raise pytest.UsageError(f"pytest-edge: {exc}") from None
    config.stash[SETTINGS_KEY] = settings
    config.stash[PROGRESS_KEY] = _progress_writer(config)
    if settings.fork == "on":
        edge_session(config)  # where the OS cannot fork, said at configure as before
    use = config.stash[USE_KEY] = GoldenUse()
    config.pluginmanager.register(use, "edge-golden-use")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistMerge(config, config.stash[USE_KEY]), "edge-xdist")


def _progress_writer(config: pytest.Config) -> Callable[[str], None]:
    """Progress lines of a long step (provisioning an emulated device) on the terminal, past the
    capture; an xdist worker, which has no terminal, writes them to stderr."""
    def write(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None:
            print(f"pytest-edge: {line}", file=sys.stderr, flush=True)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(visible(f"pytest-edge: {line}"))

    return write


def pytest_unconfigure(config: pytest.Config) -> None:
    edge = config.stash.get(SESSION_KEY, None)
    if edge is not None:
        edge.close()
    close_spare(config)  # one no session took (collection ended early)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """A project that names its model folders (edge_model_dirs) runs edge tests: start the spare
    worker interpreter now, before the terminal's header and collection (stash.start_spare). Not in
    xdist's controller, which collects nothing."""
    config = session.config
    if config.getini("edge_model_dirs") and not config.pluginmanager.has_plugin("dsession"):
        start_spare(config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the backend workers that the selected tests of either kind need now, so their runtimes
    import while pytest finishes collecting and starts the first tests (a fixed cost off the clock)."""
    edge = config.stash.get(SESSION_KEY, None)
    if edge is not None and not config.option.collectonly:  # nothing runs: no runtime to start
        edge.prestart([t.backend for t in map(item_target, items) if t is not None and not t.unavailable])
    elif edge is None:  # no edge test collected: a spare started for one is of no use
        close_spare(config)


def _handle(item: pytest.Item, plan: Plan) -> EdgeModel:
    """The item's EdgeModel, made once (by the fixture, or here for a test that does not ask for it)."""
    handle = item.stash.get(HANDLE_KEY, None)
    if handle is None:
        from .edge_model import EdgeModel

        handle = item.stash[HANDLE_KEY] = EdgeModel(edge_session(item.config), plan)
    return handle


@pytest.fixture
def edge_model(request: pytest.FixtureRequest) -> EdgeModel:
    """The test's model loaded on one backend (the fixture is parametrized over backends)."""
    plan: Plan = fixture_target(request, required_fails=False)  # a required backend's: its check fails it
    if not plan.unavailable and plan.reads_golden:
        # Refresh before the body, so a failing body still leaves a golden. A refresh that cannot
        # run is reported by the check after the body, as a failure of this test, not a setup error.
        try:
            edge_session(request.config).golden.ensure(plan)
        except Exception:  # noqa: BLE001 - the check after the body meets it again and names it
            pass
    return _handle(request.node, plan)


@pytest.fixture
def edge_llm(request: pytest.FixtureRequest) -> LlmHandle:
    """The test's decoder loaded on one backend (the fixture is parametrized over the LLM backends)."""
    from .edge_model import LlmHandle

    target: LlmTarget = fixture_target(request, required_fails=True)
    return LlmHandle(edge_session(request.config), target)


@pytest.fixture
def edge_asr(request: pytest.FixtureRequest) -> SpeechHandle:
    """The test's speech export on one backend (the fixture is parametrized over the speech backends)."""
    from .edge_model import SpeechHandle

    target: SpeechTarget = fixture_target(request, required_fails=True)
    return SpeechHandle(edge_session(request.config), target)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    plan = item_target(item)
    if plan is None:
        return (yield)
    edge = edge_session(item.config)
    try:
        result = yield
    except (Exception, pytest.fail.Exception) as exc:  # the body's (edge_model(...) runs it on the backend)
        if (reason := _settled(item, edge.settle(item.nodeid, plan, exc, in_body=True))) is None:
            raise
        pytest.skip(reason)
    try:
        record = edge.check(item.nodeid, plan)
    except EdgeError as exc:
        if (reason := _settled(item, edge.settle(item.nodeid, plan, exc, in_body=False))) is None:
            raise
        pytest.skip(reason)
    for message in record.warnings:
        item.warn(EdgeInconclusive(visible(message, lines=True)))  # attributed to the test (its file and line), not to this hook
    for message in record.restarts:
        item.warn(EdgeWorkerRestarted(visible(message, lines=True)))
    item.user_properties.extend(record.junit_properties())
    return result


def _settled(item: pytest.Item, outcome: Outcome) -> str | None:
    """The skip reason of a settled exception (None: it fails the test), its figures reported."""
    if outcome.report and outcome.record is not None:
        item.user_properties.extend(outcome.record.junit_properties())
    return outcome.skip


@pytest.fixture
def edge_benchmark(request: pytest.FixtureRequest):
    """``edge_benchmark(edge_model)``: the worker's timed runs, shown in pytest-benchmark's table."""
    pytest.importorskip("pytest_benchmark", reason="edge_benchmark needs pytest-benchmark")
    from .bench import record_benchmark

    benchmark = request.getfixturevalue("benchmark")

    def run(model: EdgeModel, feeds: Any = None, warmup: int | None = None, runs: int | None = None) -> dict:
        return record_benchmark(benchmark, model, feeds, warmup, runs)

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    report = yield
    excinfo = call.excinfo
    if excinfo is not None and isinstance(excinfo.value, EdgeError) and not item.config.getoption("fulltrace"):
        # The message names the file and backend; a traceback into the plugin adds nothing.
        report.longrepr = f"{excinfo.value}"
    plan = item_target(item)
    if call.when == "setup" and report.skipped and plan is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        edge_session(item.config).skipped(item.nodeid, plan, reason.removeprefix("Skipped: "))
    elif call.when == "setup" and report.failed and excinfo is not None:
        # A test that errors before its check (a bad marker, an artifact that cannot load, a
        # required decoder backend that cannot run) is in the reports too, with the reason: a
        # report of only the tests that ran would look green.
        errored = setup_error_target(item, excinfo.value, plan)
        if errored is not None:
            edge_session(item.config).setup_errored(item.nodeid, errored[0], str(excinfo.value), errored[1])
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """An edge test's report shows a file's or runtime's text with its escapes visible, before the
    terminal, JUnit XML or an xdist worker's channel read it."""
    if "edge" in report.keywords or "edge_llm" in report.keywords or "edge_asr" in report.keywords:
        report.longrepr = visible_longrepr(report.longrepr)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    edge = config.stash.get(SESSION_KEY, None)
    if edge is None:  # no edge test was collected: no record, and nothing said about goldens
        return
    if _is_xdist_worker(config):
        send_to_controller(session, edge)
        return
    try:
        find_unused(session, edge.golden, item_plan)
    except Exception as exc:  # noqa: BLE001 - an unreadable golden folder must not hide the results
        config.stash[USE_KEY].error = f"pytest-edge: cannot tell unused goldens: {type(exc).__name__}: {exc}"
    if not edge.records:
        return
    from .report.outputs import finish_session

    end = finish_session(edge.records, edge.machine, edge.settings)
    if end.over_time is not None:
        config.stash[OVER_TIME_KEY] = end.over_time
    if end.errors:
        edge.report_error = "\n".join(end.errors)
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or _is_xdist_worker(config):
        return
    from .report.terminal import write_nothing_ran, write_summary

    edge = config.stash.get(SESSION_KEY, None)  # None: no edge test was collected
    use = config.stash[USE_KEY]
    if edge is None or not edge.records:
        write_nothing_ran(terminalreporter, settings, use)
        return
    workers = getattr(config.option, "numprocesses", None)
    write_summary(terminalreporter, edge.settings, edge.records, use, under_load=edge.under_load,
                  inconclusive=edge.inconclusive, xdist_workers=workers if edge.measured_any else None,
                  report_error=edge.report_error)
    over_time = config.stash.get(OVER_TIME_KEY, None)
    if over_time is not None and over_time.creeps and not over_time.fail:  # a failing creep is in report_error
        for line in over_time.lines():
            terminalreporter.write_line(line, yellow=True)
