"""From a test's marker to its parametrization: one case per backend's plan (``edge``, ``edge_llm``,
``edge_asr``), or one case naming why the test cannot be planned; and a collected item's plan read
back. The plugin's pytest_generate_tests and its item hooks call these."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import EdgeError, EdgeUsageError
from .golden.use import USE_KEY
from .stash import edge_session, start_spare

if TYPE_CHECKING:
    from .core.plan import Plan, Unresolved
    from .core.target import Target


def unresolved(metafunc: pytest.Metafunc, fixture: str, message: str) -> None:
    """Parametrize ``fixture`` with one :class:`~pytest_edge.core.plan.Unresolved` case: the test errors
    at setup with ``message``; the other tests run. The session's golden use counts it as a
    collection error (a run with one does not say which goldens are unused)."""
    from .core.plan import Unresolved

    metafunc.config.stash[USE_KEY].collect_errors += 1
    if fixture not in metafunc.fixturenames:
        metafunc.fixturenames.append(fixture)
    metafunc.parametrize(fixture, [pytest.param(Unresolved(f"{metafunc.definition.nodeid}: {message}"), id="error")],
                         indirect=True)


def parametrize(metafunc: pytest.Metafunc) -> None:
    """A test function's parametrization by its marker (pytest_generate_tests): each kind of check
    has its marker and its fixture (a tensor model's, a decoder's, a speech export's)."""
    for marker_name, fixture in (("edge", "edge_model"), ("edge_llm", "edge_llm"), ("edge_asr", "edge_asr")):
        markers = list(metafunc.definition.iter_markers(marker_name))
        if len(markers) > 1:
            unresolved(metafunc, fixture, f"{len(markers)} @pytest.mark.{marker_name} markers apply (on the test, its "
                       "class or module); one marker must say everything, or the nearest would silently win")
        elif markers:
            _parametrize(metafunc, marker_name, fixture, markers[0])
        elif fixture in metafunc.fixturenames:
            needs = {"edge_llm": "model=..., prompts=...", "edge_asr": "model=..., audio=..."}.get(marker_name, "model=...")
            unresolved(metafunc, fixture, f"{fixture} needs @pytest.mark.{marker_name}({needs})")


def _parametrize(metafunc: pytest.Metafunc, marker_name: str, fixture: str, found: pytest.Mark) -> None:
    """The test parametrized over its plans (one per backend, a skip where a backend cannot run it),
    or one Unresolved case naming why it cannot be planned."""
    start_spare(metafunc.config)  # before the session's import, which it overlaps
    edge = edge_session(metafunc.config)
    test_dir = Path(metafunc.definition.path).parent
    try:
        if marker_name == "edge_llm":
            from .run.decoder_plan import plan_decoder_test

            model, test_plans = plan_decoder_test(found.args, found.kwargs, edge.settings, edge.models, test_dir)
        elif marker_name == "edge_asr":
            from .run.speech_plan import plan_speech_test

            model, test_plans = plan_speech_test(found.args, found.kwargs, edge.settings, edge.models, test_dir)
        else:
            from .core.plan import plan_tensor_test

            model, test_plans = plan_tensor_test(found.args, found.kwargs, edge.settings, edge.models, test_dir)
    except EdgeError as exc:
        return unresolved(metafunc, fixture, str(exc))
    if fixture not in metafunc.fixturenames:
        # A marked test that does not ask for the fixture is still parametrized over backends and
        # gets its check on each.
        metafunc.fixturenames.append(fixture)
    params = [pytest.param(plan, id=f"{model.name}-{plan.backend}",
                           marks=[pytest.mark.skip(reason=plan.unavailable)] if plan.unavailable and not plan.required
                           else []) for plan in test_plans]
    if not params:
        what = {"edge_llm": "LLM backend", "edge_asr": "speech backend"}.get(marker_name, "backend")
        params.append(pytest.param(None, id=f"{model.name}-none",
                                   marks=[pytest.mark.skip(reason=f"no {what} selected for this test")]))
    metafunc.parametrize(fixture, params, indirect=True)


def item_plan(item: pytest.Item) -> Plan | None:
    """The plan a collected test was parametrized with (None for one without edge_model)."""
    callspec = getattr(item, "callspec", None)
    plan = callspec.params.get("edge_model") if callspec else None
    if plan is None:  # not an edge test: nothing of the session imported for it
        return None
    from .core.plan import Plan

    return plan if isinstance(plan, Plan) else None


def item_target(item: pytest.Item) -> Target | None:
    """The target a collected test was parametrized with, of any kind: a tensor model's Plan, a
    decoder's LlmTarget, a speech export's SpeechTarget (None for a test of none, or one whose
    parametrization is the Unresolved case naming why it could not be planned)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    found = next((params[f] for f in ("edge_asr", "edge_llm", "edge_model") if params.get(f) is not None), None)
    # A target of any kind says which check runs it (its class's ``kind``); the Unresolved case, or a
    # value a test parametrized its own way, has none. Read off the class: evaluating nothing.
    return found if getattr(type(found), "kind", None) is not None else None


def fixture_target(request: pytest.FixtureRequest, *, required_fails: bool) -> Any:
    """The target an edge fixture's test was parametrized with (the fixture's own kind). The
    Unresolved case is a usage error naming why the test could not be planned; with
    ``required_fails``, a backend --edge-require keeps though it cannot run fails the test here (a
    tensor model's fails in its check instead)."""
    from .core.plan import Unresolved

    target = request.param
    if isinstance(target, Unresolved):
        raise EdgeUsageError(target.message)
    if required_fails and target.unavailable:  # only a required backend gets here: the others were skipped
        pytest.fail(f"{target.backend} is required (--edge-require) but cannot run {target.model.name}: "
                    f"{target.unavailable}", pytrace=False)
    return target


def setup_error_target(item: pytest.Item, error: BaseException, target: Target | None
                       ) -> tuple[Target | Unresolved, str | None] | None:
    """What an edge test that errored at setup, before its check, is reported as: its target (the
    item's, ``target``), or the Unresolved case that names why it could not be planned, and the model
    its marker names (None where it names none by keyword). None where the error is not
    pytest-edge's (a user's fixture failed) or the test is not an edge test."""
    from .core.plan import Unresolved

    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    kind = next((k for k in ("edge_llm", "edge_asr") if k in params), "edge")
    param = params.get(kind if kind != "edge" else "edge_model")
    # A decoder's and a speech export's fixtures fail (pytest.fail) where a required backend cannot run.
    errors = (EdgeError, pytest.fail.Exception) if kind != "edge" else (EdgeError,)
    if not isinstance(error, errors) or (target is None and not isinstance(param, Unresolved)):
        return None
    marker = item.get_closest_marker(kind)
    named = marker.kwargs.get("model") if marker is not None else None
    return param, named if isinstance(named, str) else None
