"""The tensor check strategy (``pytest_edge/run/tensor_check.py``, ``TensorCheck``) driven directly,
with a FAKE backend for testing the check's logic (tests/fake_backend.py: y = 2x in NumPy, no
runtime): the real session (``EdgeSession`` as its ``TensorRunner``, isolation off, so the real
worker server answers in this process), the real golden store and comparison. What is faked is only
"a runtime that computes outputs", so each test knows the exact figure a message must name.

The end-to-end runs of the same path on real runtimes, through pytest, are tests/test_plugin.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from fake_backend import DRIFT, DRIFT_AT, registered, write_doubling

from pytest_edge.checks import Finding
from pytest_edge.core.marker import parse_marker
from pytest_edge.core.plan import Plan
from pytest_edge.core.record import Record
from pytest_edge.core.record_blocks import InputTensor
from pytest_edge.core.settings import Settings
from pytest_edge.errors import EdgeError, GoldenError
from pytest_edge.run.session import EdgeSession
from pytest_edge.run.tensor_check import TensorCheck

LOAD_TO_COMPARE = ["load", "check the delegate coverage of"]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project with the fake backends registered and ``models/m.double`` (y = 2x, four floats)."""
    with registered(tmp_path / "plugins"):
        write_doubling(tmp_path / "models", "m")
        yield tmp_path


def new_session(project: Path, update_golden: bool) -> EdgeSession:
    """The real session, its worker in this process, goldens recorded on ``fake-double``."""
    return EdgeSession(Settings(golden_dir=project / "golden", rootdir=project, isolated=False,
                                model_dirs=[project / "models"], update_golden=update_golden,
                                reference_backend="fake-double"))


@pytest.fixture
def edge(project: Path) -> Iterator[EdgeSession]:
    """A session that records the golden of each test it checks (--edge-update-golden)."""
    session = new_session(project, update_golden=True)
    try:
        yield session
    finally:
        session.close()


def plan_of(edge: EdgeSession, backend: str, **marker: Any) -> Plan:
    """``@pytest.mark.edge(model="m", **marker)`` on ``backend``, planned as the plugin plans it."""
    spec = parse_marker((), {"model": "m", **marker})
    return edge.plan(edge.resolve("m", edge.settings.rootdir), backend, spec, edge.settings.rootdir)


def run_check(edge: EdgeSession, plan: Plan) -> tuple[Record, list[str], list[str]]:
    """The strategy's result and the steps it said, in order."""
    steps: list[str] = []
    record, violations = TensorCheck(edge).check("tests/test_m.py::test_m", plan, steps.append)
    return record, violations, steps


def test_a_golden_that_matches_passes_with_no_violations_and_a_typed_record(edge: EdgeSession) -> None:
    """The golden recorded on the reference backend, compared on it: no violation; what comes back
    is a ``Record`` (accuracy figures of one case, exact) and a list of strings, with the steps said
    in the order the module documents (coverage before the golden, the golden before the compare)."""
    record, violations, steps = run_check(edge, plan_of(edge, "fake-double"))
    assert violations == []
    assert isinstance(record, Record) and isinstance(violations, list)
    assert record.checked and record.backend == "fake-double" and record.test == "tests/test_m.py::test_m"
    assert record.accuracy is not None
    assert record.accuracy.reference == "fake-double" and record.accuracy.cases == 1
    assert record.accuracy.max_abs_err == 0.0 and record.accuracy.cosine == 1.0
    assert record.budget_findings == [] and isinstance(record.budget_findings, list)
    assert record.input == {"x": InputTensor([4], "float32")}  # typed (core/record_blocks.py)
    assert steps == [*LOAD_TO_COMPARE, "refresh the golden of", "compare"]
    # Not measured (no budget, no gate): nothing timed is invented.
    assert record.latency_ms is None and record.measured_runs is None


def test_the_golden_holds_the_fake_models_known_function(edge: EdgeSession) -> None:
    """What the check compares against is the reference's outputs as recorded: y = 2x exactly,
    read back from the store (a sanity check of the fake, so the figures below are known)."""
    plan = plan_of(edge, "fake-double")
    run_check(edge, plan)
    (case,) = edge.golden.golden_for(plan).cases
    np.testing.assert_array_equal(case.outputs["y"], 2 * case.inputs["x"])


def test_a_stored_golden_is_read_not_rewritten_and_still_passes(project: Path) -> None:
    """A second session without --edge-update-golden reads what the first one recorded (the step
    says "read"), and the same backend still passes against it."""
    first = new_session(project, update_golden=True)
    try:
        run_check(first, plan_of(first, "fake-double"))
    finally:
        first.close()
    meta = next((project / "golden").rglob("meta.json"))
    written = meta.stat().st_mtime_ns
    second = new_session(project, update_golden=False)
    try:
        record, violations, steps = run_check(second, plan_of(second, "fake-double"))
    finally:
        second.close()
    assert violations == [] and steps == [*LOAD_TO_COMPARE, "read the golden of", "compare"]
    assert meta.stat().st_mtime_ns == written


