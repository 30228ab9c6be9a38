"""A FAKE backend for testing the *check logic* of ``pytest_edge/run/`` (tensor_check.py,
decoder_check.py, the session's choice of strategy), not any runtime: its "models" are NumPy
functions computed in-process, so the check strategies can be driven directly, without a runtime
installed and without a worker process (the real :class:`~pytest_edge.run.session.EdgeSession` with
``isolated=False``, whose :class:`~pytest_edge.worker.pool.WorkerPool` serves requests with the real
:class:`~pytest_edge.worker.server.WorkerServer` in this process).

Nothing here stands in for a runtime in a test that claims to test that runtime: a runtime's own
tests load its real artifacts. What this fakes is only "something that computes outputs", so a test
can say exactly which output is wrong, by how much, and at which decoding position.

It is registered the way a third-party distribution registers a backend (an entry point in the
``pytest_edge.backends`` group, as ``tests/edge_helpers.install_backend`` writes one), here on this
process's ``sys.path`` (:func:`registered`), the registry's caches cleared before and after.

The backends (each artifact a small JSON file, so a test writes the model it needs):

- ``fake-double`` (``.double``): y = 2 * x, x float32 of ``size`` elements (``{"size": 4}``);
  ``{"outputs": 0}`` declares no output at all, ``{"size": 0}`` an empty tensor.
- ``fake-double-drift``: the same artifact, y = 2 * x except ``y[DRIFT_AT] += DRIFT``: a second
  runtime of the same model that disagrees with the reference at one known element.
- ``fake-double-int8``: the same, a target that quantizes at load (``Backend.calibrates``): its
  model says in its runtime details which calibration cases it was given.
- ``fake-counter`` (``.counter``): a decoder "language model": the next token is
  ``(last + 1) % vocab`` with peaked logits; an artifact ``{"part_at": k}`` gives
  ``(last + 2) % vocab`` at new-token index ``k`` (0-based), so free-running generation parts
  from ``{"part_at": null}`` at position ``k`` exactly. Its configuration is the hand-written
  ``<stem>.json`` beside the artifact (:func:`write_decoder`). ``fake-counter-text``: the same
  decoders behind an API that gives no logits (``DecoderRuntime.why_no_logits``); it sorts after
  ``fake-counter``, which therefore records the goldens of a ``.counter`` model.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pytest

from pytest_edge.backends import Backend, LoadedModel, TensorBackend, TensorSpec
from pytest_edge.backends.base import CalibratedModel, CalibrationCase, RuntimeDetails
from pytest_edge.backends.decoder import Decoder, DecoderRuntime, Generation, OwnLoopDecoder
from pytest_edge.backends.shapes import LoadShapes

DISTRIBUTION = "pytest-edge-fake-backend"
TENSOR_SUFFIX = ".double"
DECODER_SUFFIX = ".counter"
DRIFT_AT = 2  # the element fake-double-drift gets wrong
DRIFT = 0.5  # by how much (far beyond the default atol/rtol of 1e-4)
VOCAB = 16
PEAK = 8.0  # logits: +PEAK at the chosen token, -PEAK elsewhere


# ------------------------------------------------------------------ tensors: y = 2x


@dataclass(frozen=True)
class CalibratedOn:
    """What the fake int8 target was calibrated on: the source, each case's origin and input names,
    and each case's sum (so a test tells the cases apart)."""

    source: str
    origins: list[str]
    inputs: list[list[str]]
    sums: list[float]


@dataclass(frozen=True)
class Calibrated(RuntimeDetails):
    """The fake int8 target's runtime details, as a toolkit's build options are."""

    calibration: CalibratedOn


class DoubledModel(CalibratedModel):
    """y = 2 * x (plus ``drift`` at ``DRIFT_AT`` for the drifting backend), in NumPy. What it was
    calibrated on (``calibrate``) is said in its ``runtime_details``, as a toolkit's build options are."""

    def __init__(self, size: int, outputs: int, drift: float) -> None:
        self.inputs = [TensorSpec("x", (size,), "float32")]
        self.outputs = [TensorSpec("y", (size,), "float32")][:outputs]
        self.drift = drift
        self.calibration: CalibratedOn | None = None

    def calibrate(self, cases: Sequence[CalibrationCase], source: str) -> None:
        self.calibration = CalibratedOn(source, [case.origin for case in cases], [sorted(case.inputs) for case in cases],
                                        [float(sum(np.sum(a) for a in case.inputs.values())) for case in cases])

    def runtime_details(self) -> "Calibrated | None":
        return Calibrated(self.calibration) if self.calibration is not None else None

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        (x,) = feeds
        y = (2.0 * np.asarray(x, np.float32)).astype(np.float32)
        if self.drift and y.size > DRIFT_AT:
            y[DRIFT_AT] += np.float32(self.drift)
        return [y][:len(self.outputs)]


class DoublingBackend(TensorBackend):
    """A fake tensor backend (see the module): loads a JSON artifact into a :class:`DoubledModel`."""

    suffix = TENSOR_SUFFIX
    runtime_module = "fake_backend"  # this module: "installed" wherever the tests run
    distribution = DISTRIBUTION
    has_delegate = False  # no delegate: the coverage budgets do not apply

    def __init__(self, name: str, drift: float = 0.0, calibrates: bool = False) -> None:
        self.name = name
        self.drift = drift
        self.calibrates = calibrates

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        spec = json.loads(Path(path).read_text())
        return DoubledModel(int(spec.get("size", 4)), int(spec.get("outputs", 1)), self.drift)


