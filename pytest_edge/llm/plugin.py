"""pytest hooks of ``@pytest.mark.edge_llm`` and the ``edge_llm`` fixture (registered by the main
plugin). Thin: the work is in :mod:`.checks`. Records join the session's, so the JSON report, the
table and xdist merging carry them like any other."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pytest

from ..errors import DeviceUnreachable, EdgeCheckFailed, EdgeError, EdgeUsageError, EdgeWorkerRestarted
from ..plugin import unresolved
from ..stash import SESSION_KEY, edge_session

# Registered in every pytest session: what an edge_llm test needs is imported when one is collected.
if TYPE_CHECKING:
    import numpy as np

    from .checks import LlmChecker, LlmTarget

CHECKER_KEY = pytest.StashKey["LlmChecker"]()


def _session(config: pytest.Config) -> Any:
    return edge_session(config)


def _checker(config: pytest.Config) -> LlmChecker:
    from .checks import LlmChecker

    if CHECKER_KEY not in config.stash:
        config.stash[CHECKER_KEY] = LlmChecker(_session(config).settings, _session(config).pool, _session(config).models)
    return config.stash[CHECKER_KEY]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "edge_llm(model, prompts, new_tokens=16, **budgets): greedy generation on every available "
        "backend against golden token ids and first-step logits, TTFT/TPOT/memory budgets (see docs/llm.md)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    markers = list(metafunc.definition.iter_markers("edge_llm"))
    if not markers:
        if "edge_llm" in metafunc.fixturenames:
            unresolved(metafunc, "edge_llm", "edge_llm needs @pytest.mark.edge_llm(model=..., prompts=...)")
        return
    if len(markers) > 1:
        return unresolved(metafunc, "edge_llm", f"{len(markers)} @pytest.mark.edge_llm markers apply; one must say "
                          "everything")
    from ..core.plan import key_bases, search_dirs
    from .checks import resolve_llm_model, targets
    from .marker import parse_llm_marker

    session = _session(metafunc.config)
    if "edge_llm" not in metafunc.fixturenames:
        metafunc.fixturenames.append("edge_llm")  # checked on each backend even without the fixture
    doing = "reading @pytest.mark.edge_llm"
    try:
        spec = parse_llm_marker(markers[0].args, markers[0].kwargs)
        doing = f"resolving edge_llm model={spec.model!r}"
        dirs, bases = search_dirs(session.settings, Path(metafunc.definition.path).parent), key_bases(session.settings)
        model = session.models.claim(resolve_llm_model(spec.model, dirs, bases))
        doing = f"resolving edge_llm reference={spec.reference!r}"
        reference = session.models.claim(resolve_llm_model(spec.reference, dirs, bases)) if spec.reference else None
        if reference is not None and reference.key == model.key:
            raise EdgeUsageError(f"edge_llm reference={spec.reference!r} names the tested model {model.key!r} itself; "
                                 "drop reference= (a model is checked against its own goldens by default)")
        doing = f"choosing the backends of {model.key}"
        found = targets(spec, model, session.settings, reference)
    except EdgeError as exc:
        # One test's error (a model not found, an artifact kind no runtime knows), not a collection
        # error that would end the whole session with the other tests.
        return unresolved(metafunc, "edge_llm", str(exc))
    except Exception as exc:  # what no check foresaw (a file that breaks a reader): still this test's alone
        return unresolved(metafunc, "edge_llm", f"{type(exc).__name__} while {doing}: {str(exc)[:300]}")
    required = set(session.settings.require)
    params = [pytest.param(t, id=f"{model.name}-{t.backend}",
                           marks=[pytest.mark.skip(reason=t.unavailable)] if t.unavailable and t.backend not in required
                           else []) for t in found]
    if not params:
        params.append(pytest.param(None, id=f"{model.name}-none",
                                   marks=[pytest.mark.skip(reason="no LLM backend selected for this test")]))
    metafunc.parametrize("edge_llm", params, indirect=True)


class LlmHandle:
    """The test's decoder on one backend: ``generate(prompt, new_tokens)`` gives greedy token ids."""

    def __init__(self, checker: LlmChecker, target: LlmTarget) -> None:
        from .checks import config_of

        self._checker, self.target = checker, target
        self.backend = target.backend
        self.config = config_of(target.model, target.artifact)

    def generate(self, prompt: Sequence[int], new_tokens: int | None = None) -> list[int]:
        from .checks import spec_context
        from .marker import check_prompt

        n = new_tokens or self.target.spec.new_tokens
        ids = check_prompt(prompt, n, self.config, f"{self.target.model.name} ({self.backend})")
        return self._checker.generate(self.backend, self.target.artifact, self.config, self.target.spec.threads,
                                      ids, n, spec_context(self.target.spec)).tokens

    def logits(self, prompt: Sequence[int]) -> np.ndarray:
        """The logits the first new token is chosen from."""
        from .checks import spec_context
        from .marker import check_prompt

        ids = check_prompt(prompt, 1, self.config, f"{self.target.model.name} ({self.backend})")
        return self._checker.generate(self.backend, self.target.artifact, self.config, self.target.spec.threads,
                                      ids, 1, spec_context(self.target.spec)).first_logits