def test_a_perturbed_output_fails_naming_the_output_and_both_figures(edge: EdgeSession, project: Path) -> None:
    """``fake-double-drift`` runs the same artifact but adds 0.5 to y[2]: the check fails naming the
    backend, the output, the element, the value it got and the golden's (9 significant digits, as
    the message prints them), the max abs error; the obtained outputs are written where it says."""
    reference = plan_of(edge, "fake-double")
    run_check(edge, reference)  # records the golden
    golden = float(edge.golden.golden_for(reference).cases[0].outputs["y"][DRIFT_AT])
    got = float(np.float32(golden) + np.float32(DRIFT))

    record, violations, _ = run_check(edge, plan_of(edge, "fake-double-drift"))
    mismatch, obtained = violations
    assert mismatch.startswith("fake-double-drift: output 'y': 1 of 4 elements differ beyond atol=0.0001, rtol=0.0001")
    assert f"worst at index ({DRIFT_AT},): got {got:.9g}, golden {golden:.9g}" in mismatch
    assert "max abs err 0.5," in mismatch
    assert obtained.startswith("fake-double-drift: obtained outputs of case 0 written to ")
    written = obtained.removeprefix("fake-double-drift: obtained outputs of case 0 written to ").split(" (")[0]
    assert (project / written).is_file()
    with np.load(project / written) as saved:
        assert any(np.float32(got) in saved[name] for name in saved.files)
    assert isinstance(record, Record) and record.accuracy is not None
    assert record.accuracy.max_abs_err == pytest.approx(DRIFT, rel=1e-6)
    assert record.accuracy.reference == "fake-double"


def test_violations_come_accuracy_first_then_the_budgets_as_typed_findings(edge: EdgeSession) -> None:
    """The module's promise: every violation, in the order a reader needs them (accuracy first). A
    size budget the 20-byte artifact exceeds is a violation after the mismatch, and the record keeps
    it as a ``checks.Finding`` naming the budget's keyword and figures."""
    run_check(edge, plan_of(edge, "fake-double"))
    record, violations, _ = run_check(edge, plan_of(edge, "fake-double-drift", max_artifact_mb=1e-6))
    assert violations[0].startswith("fake-double-drift: output 'y': 1 of 4 elements differ")
    assert violations[1].startswith("fake-double-drift: obtained outputs of case 0 written to ")
    (finding,) = record.budget_findings
    assert isinstance(finding, Finding)
    assert finding.check == "max_artifact_mb" and finding.budget == 1e-6 and finding.unit == "MB"
    assert finding.value is not None and finding.value > finding.budget
    assert violations[2:] == [finding.message]
    assert finding.message.startswith("fake-double-drift: artifact models/m.double is ")


def test_a_budget_alone_fails_a_matching_model(edge: EdgeSession) -> None:
    """Outputs that match do not hide a budget: the only violation is the finding's message."""
    record, violations, _ = run_check(edge, plan_of(edge, "fake-double", max_artifact_mb=1e-6))
    assert violations == [f.message for f in record.budget_findings] and len(violations) == 1


def test_no_golden_is_an_error_naming_the_model_never_a_pass(project: Path) -> None:
    """Without a recorded golden and without --edge-update-golden, the check compares nothing and
    says so: a GoldenError naming the model, raised from the golden step."""
    session = new_session(project, update_golden=False)
    steps: list[str] = []
    try:
        with pytest.raises(GoldenError, match=r"no golden outputs for model 'm' \(looked for .*meta\.json\)"):
            TensorCheck(session).check("t", plan_of(session, "fake-double"), steps.append)
    finally:
        session.close()
    assert steps[-1] == "read the golden of"


def test_a_changed_artifact_makes_its_golden_stale_an_error_naming_it(project: Path) -> None:
    """The golden speaks for the artifact it was recorded from: the artifact edited afterwards is a
    GoldenError naming its file, not a comparison against outputs of another model."""
    first = new_session(project, update_golden=True)
    try:
        run_check(first, plan_of(first, "fake-double"))
    finally:
        first.close()
    write_doubling(project / "models", "m", size=4, edited=True)
    second = new_session(project, update_golden=False)
    try:
        with pytest.raises(GoldenError, match=r"golden for 'm' is stale: \S+/models/m\.double has sha256"):
            run_check(second, plan_of(second, "fake-double"))
    finally:
        second.close()


def test_a_check_that_compared_nothing_is_not_a_silent_pass(edge: EdgeSession, project: Path) -> None:
    """A model with no outputs has nothing to compare: the check must say so, not pass."""
    write_doubling(project / "models", "m", outputs=0)
    try:
        record, violations, _ = run_check(edge, plan_of(edge, "fake-double-drift"))
    except EdgeError:
        return  # said as the test's error: nothing silent
    assert record.accuracy is not None and record.accuracy.max_abs_err is None  # nothing was compared...
    assert violations == ["fake-double-drift: no output was compared: the golden of m holds 1 case(s) of 0 output(s)"]
