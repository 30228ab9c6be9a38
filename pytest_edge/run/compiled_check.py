"""The check of a compile-time target (docs/npu.md), the third kind of the session's check beside a
tensor model's (:mod:`.pipeline`) and a decoder's (:mod:`.decoder_check`): the compiler's result
judged by the coverage, memory and estimate budgets and, with a baseline, the gate on its placement;
no golden is read and nothing is timed (nothing executes). Returns the record and every violation;
the session keeps it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import pipeline
from ..backends import get_backend
from ..backends.compiled import Compilation
from ..core.plan import Plan
from ..core.record import Record
from ..core.settings import Settings
from ..core.sizes import artifact_size
from ..errors import BackendError, EdgeUsageError

if TYPE_CHECKING:  # made by the session when a check first needs it
    from ..judging.measurer import Measurer


class CompiledChecker:
    """Session-wide: each artifact compiled once for each compile-time target, with its
    edge_compile_options."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._compiled: dict[tuple[str, str], Compilation] = {}  # (artifact, target) -> the compiler's result

    def compiled(self, backend: str, artifact: Path) -> Compilation:
        """``artifact`` compiled for the compile-time target ``backend`` with its edge_compile_options,
        once per session (docs/npu.md)."""
        unknown = sorted(name for name in self.settings.compile_options if not get_backend(name).compile_only)
        if unknown:
            raise EdgeUsageError(f"edge_compile_options names {', '.join(unknown)}, which compile nothing; "
                                 "its lines are for compile-time targets (docs/npu.md)")
        key = (str(artifact.resolve()), backend)
        if key not in self._compiled:
            target = get_backend(backend)
            if target.unavailable_reason():
                raise BackendError(f"{backend}: {target.unavailable_reason()}")
            options = dict(self.settings.compile_options.get(backend, {}))
            if "config" in options:  # a compiler's configuration file, named from the project's root
                options["config"] = str(self.settings.rootdir / options["config"])
            self._compiled[key] = target.compile(artifact, options, self.settings.timeout_s)
        return self._compiled[key]

    def check(self, test_id: str, plan: Plan, measurer: Callable[[], Measurer],
              step: Callable[[str], None]) -> tuple[Record, list[str]]:
        """The concluded record of ``plan`` on its compile-time target and its violations.
        ``measurer``: the session's (the A/B twin, a new model's gate); ``step``: says what is being
        done, for the message of an unexpected exception."""
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
        twin = measurer().baseline_twin(plan.model, artifact)
        if twin is not None:
            theirs = self.compiled(plan.backend, twin)
            baseline: dict[str, Any] | None = {"backend": plan.backend, "coverage": theirs.coverage.to_json(),
                                               "artifact_bytes": artifact_size(twin, plan.backend)[0]}
            source = str(Path(twin).relative_to(self.settings.rootdir)) if twin.is_relative_to(self.settings.rootdir) \
                else str(twin)
        else:
            from ..judging.baseline import find_baseline

            stored = find_baseline(self.settings.baseline, record.to_json())
            baseline, source = (dict(stored) if stored is not None else None), (stored or {}).get("test", "?")
        if baseline is None and (self.settings.baseline_models is not None or self.settings.baseline is not None):
            # New in this change (no twin, no stored record): listed as new, as a measured model is.
            gate = measurer().gate_new(plan, artifact, record.to_json())
        else:
            gate = pipeline.compiled_gate(record, baseline, source, twin is not None, self.settings.max_regression)
        violations += pipeline.gate_into(record, gate, self.settings)
        return record.conclude(violations), violations