def write_doubling(folder: Path, name: str = "m", **spec: Any) -> Path:
    """The artifact ``folder/name.double`` of a y = 2x model (``spec``: size, outputs)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}{TENSOR_SUFFIX}"
    path.write_text(json.dumps({"size": 4, **spec}))
    return path


# ------------------------------------------------------------------ decoders: next = last + 1


class CountingDecoder(Decoder):
    """The next token is ``(last + 1) % VOCAB``, ``+ 2`` at new-token index ``part_at``; logits peaked."""

    def __init__(self, part_at: int | None) -> None:
        self.part_at = part_at
        self.steps = 0

    def reset(self) -> None:
        self.steps = 0

    def step(self, ids: Sequence[int]) -> np.ndarray:
        index, self.steps = self.steps, self.steps + 1  # the first step is the prompt's: new token 0
        token = (int(ids[-1]) + (2 if index == self.part_at else 1)) % VOCAB
        logits = np.full(VOCAB, -PEAK, np.float32)
        logits[token] = PEAK
        return logits


class TextOnlyDecoder(OwnLoopDecoder):
    """The same decoder behind an API that gives tokens and no logits (as LiteRT-LM's Session)."""

    why_no_logits = "a fake whose API gives tokens only"

    def __init__(self, part_at: int | None) -> None:
        self.part_at = part_at

    def reset(self) -> None:
        pass

    def generate_own(self, prompt: Sequence[int], new_tokens: int,
                     clock: Callable[[], float] = time.perf_counter) -> Generation:
        return Generation(list(prompt), counted(prompt, new_tokens, self.part_at), None, 0.0,
                          [0.0] * (new_tokens - 1))


class CountingRuntime(DecoderRuntime):
    """The fake decoder capability: opens a JSON artifact ``{"part_at": k | null}``; ``text_only``:
    a runtime whose decoders expose no logits (``why_no_logits``)."""

    kv_cache = "none (a fake: a NumPy function of the last token)"

    def __init__(self, text_only: bool = False) -> None:
        self.text_only = text_only
        self.why_no_logits = TextOnlyDecoder.why_no_logits if text_only else None

    def open(self, path: Path, config: Any, threads: int) -> Decoder | OwnLoopDecoder:
        part_at = json.loads(Path(path).read_text()).get("part_at")
        return TextOnlyDecoder(part_at) if self.text_only else CountingDecoder(part_at)


class CountingBackend(Backend):
    """A fake decoder backend (see the module)."""

    suffix = DECODER_SUFFIX
    runtime_module = "fake_backend"
    distribution = DISTRIBUTION

    def __init__(self, name: str, text_only: bool = False) -> None:
        self.name = name
        self.decoders = CountingRuntime(text_only)


def decoder_config(max_context: int = 64) -> dict[str, Any]:
    """The hand-written decoder configuration (backends/decoder_config.py's ``<stem>.json``)."""
    return {"vocab_size": VOCAB, "n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "head_dim": 4,
            "max_context": max_context}


def write_decoder(folder: Path, name: str, part_at: int | None = None) -> Path:
    """``folder/name.counter`` (parting at new token ``part_at``) and its ``name.json`` configuration."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}{DECODER_SUFFIX}"
    path.write_text(json.dumps({"part_at": part_at, "name": name}))
    (folder / f"{name}.json").write_text(json.dumps(decoder_config()))
    return path


def counted(prompt: Sequence[int], new_tokens: int, part_at: int | None = None) -> list[int]:
    """What :class:`CountingDecoder` generates greedily after ``prompt``: the test's own oracle."""
    tokens, last = [], int(prompt[-1])
    for index in range(new_tokens):
        last = (last + (2 if index == part_at else 1)) % VOCAB
        tokens.append(last)
    return tokens


# ------------------------------------------------------------------ registration


def backends() -> list[Backend]:
    """The entry point's callable (``fake = fake_backend:backends``)."""
    return [DoublingBackend("fake-double"), DoublingBackend("fake-double-drift", drift=DRIFT),
            DoublingBackend("fake-double-int8", calibrates=True),
            CountingBackend("fake-counter"), CountingBackend("fake-counter-text", text_only=True)]


def _clear_registry() -> None:
    from pytest_edge import backends as registry

    registry._entry_points.cache_clear()
    registry._registered_by.cache_clear()
    registry.all_backends.cache_clear()


@contextlib.contextmanager
def registered(folder: Path) -> Iterator[None]:
    """The fake backends registered in this process as a distribution registers a backend: a
    dist-info in ``folder`` whose entry point names :func:`backends`, ``folder`` on ``sys.path``;
    the registry's caches cleared on the way in and out, so no other test sees them."""
    info = folder / "pytest_edge_fake_backend-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pytest_edge.backends]\nfake = fake_backend:backends\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        _clear_registry()
        try:
            yield
        finally:
            _clear_registry()  # read again on next use, once sys.path is restored: without them
