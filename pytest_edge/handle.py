"""``EdgeModel``: the loaded model a test receives from the ``edge_model`` fixture."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .backends import Coverage, TensorSpec, get_backend
from .errors import EdgeError, EdgeUsageError
from .golden import Golden
from .models import Model
from .options import EdgeSpec

if TYPE_CHECKING:
    from .session import EdgeSession, Loaded


class EdgeModel:
    """A model loaded on one backend. Loading happens on first use, once per (model, backend)."""

    def __init__(self, session: "EdgeSession", model: Model, backend: str, spec: EdgeSpec,
                 test_dir: Path | None = None, unavailable: str | None = None) -> None:
        self._session = session
        self.model = model
        self.backend = backend
        self.spec = spec
        self.test_dir = test_dir
        self.unavailable = unavailable  # why the backend cannot run, for a test --edge-require keeps

    def __repr__(self) -> str:
        return f"<EdgeModel {self.model.name} on {self.backend}>"

    @property
    def artifact(self) -> Path:
        path = self.model.artifact(get_backend(self.backend).suffix)
        assert path is not None
        return path

    @property
    def loaded(self) -> "Loaded":
        if self.unavailable:
            raise EdgeError(f"{self.backend} is required (--edge-require) but unavailable: {self.unavailable}")
        return self._session.load(self.model, self.backend, self.spec)

    @property
    def inputs(self) -> list[TensorSpec]:
        return self.loaded.inputs

    @property
    def outputs(self) -> list[TensorSpec]:
        return self.loaded.outputs

    @property
    def coverage(self) -> Coverage | None:
        return self.loaded.coverage

    @property
    def runtime(self) -> dict[str, Any]:
        return self.loaded.runtime

    @property
    def golden(self) -> Golden:
        return self._session.golden_for(self.model, self.spec, self.artifact, self.test_dir)

    def run(self, feeds: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
        """Run once; ``feeds`` by input name (or in input order). Returns outputs by name."""
        loaded = self.loaded
        names = [s.name for s in loaded.inputs]
        if isinstance(feeds, Mapping):
            unknown = sorted(set(feeds) - set(names))
            missing = [n for n in names if n not in feeds]
            if unknown or missing:
                raise EdgeUsageError(f"{self.backend}: {loaded.artifact} takes inputs {names}; "
                                     f"got {sorted(feeds)}")
            ordered = [feeds[n] for n in names]
        else:
            ordered = list(feeds)
        outputs = self._session.run(loaded, ordered)
        return {s.name: out for s, out in zip(loaded.outputs, outputs)}

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """``edge_model(x)``: one array for a one-output model, else a tuple in output order."""
        outputs = list(self.run(kwargs if kwargs else list(args)).values())
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
