"""What triage needs of the session (load a plan's model, run it, read its intermediates) and the
tolerance it compares intermediates with."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from ..backends import Intermediates
from ..golden import Golden
from ..core.plan import Plan
from ..worker.pool import ModelInfo


class Runner(Protocol):
    """What triage needs of the session: load a plan's model, run it, read its intermediates."""

    def load(self, plan: Plan) -> ModelInfo: ...

    def run(self, info: ModelInfo, feeds: Sequence[Any], reset: bool = True) -> list[np.ndarray]: ...

    def intermediates(self, info: ModelInfo, feeds: Sequence[Any]) -> Intermediates | None: ...

    @property
    def arch(self) -> str | None:
        """This machine's ISA (``x86_64``, ``aarch64``), as its runtimes see it."""
        ...


def first_tolerance(plan: Plan, golden: Golden) -> tuple[float, float]:
    # The first output's tolerance, as first_divergence uses: intermediates have no tolerance of their own.
    tolerance = plan.tolerance(golden.outputs_spec[0].name)
    return float(tolerance.atol or 0.0), float(tolerance.rtol or 0.0)
