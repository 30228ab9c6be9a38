"""The check of a compile-time target (docs/npu.md), the third kind of the session's check beside a
tensor model's (:mod:`.pipeline`) and a decoder's (:mod:`.decoder_check`): the compiler's result
judged by the coverage, memory and estimate budgets and, with a baseline, the gate on its placement;
no golden is read and nothing is timed (nothing executes). Returns the record and every violation;
the session keeps it."""

from __future__ import annotations

from pathlib import Path
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from . import pipeline
from ..backends import get_backend
from ..core.plan import Plan
from ..core.record import Record
from ..core.settings import Settings
from ..errors import BackendError, EdgeUsageError

if TYPE_CHECKING:  # made by the check that gates
    from ..backends.compiled import Compilation
    from ..judging.baseline import BaselineChoice
    from ..judging.gate import GateResult


def _compiles(name: str) -> bool:
    """Whether edge_compile_options' line for ``name`` names a compile-time target; an unknown name is
    a usage error naming the option."""
    from ..errors import UnknownBackend

    try:
        return get_backend(name).compile_only
    except UnknownBackend as error:
        raise EdgeUsageError(f"edge_compile_options: {error}") from None


def confined_config(spec: str, rootdir: Path, backend: str) -> Path:
    """edge_compile_options' ``config=`` as ``model=`` is confined: relative to the project's root and
    inside it, also once its links are followed (an absolute path, ``../`` or a link to a file
    outside is refused, nothing there is read)."""
    from ..core.models import refuse_outside

    what = f"edge_compile_options {backend} config"
    if Path(spec).is_absolute():
        raise EdgeUsageError(f"{what}={spec!r}: an absolute path; name the file relative to the project's root "
                             f"({rootdir})")
    refuse_outside(spec, [rootdir], (), what)
    path = rootdir / spec
    real, root = path.resolve(), rootdir.resolve()
    if not real.is_relative_to(root):
        raise EdgeUsageError(f"{what}={spec!r} leads to {real}, outside the project's root ({root}): refused, "
                             "nothing there is read")
    return path


class CompiledChecker:
    """Session-wide: each artifact compiled once for each compile-time target, with its
    edge_compile_options."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._compiled: dict[tuple[str, str], Compilation] = {}  # (artifact, target) -> the compiler's result

    def compiled(self, backend: str, artifact: Path) -> Compilation:
        """``artifact`` compiled for the compile-time target ``backend`` with its edge_compile_options,
        once per session (docs/npu.md)."""
        unknown = sorted(name for name in self.settings.compile_options if not _compiles(name))
        if unknown:
            raise EdgeUsageError(f"edge_compile_options names {', '.join(unknown)}, which compile nothing; "
                                 "its lines are for compile-time targets (docs/npu.md)")
        key = (str(artifact.resolve()), backend)
        if key not in self._compiled:
            target = get_backend(backend)
            if target.unavailable_reason():
                raise BackendError(f"{backend}: {target.unavailable_reason()}")
            options = dict(self.settings.compile_options.get(backend, {}))
            if "config" in options:  # a compiler's configuration file, inside the project's root
                options["config"] = str(confined_config(options["config"], self.settings.rootdir, backend))
            assert target.compiler is not None  # a compiled target's backend is a compile-time one
            self._compiled[key] = target.compiler.compile(artifact, options, self.settings.timeout_s)
        return self._compiled[key]

    def check(self, test_id: str, plan: Plan, step: Callable[[str], None]) -> tuple[Record, list[str]]:
        """The record of ``plan`` on its compile-time target and its violations (the session concludes it).
        ``step``: says what is being done, for the message of an unexpected exception."""
        artifact = plan.artifact
        if artifact is None or not artifact.is_file():
            missing = get_backend(plan.backend).missing_artifact(plan.model.name) if artifact is None else \
                f"artifact {artifact} does not exist"
            raise BackendError(f"{plan.backend}: {missing}")
        step("compile")
        compiled = self.compiled(plan.backend, artifact)
        step("check the compiler's result for")
        findings = pipeline.compiled_budgets(plan, compiled, self.settings.rootdir)
        record = pipeline.compiled_record(test_id, plan, compiled, get_backend(plan.backend).distribution,
                                          self.settings.rootdir)
        record.budget_findings = findings
        violations = [finding.message for finding in findings]
        gate = self.gate(plan, record, step)
        violations += pipeline.gate_into(record, gate, self.settings)
        return record, violations  # the session's one ending concludes it

    def gate(self, plan: Plan, record: Record, step: Callable[[str], None] = lambda _: None) -> GateResult:
        """The merge gate on the compiler's result, against the baseline the one rule chooses: the
        twin compiled alike and made into the record a stored report would hold (so A/B and stored
        mode judge the same figures: placement, memories, estimate, size), or the stored record."""
        from ..judging.baseline import choose_baseline, gated
        from ..judging.gate import GateResult

        assert plan.artifact is not None
        choice = choose_baseline(self.settings, plan.model, plan.artifact, record.test, plan.backend)
        return gated(choice, lambda choice: self._judge(plan, record, choice, step)) or GateResult()

    def _judge(self, plan: Plan, record: Record, choice: BaselineChoice, step: Callable[[str], None]) -> GateResult:
        """The gate against the twin, compiled alike, or the stored record."""
        from ..judging.baseline import twin_figures
        from ..judging.figures import GateFigures

        assert plan.artifact is not None
        if choice.twin is not None:
            step(f"compile the baseline twin {choice.source} of")
            theirs = self.compiled(plan.backend, choice.twin)
            # The twin as a model of the same key whose artifact for this target is the twin.
            twin_model = replace(plan.model, artifacts={**plan.model.artifacts, plan.artifact.suffix: choice.twin})
            twin_record = pipeline.compiled_record(record.test, replace(plan, model=twin_model), theirs,
                                                   get_backend(plan.backend).distribution, self.settings.rootdir)
            theirs_json = twin_record.to_json()
        else:
            assert choice.stored is not None  # neither a twin nor new: the stored report's record
            twin_record, theirs_json = None, choice.stored.to_json()
        gate = pipeline.compiled_gate(record, GateFigures.from_json(theirs_json, source=choice.source), choice.source,
                                      choice.paired, self.settings.max_regression)
        if gate.summary is not None and twin_record is not None:  # for the pages' "against the baseline" (ab_baseline)
            gate.summary.twin = twin_figures(twin_record)
        return gate
