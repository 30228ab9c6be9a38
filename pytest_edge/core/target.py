"""What every kind of check is given: one model on one backend (:class:`Target`). A tensor model's
``core.plan.Plan``, a decoder's ``run.decoder_plan.LlmTarget`` and a speech export's
``run.speech_plan.SpeechTarget`` each are one, with what their kind needs besides; the session,
the plugin's hooks and the reports of a test that did not run read a target through this alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .models import Model


class Target(Protocol):
    """One test's model on one backend, as a test's parametrization carries it."""

    @property
    def model(self) -> Model:
        """The model under test."""
        ...

    @property
    def backend(self) -> str:
        """The backend it runs on (``name`` or ``name@device``)."""
        ...

    @property
    def kind(self) -> str:
        """Which check runs it (run.kinds): "tensor", "compiled", "decoder" or "speech"."""
        ...

    @property
    def artifact(self) -> Path | None:
        """The file the backend reads (what the record names and hashes); None where it has none."""
        ...

    @property
    def reference(self) -> Model | None:
        """``reference=``: the model whose golden this one is judged against (None: its own)."""
        ...

    @property
    def golden_model(self) -> Model:
        """The model that owns the golden: the reference, else the model."""
        ...

    @property
    def unavailable(self) -> str | None:
        """Why the backend cannot run here (a skip, or a --edge-require failure); None where it can."""
        ...

    @property
    def required(self) -> bool:
        """--edge-require names the backend: what would skip the test fails it."""
        ...

    @property
    def targeted(self) -> bool:
        """The user named this backend: a borrowed artifact it does not convert fails the test."""
        ...
