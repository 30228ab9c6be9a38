"""The kinds of check (``pytest_edge/run/kinds.py``): the one protocol (``Check``) every kind's
strategy implements, and the session's choice of strategy by a target's ``kind``. Its promises: every
kind a target can have (tensor, compiled, decoder, speech) has a strategy of its own that speaks the
protocol, and the session owns the one ending they share (the verdict, the record kept, the failure
raised with every violation the strategy returned). The ending is driven with a FAKE backend for
testing the check's logic (tests/fake_backend.py), not a runtime."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Iterator

import pytest
from fake_backend import registered, write_decoder, write_doubling

from pytest_edge.backends import compile_targets
from pytest_edge.core.marker import MarkerSpec
from pytest_edge.core.record import Verdict
from pytest_edge.core.settings import Settings
from pytest_edge.errors import EdgeCheckFailed
from pytest_edge.llm.marker import parse_llm_marker
from pytest_edge.run.compiled_check import CompiledChecker
from pytest_edge.run.decoder_check import LlmChecker
from pytest_edge.run.decoder_plan import LlmTarget, resolve_llm_model
from pytest_edge.run.kinds import Check
from pytest_edge.run.session import EdgeSession
from pytest_edge.run.speech_check import SpeechChecker
from pytest_edge.run.speech_plan import SpeechTarget
from pytest_edge.run.tensor_check import TensorCheck

# Each kind and the strategy that checks it (docs/architecture.md, "A check's life").
STRATEGIES: dict[str, type] = {"tensor": TensorCheck, "compiled": CompiledChecker, "decoder": LlmChecker,
                               "speech": SpeechChecker}


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[EdgeSession]:
    """A session (worker in this process) recording goldens, with the fake backends registered and
    models ``m.double`` (y = 2x) and ``ref.counter`` / ``cand.counter`` (a decoder, and one that parts
    from it at new token 1)."""
    with registered(tmp_path / "plugins"):
        write_doubling(tmp_path / "models", "m")
        write_decoder(tmp_path / "models", "ref")
        write_decoder(tmp_path / "models", "cand", part_at=1)
        session = EdgeSession(Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, isolated=False,
                                       model_dirs=[tmp_path / "models"], update_golden=True,
                                       reference_backend="fake-double"))
        try:
            yield session
        finally:
            session.close()


def kinds_of_targets(edge: EdgeSession) -> dict[str, str]:
    """The kind of each sort of target the plugin plans: a Plan on a runtime and on a compile-time
    target (core/plan.py), an edge_llm test's LlmTarget, an edge_asr test's SpeechTarget."""
    root = edge.settings.rootdir
    found = {"Plan on a runtime": edge.plan(edge.resolve("m", root), "fake-double", MarkerSpec(), root).kind,
             "LlmTarget": LlmTarget.kind, "SpeechTarget": SpeechTarget.kind}
    compilers = [name for name, backend in compile_targets().items() if backend.compile_only]
    if compilers:  # the registry's own compile-time targets (vela's), planned on a model of theirs
        from pytest_edge.core.models import Model
        from pytest_edge.core.plan import Plan

        found["Plan on a compile-time target"] = Plan(Model("npu", {".tflite": root / "npu.tflite"}), compilers[0],
                                                      root, MarkerSpec()).kind
    return found


def test_every_kind_a_target_can_have_has_a_strategy_of_its_own(edge: EdgeSession) -> None:
    """Each target's kind is one the session knows, picks the strategy of that kind (one per kind,
    made once per session), and no two kinds share a strategy."""
    kinds = kinds_of_targets(edge)
    assert set(kinds.values()) <= set(STRATEGIES), kinds
    assert len(kinds) < 4 or set(kinds.values()) == set(STRATEGIES), kinds
    for kind, strategy in STRATEGIES.items():
        chosen = edge._strategy(kind)
        assert isinstance(chosen, strategy), (kind, chosen)
        assert edge._strategy(kind) is chosen  # one per session: it holds the session's state (loads, goldens)
    assert len({id(edge._strategy(kind)) for kind in STRATEGIES}) == len(STRATEGIES)


@pytest.mark.parametrize("kind", list(STRATEGIES))
def test_each_strategy_speaks_the_check_protocol(kind: str) -> None:
    """``check(test_id, target, step) -> tuple[Record, list[str]]``: the protocol's parameters in its
    order (the target's own name may say its type), with the protocol's annotations."""
    protocol = inspect.signature(Check.check)
    own = inspect.signature(STRATEGIES[kind].check)
    assert len(own.parameters) == len(protocol.parameters) == 4
    for (name, mine), (wanted, theirs) in zip(own.parameters.items(), protocol.parameters.items()):
        if wanted != "target":
            assert (name, mine.annotation) == (wanted, theirs.annotation)
    assert own.return_annotation == protocol.return_annotation == "tuple[Record, list[str]]"


def test_the_protocol_is_one_method() -> None:
    """A new kind implements ``check`` and nothing else the session calls."""
    assert [name for name in vars(Check) if not name.startswith("_")] == ["check"]


def test_a_tensor_checks_violations_end_in_one_failure_and_its_record_is_kept(edge: EdgeSession) -> None:
    """The ending the session owns: the strategy's violations, all of them, raised as one
    EdgeCheckFailed carrying the record, which the session keeps with the verdict failed."""
    root = edge.settings.rootdir
    model = edge.resolve("m", root)
    passed = edge.check("t::ok", edge.plan(model, "fake-double", MarkerSpec(), root))
    assert passed.verdict is Verdict.PASSED and edge.records[-1] is passed
    with pytest.raises(EdgeCheckFailed) as raised:
        edge.check("t::drift", edge.plan(model, "fake-double-drift", MarkerSpec(), root))
    assert len(raised.value.violations) == 2  # the mismatch and where its outputs were written
    assert raised.value.violations[0].startswith("fake-double-drift: output 'y': 1 of 4 elements differ")
    kept = edge.records[-1]
    assert kept.verdict is Verdict.FAILED and kept.violations == raised.value.violations
    assert raised.value.record is kept


def test_a_decoders_violations_take_the_same_ending(edge: EdgeSession) -> None:
    """The decoder kind ends the same way: its record kept failed, its violations raised as one."""
    folder = edge.settings.rootdir / "models"
    spec = parse_llm_marker((), {"model": "ref", "prompts": [[3]], "new_tokens": 4})
    ref = edge.models.claim(resolve_llm_model("ref", [folder], [folder]))
    cand = edge.models.claim(resolve_llm_model("cand", [folder], [folder]))
    assert edge.check("t::ref", LlmTarget(spec, ref, "fake-counter")).verdict is Verdict.PASSED
    edge.settings.update_golden = False
    with pytest.raises(EdgeCheckFailed) as raised:
        edge.check("t::cand", LlmTarget(spec, cand, "fake-counter", reference=ref))
    (violation,) = raised.value.violations
    assert "first difference at new token 1 (golden 5, got 6)" in violation
    assert edge.records[-1].verdict is Verdict.FAILED and edge.records[-1].test == "t::cand"
