"""How a test's exception ends it, kept as its record: a skip with its reason (a device out of
reach, counting unavailable, a borrowed artifact its backend does not convert) or a failure, and
the records of tests that never reached their check (skipped, errored at setup, failed in the
body). The session (run/session.py) is one: it keeps the records and the settings these read."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends import split_device
from ..core.plan import Unresolved
from ..core.record import UNRESOLVED_BACKEND, Record
from ..core.record_blocks import ModelIdentity
from ..core.settings import Settings
from ..core.target import Target
from ..errors import CountingUnavailable, DeviceUnreachable, DoesNotConvert, EdgeCheckFailed, EdgeError


@dataclass(frozen=True)
class Outcome:
    """How an exception met in one test ends it: ``skip`` (the reason) or a failure (None); the
    record kept for it; ``report``: its figures go into the JUnit properties."""

    skip: str | None
    record: Record | None
    report: bool = False


class SettlesOutcomes:
    """The outcomes the plugin reports, for a session that keeps ``records`` under ``settings``."""

    settings: Settings
    records: list[Record]

    def _model(self, plan: Target) -> ModelIdentity:
        return ModelIdentity.of(plan.model.key, plan.artifact, self.settings.rootdir)

    def _keep(self, record: Record) -> Record:
        self.records.append(record)
        return record

    def skipped(self, test_id: str, plan: Target, reason: str) -> Record:
        return self._keep(Record.skipped(test_id, self._model(plan), plan.backend, reason))

    def not_converted(self, test_id: str, plan: Target, reason: str) -> Record:
        return self._keep(Record.not_converted(test_id, self._model(plan), plan.backend, reason))

    def errored(self, test_id: str, plan: Target, error: Exception) -> Record:
        if isinstance(error, EdgeCheckFailed):  # a check that ran and failed: its record is kept already
            return error.record  # type: ignore[return-value] - this session's Record (errors.py names a Protocol)
        return self._keep(Record.errored(test_id, self._model(plan), plan.backend,
                                         str(error)))

    def setup_errored(self, test_id: str, plan: Target | Unresolved, message: str,
                      model: str | None) -> Record:
        """A test that errored before its check ran (its marker or model unresolved: no backend
        yet, ``model`` as the marker names it), kept with the reason."""
        if not isinstance(plan, Unresolved):
            return self._keep(Record.errored(test_id, self._model(plan), plan.backend, message))
        return self._keep(Record.errored(test_id, ModelIdentity(model or "?"),
                                         UNRESOLVED_BACKEND, message))

    def body_failed(self, test_id: str, plan: Target, error: BaseException) -> Record:
        if isinstance(error, EdgeError):  # a bad artifact met in the body: the check could not run
            return self.errored(test_id, plan, error)
        return self._keep(Record.body_failed(test_id, self._model(plan), plan.backend,
                                             error))

    def settle(self, test_id: str, plan: Target, error: BaseException, *, in_body: bool) -> Outcome:
        """What an exception met in a test comes to, kept as that test's record: a skip with its
        reason (an unreachable device or unavailable counting, unless the backend is required; a
        borrowed artifact the backend does not convert, unless the user targets it), or a failure
        (the caller re-raises). ``in_body``: met in the test's body, not in the check after it."""
        if isinstance(error, DeviceUnreachable) or (isinstance(error, CountingUnavailable) and not in_body):
            if not plan.required and not self._merge_gate_needs_counting(plan, error):
                return Outcome(skip=str(error), record=self.skipped(test_id, plan, str(error)))
        elif isinstance(error, DoesNotConvert) and not plan.targeted:
            return Outcome(skip=str(error), record=self.not_converted(test_id, plan, str(error)))
        if in_body and not isinstance(error, DoesNotConvert):
            return Outcome(skip=None, record=self.body_failed(test_id, plan, error))
        if isinstance(error, EdgeError) and not isinstance(error, (DeviceUnreachable, CountingUnavailable)):
            return Outcome(skip=None, record=self.errored(test_id, plan, error), report=True)
        return Outcome(skip=None, record=None)

    def _merge_gate_needs_counting(self, plan: Target, error: BaseException) -> bool:
        """A counted merge gate (a baseline with --edge-count=instructions) that cannot count on
        this machine (no Valgrind, or one that fails) fails its tests: a skipped gate is a green
        merge nobody gated. A device backend, which counted mode never counts, still skips."""
        gated = self.settings.gating
        return (isinstance(error, CountingUnavailable) and gated
                and split_device(plan.backend)[1] is None)
