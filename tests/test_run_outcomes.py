"""run/outcomes.py driven directly: how an exception met in a test ends it, kept as its record,
with a target as any kind's (core.target.Target) and no pytest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_edge.core.models import Model
from pytest_edge.core.plan import Unresolved
from pytest_edge.core.record import UNRESOLVED_BACKEND, Record, Verdict
from pytest_edge.core.settings import Settings
from pytest_edge.errors import BackendError, DeviceUnreachable, DoesNotConvert
from pytest_edge.run.outcomes import SettlesOutcomes


@dataclass(frozen=True)
class _Target:
    model: Model
    backend: str = "litert@pi5"
    artifact: Path | None = None
    required: bool = False
    targeted: bool = False
    kind: str = "tensor"


class _Session(SettlesOutcomes):
    def __init__(self, tmp_path: Path) -> None:
        self.settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path)
        self.records: list[Record] = []


def test_a_device_out_of_reach_skips_unless_required(tmp_path: Path) -> None:
    session, target = _Session(tmp_path), _Target(Model("m", {}))
    skipped = session.settle("t::a", target, DeviceUnreachable("pi5 cannot be reached"), in_body=False)
    assert skipped.skip == "pi5 cannot be reached" and skipped.record.verdict == Verdict.SKIPPED
    required = session.settle("t::b", _Target(Model("m", {}), required=True), DeviceUnreachable("gone"), in_body=False)
    assert required.skip is None and required.record is None  # the caller re-raises: a failure
    assert [r.test for r in session.records] == ["t::a"]


def test_a_borrowed_artifact_not_converted_is_said_unless_targeted(tmp_path: Path) -> None:
    session = _Session(tmp_path)
    said = session.settle("t::a", _Target(Model("m", {})), DoesNotConvert("no CUMSUM"), in_body=True)
    assert said.skip == "no CUMSUM" and said.record.verdict == Verdict.DOES_NOT_CONVERT
    targeted = session.settle("t::b", _Target(Model("m", {}), targeted=True), DoesNotConvert("no CUMSUM"),
                              in_body=False)
    assert targeted.skip is None and targeted.report and targeted.record.verdict == Verdict.ERROR


def test_a_body_failure_and_a_setup_error_are_kept_with_the_reason(tmp_path: Path) -> None:
    session, target = _Session(tmp_path), _Target(Model("m", {}))
    body = session.settle("t::a", target, ValueError("user code"), in_body=True)
    assert body.skip is None and body.record.verdict == Verdict.FAILED
    bad = session.settle("t::b", target, BackendError("m.tflite (litert): truncated"), in_body=True)
    assert bad.record.verdict == Verdict.ERROR and "truncated" in str(bad.record.to_json())
    unplanned = session.setup_errored("t::c", Unresolved("t::c: no model 'x'"), "no model 'x'", "x")
    assert (unplanned.model.name, unplanned.backend, unplanned.verdict) == ("x", UNRESOLVED_BACKEND, Verdict.ERROR)