@pytest.fixture
def edge_llm(request: pytest.FixtureRequest) -> LlmHandle:
    """The test's decoder loaded on one backend (parametrized over the LLM backends)."""
    from ..core.plan import Unresolved

    target: LlmTarget = request.param
    if isinstance(target, Unresolved):
        raise EdgeUsageError(target.message)
    if target.unavailable:  # only a required backend gets here: the others were skipped
        pytest.fail(f"{target.backend} is required (--edge-require) but cannot run {target.model.name}: "
                    f"{target.unavailable}", pytrace=False)
    return LlmHandle(_checker(request.config), target)


def _target(item: pytest.Item) -> LlmTarget | None:
    callspec = getattr(item, "callspec", None)
    target = callspec.params.get("edge_llm") if callspec else None
    if target is None:  # not an edge_llm test: nothing of the LLM checks imported for it
        return None
    from .checks import LlmTarget

    return target if isinstance(target, LlmTarget) else None


def _model_json(session: Any, target: LlmTarget) -> dict[str, Any]:
    from .checks import model_json

    return model_json(target, session.settings.rootdir)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    target = _target(item)
    if target is None:
        return (yield)
    from ..core.record import Record

    session = _session(item.config)
    try:
        result = yield
    except (Exception, pytest.fail.Exception) as exc:  # the body's own failure (a skip is no failure)
        if _unreachable(session, item, target, exc):
            pytest.skip(str(exc))
        session.records.append(Record.body_failed(item.nodeid, _model_json(session, target), target.backend, exc))
        raise
    try:
        record, violations = _checker(item.config).check(item.nodeid, target, session.settings.rootdir)
    except EdgeError as exc:
        if _unreachable(session, item, target, exc):
            pytest.skip(str(exc))
        session.records.append(Record.errored(item.nodeid, _model_json(session, target), target.backend, str(exc)))
        raise
    session.records.append(record)
    if violations:
        raise EdgeCheckFailed(violations, record.to_json())
    for message in record.restarts:
        item.warn(EdgeWorkerRestarted(message))
    return result


def _unreachable(session: Any, item: pytest.Item, target: LlmTarget, exc: BaseException) -> bool:
    """A device that cannot be reached skips the test, as it skips a tensor model's (kept as a skipped
    record with the transport's message), unless --edge-require names the backend: then it fails."""
    if not isinstance(exc, DeviceUnreachable) or target.backend in session.settings.require:
        return False
    from ..core.record import Record

    session.records.append(Record.skipped(item.nodeid, _model_json(session, target), target.backend, str(exc)))
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    report = yield
    target = _target(item)
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("edge_llm") if callspec else None
    if param is None:  # not an edge_llm test
        return report
    from ..core.plan import Unresolved
    from ..core.record import UNRESOLVED_BACKEND, Record
    from .checks import LlmTarget

    if target is not None and call.when == "setup" and report.skipped:
        session = _session(item.config)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        session.records.append(Record.skipped(item.nodeid, _model_json(session, target), target.backend,
                                              reason.removeprefix("Skipped: ")))
    elif call.when == "setup" and report.failed and call.excinfo is not None \
            and isinstance(call.excinfo.value, (EdgeError, pytest.fail.Exception)):
        # An LLM test that errors before its check is in the reports too, with the reason.
        session = _session(item.config)
        message = str(call.excinfo.value)
        if isinstance(param, LlmTarget):
            session.records.append(Record.errored(item.nodeid, _model_json(session, param), param.backend, message))
        elif isinstance(param, Unresolved):
            marker = item.get_closest_marker("edge_llm")
            named = marker.kwargs.get("model") if marker is not None else None
            session.records.append(Record.errored(item.nodeid, {"name": named if isinstance(named, str) else "?",
                                                                "artifact": None, "sha256": None},
                                                  UNRESOLVED_BACKEND, message))
    if target is not None and call.excinfo is not None and isinstance(call.excinfo.value, EdgeError) \
            and not item.config.getoption("fulltrace"):
        report.longrepr = f"{call.excinfo.value}"
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line per measured (test, backend) of edge_llm: the generation figures the table lacks."""
    edge = config.stash.get(SESSION_KEY, None)
    if hasattr(config, "workerinput") or edge is None:  # no session: no edge test ran
        return
    lines = []
    for record in edge.record_json():
        llm = record.get("llm") or {}
        if not llm.get("ttft_ms"):
            continue
        context = llm.get("context") or {}
        longest = f", longest stable context {context.get('longest_stable')}" if context else ""
        decode = (f"{llm['decode_tokens_per_s']:.0f} ± {llm.get('decode_tokens_per_s_sd') or 0:.0f}"
                  if llm.get("decode_tokens_per_s") is not None else "—")
        lines.append(f"{record['test']}: TTFT P50 {llm['ttft_ms']['p50']:.3f} ms ({llm['prompt_tokens']} tokens), "
                     f"TPOT P50 {llm['tpot_ms']['p50']:.3f} ms, decode {decode} tokens/s{longest}")
    if lines:
        terminalreporter.section("pytest-edge LLM generation")
        for line in lines:
            terminalreporter.write_line(line)
