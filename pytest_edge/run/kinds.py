"""The one protocol of a check's kind: a tensor model on a runtime (:mod:`.tensor_check`), a
compile-time target (:mod:`.compiled_check`), a decoder (:mod:`.decoder_check`). Each returns its
record and every violation; the session picks the strategy by the target's ``kind`` and owns the
one ending they share (restarts, verdict, the record kept, the failure raised). A new kind (speech,
an executed NPU simulator) is a strategy and a ``kind``, not a fourth copy of the ending."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from ..core.record import Record
    from ..core.target import Target


class Check(Protocol):
    def check(self, test_id: str, target: Target, step: Callable[[str], None]) -> tuple[Record, list[str]]:
        """``target``'s record and its violations; ``step(what)`` says what is being done, for the
        message of an exception nobody foresaw."""
        ...
