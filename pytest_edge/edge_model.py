"""``EdgeModel``: the loaded model a test receives from the ``edge_model`` fixture."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from . import codec
from .backends import Coverage, TensorSpec
from .errors import EdgeUsageError
from .golden import Golden
from .accuracy.inputs import generate_case
from .core.plan import Plan
from .measurement.combined import TimedMeasurement

if TYPE_CHECKING:
    from numpy.typing import ArrayLike  # what np.asarray takes: an array, a nested list, a scalar

    from .run.decoder_plan import LlmTarget
    from .run.speech_plan import SpeechTarget
    from .worker.pool import ModelInfo
    from .run.session import EdgeSession


class EdgeModel:
    """A model loaded on one backend, as a test receives it. Loading happens on first use, once
    per (model, backend, threads, shapes) per worker."""

    def __init__(self, session: "EdgeSession", plan: Plan) -> None:
        self._session = session
        self.plan = plan
        self.model = plan.model
        self.backend = plan.backend
        self.spec = plan.marker
        self.test_dir = plan.test_dir

    def __repr__(self) -> str:
        return f"<EdgeModel {self.model.name} on {self.backend}>"

    @property
    def artifact(self) -> Path:
        path = self.plan.artifact
        assert path is not None
        return path

    @property
    def loaded(self) -> "ModelInfo":
        self._session.require(self.plan)
        return self._session.load(self.plan)

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
        """What the runtime says of itself (the record's ``runtime`` block), as the test is given it: its JSON."""
        return codec.to_json(self.loaded.runtime)

    @property
    def golden(self) -> Golden:
        """The golden outputs this test is checked against (refreshed first with --edge-update-golden)."""
        self._session.golden.ensure(self.plan)
        return self._session.golden.golden_for(self.plan)

    def on(self, backend: str) -> "EdgeModel":
        """The same model on another backend (``edge_model.on("onnxruntime-cpu")``), e.g. to check
        that two backends agree on inputs a property test draws."""
        from .backends import get_backend

        get_backend(backend)  # a misspelt name is an error here, not later
        return EdgeModel(self._session, self.plan.on(backend))

    def with_protocol(self, warmup: int | None = None, runs: int | None = None) -> "EdgeModel":
        """The same model measured with other warm-up and run counts."""
        plan = replace(self.plan, warmup=self.plan.warmup if warmup is None else warmup,
                       runs=self.plan.runs if runs is None else runs)
        return EdgeModel(self._session, plan)

    def measure(self, feeds: Sequence[Any] | None = None) -> dict[str, Any]:
        """Timing and memory by the measurement protocol (fresh processes), on ``feeds`` in input
        order or on inputs drawn from the signature; what ``edge_benchmark`` reports. In counted mode
        ``{"counted": ...}``, the record's block (docs/measurement.md)."""
        loaded = self.loaded
        if feeds is None:
            feeds = list(generate_case(loaded.inputs, self.plan.shapes, self._session.settings.seed).values())
        measured = self._session.measure(loaded, feeds, self.plan)
        # The session keeps the typed measurement; a test is given the JSON it documents.
        # (counted mode's type is not imported here: a session that counts nothing does not pay for it)
        return codec.to_json(measured) if isinstance(measured, TimedMeasurement) else {"counted": codec.to_json(measured)}

    def run(self, feeds: Mapping[str, ArrayLike] | Sequence[ArrayLike]) -> dict[str, np.ndarray]:
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


class LlmHandle:
    """The test's decoder on one backend, as a test receives it from the ``edge_llm`` fixture:
    ``generate(prompt, new_tokens)`` gives greedy token ids, ``logits(prompt)`` the first step's."""

    def __init__(self, session: "EdgeSession", target: LlmTarget) -> None:
        from .run.decoder_plan import config_of

        self._session, self.target = session, target
        self.backend = target.backend
        self.config = config_of(target.model, target.artifact)

    def generate(self, prompt: Sequence[int], new_tokens: int | None = None) -> list[int]:
        return self._generate(prompt, new_tokens or self.target.spec.new_tokens).tokens

    def logits(self, prompt: Sequence[int]) -> np.ndarray:
        """The logits the first new token is chosen from."""
        return self._generate(prompt, 1).first_logits

    def _generate(self, prompt: Sequence[int], new_tokens: int) -> Any:
        from .run.decoder_plan import spec_context
        from .llm.marker import check_prompt

        ids = check_prompt(prompt, new_tokens, self.config, f"{self.target.model.name} ({self.backend})")
        return self._session.decoders.generate(self.backend, self.target.artifact, self.config,
                                               self.target.spec.threads, ids, new_tokens,
                                               spec_context(self.target.spec))


class SpeechHandle:
    """The test's speech export on one backend, as a test receives it from the ``edge_asr`` fixture:
    ``transcribe(wav_path)`` gives the greedy token ids of the marker's ``new_tokens`` per window
    (audio longer than one window: each window's, in order, as the check decodes it; the check after
    the body judges every audio file of the marker)."""

    def __init__(self, session: "EdgeSession", target: "SpeechTarget") -> None:
        self._session, self.target = session, target
        self.backend = target.backend

    def transcribe(self, audio: str | Path) -> list[int]:
        from .run.speech_check import SpeechChecker, windows

        checker = self._session._strategy("speech")
        assert isinstance(checker, SpeechChecker)
        recognizer = checker.recognizer(self.backend, self.target.folder, self.target.spec.threads)
        samples = checker.audio(Path(audio), self.backend, recognizer)
        return [token for _, window in windows(samples, recognizer.config)
                for token in recognizer.transcribe(window, self.target.spec.new_tokens).tokens]
