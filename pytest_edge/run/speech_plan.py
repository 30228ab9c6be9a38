"""The plan of an ``edge_asr`` test (docs/speech.md): ``@pytest.mark.edge_asr(model=..., audio=[...],
new_tokens=..., reference=..., **budgets)`` (the budgets: the rows of :data:`pytest_edge.checks.BUDGETS`
of ``EDGE_ASR``, parsed by the table's parsers) parsed into a :class:`SpeechSpec`, its
export folder resolved, and one :class:`SpeechTarget` per speech backend (the ``edge_asr``
fixture's parametrization value), with why it cannot run here. The target's ``kind`` is
``"speech"``: the session runs it with :class:`~pytest_edge.run.speech_check.SpeechChecker`."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..backends import get_backend, speech_backends as registered_speech_backends
from ..backends.speech import Recognizer, SpeechRuntime
from ..checks import EDGE_ASR, budgets_for
from ..errors import EdgeError, EdgeUsageError
from ..core.models import Model, ModelKeys
from ..core.plan import key_bases, search_dirs
from ..core.record_blocks import RuntimeIdentity
from ..core.settings import Settings
from ..units import parse_int, shown


def speech_backends() -> list[str]:
    """The names of the backends that recognize speech, in registry order."""
    return list(registered_speech_backends())


def _speech(backend: str) -> SpeechRuntime:
    found = get_backend(backend).speech
    if found is None:
        raise KeyError(f"{backend} recognizes no speech")
    return found


def speech_files(backend: str) -> tuple[str, ...]:
    """What an export folder holds for ``backend`` (the first: what the record names)."""
    return _speech(backend).files


def why_not(backend: str) -> str | None:
    """Why ``backend`` cannot run speech here (its runtime not installed), or None."""
    _speech(backend)
    return get_backend(backend).unavailable_reason()


def runtime_info(backend: str) -> RuntimeIdentity:
    """The record's ``runtime``: ``backend``'s distribution and its version."""
    runtime = get_backend(backend)
    return RuntimeIdentity(runtime.distribution, runtime.runtime_version())


def missing_files(backend: str, folder: Path) -> list[str]:
    """The files of ``backend``'s export that ``folder`` lacks."""
    return [name for name in speech_files(backend) if not (folder / name).is_file()]


def open_recognizer(backend: str, folder: Path, threads: int) -> Recognizer:
    """``backend``'s recognizer of the export in ``folder``."""
    return _speech(backend).open(folder, threads)


@dataclass(frozen=True)
class SpeechSpec:
    model: str
    audio: tuple[str, ...]
    new_tokens: int = 16
    # The budgets this marker sets, by keyword: rows of checks.BUDGETS (those of EDGE_ASR: the worst
    # word and character error rates over the audio files against the reference's transcripts; teacher-
    # forced over the golden's tokens, as for decoders, docs/llm.md: the share of positions whose argmax is
    # the golden's token and the mean KL divergence of the reference's distribution to this one's).
    budget_values: tuple[tuple[str, float], ...] = ()
    # The model whose goldens this one is judged against (a quantized export against the float one):
    # judged by WER/CER; without it the tokens must equal the model's own golden's.
    reference: str | None = None
    backends: tuple[str, ...] | None = None
    threads: int = 1

    def budget(self, keyword: str) -> float | None:
        """The value this marker gives the budget ``keyword`` (a row of checks.BUDGETS); None: not set."""
        return dict(self.budget_values).get(keyword)

    def budgets(self) -> dict[str, float | None]:
        return {budget.keyword: self.budget(budget.keyword) for budget in budgets_for(EDGE_ASR)}


BUDGET_KEYWORDS = tuple(budget.keyword for budget in budgets_for(EDGE_ASR))


@dataclass(frozen=True)
class SpeechTarget:
    """One ``edge_asr`` test's export on one backend."""
    spec: SpeechSpec
    model: Model
    backend: str
    audio: tuple[Path, ...]  # resolved, each an existing file
    unavailable: str | None = None
    reference: Model | None = None
    required: bool = False
    targeted = False
    kind = "speech"  # which check runs it (run.kinds)

    @property
    def folder(self) -> Path:
        assert self.model.place is not None
        return self.model.place

    @property
    def artifact(self) -> Path:
        """The export's first file (its encoder): what the record names and hashes."""
        return self.folder / speech_files(self.backend)[0]

    @property
    def golden_model(self) -> Model:
        return self.reference or self.model


def parse_speech_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> SpeechSpec:
    known = {f.name for f in fields(SpeechSpec) if f.name != "budget_values"} | set(BUDGET_KEYWORDS)
    kwargs = dict(kwargs)
    if args:
        if len(args) > 1 or "model" in kwargs:
            raise EdgeUsageError("edge_asr takes the model as its one positional argument or model=")
        kwargs["model"] = args[0]
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise EdgeUsageError(f"edge_asr: unknown keyword(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for required in ("model", "audio"):
        if kwargs.get(required) is None:
            raise EdgeUsageError(f"edge_asr needs {required}=")
    for name in ("model", "reference"):
        if isinstance(kwargs.get(name), os.PathLike):
            kwargs[name] = os.fspath(kwargs[name])
        if name in kwargs and kwargs[name] is not None and (not isinstance(kwargs[name], str) or not kwargs[name]):
            raise EdgeUsageError(f"edge_asr {name}={shown(kwargs[name])}: an export folder (a str)")
    audio = kwargs["audio"]
    audio = [audio] if isinstance(audio, (str, os.PathLike)) else audio
    if not isinstance(audio, Sequence) or not audio or not all(isinstance(a, (str, os.PathLike)) for a in audio):
        raise EdgeUsageError(f"edge_asr audio={shown(kwargs['audio'])}: a non-empty list of WAV file paths")
    kwargs["audio"] = tuple(os.fspath(a) for a in audio)
    for name in ("new_tokens", "threads"):
        if name in kwargs:
            kwargs[name] = parse_int(kwargs[name], f"edge_asr {name}", 1)
    values = {budget.keyword: kwargs.pop(budget.keyword) for budget in budgets_for(EDGE_ASR) if budget.keyword in kwargs}
    kwargs["budget_values"] = tuple((budget.keyword, budget.parse(values[budget.keyword], f"edge_asr {budget.keyword}"))
                                    for budget in budgets_for(EDGE_ASR) if values.get(budget.keyword) is not None)
    if kwargs.get("backends") is not None:
        value = kwargs["backends"]
        kwargs["backends"] = (value,) if isinstance(value, str) else tuple(value)
        unknown_backends = [b for b in kwargs["backends"] if b not in speech_backends()]
        if unknown_backends:
            raise EdgeUsageError(f"edge_asr: unknown backend {unknown_backends[0]!r}; speech backends: "
                                 f"{', '.join(speech_backends())}")
    return SpeechSpec(**kwargs)


def _folder(spec: str, dirs: Sequence[Path], bases: Sequence[Path], keyword: str) -> Model:
    """The export folder ``spec`` names, in the first of ``dirs`` that has it, as a Model keyed by its place."""
    for folder in dirs:
        candidate = Path(spec) if Path(spec).is_absolute() else folder / spec
        if candidate.is_dir():
            return Model(candidate.name, {}).placed(candidate, bases)
    raise EdgeUsageError(f"{keyword}={spec!r}: no such export folder in {', '.join(str(d) for d in dirs)}")


def _audio(paths: Sequence[str], test_dir: Path) -> tuple[Path, ...]:
    found = []
    for path in paths:
        candidate = Path(path) if Path(path).is_absolute() else test_dir / path
        if not candidate.is_file():
            raise EdgeUsageError(f"edge_asr audio: {candidate}: no such file")
        found.append(candidate)
    return tuple(found)


def plan_speech_test(args: Sequence[Any], kwargs: dict[str, Any], settings: Settings, models: ModelKeys,
                     test_dir: Path) -> tuple[Model, list[SpeechTarget]]:
    """An ``edge_asr`` marker resolved for the test in ``test_dir``: its export folder (and
    ``reference=``'s) claimed by their keys, its audio files, one target per speech backend."""
    doing = "reading @pytest.mark.edge_asr"
    try:
        spec = parse_speech_marker(args, kwargs)
        dirs, bases = search_dirs(settings, test_dir), key_bases(settings)
        doing = f"resolving edge_asr model={spec.model!r}"
        model = models.claim(_folder(spec.model, dirs, bases, "edge_asr model"))
        reference = models.claim(_folder(spec.reference, dirs, bases, "edge_asr reference")) \
            if spec.reference else None
        if reference is not None and reference.key == model.key:
            raise EdgeUsageError(f"edge_asr reference={spec.reference!r} names the tested model itself; drop reference=")
        audio = _audio(spec.audio, test_dir)
        targets = []
        for name in speech_backends():
            if spec.backends is not None and name not in spec.backends:
                continue
            if settings.backends is not None and name not in settings.backends:
                continue
            missing = missing_files(name, model.place) if model.place is not None else []
            unavailable = why_not(name) or (f"{model.place} holds no {name} export (no {', '.join(missing)})"
                                            if missing else None)
            targets.append(SpeechTarget(spec, model, name, audio, unavailable, reference, name in settings.require))
        return model, targets
    except EdgeError:
        raise
    except Exception as exc:  # what no check foresaw: still this test's alone
        raise EdgeError(f"{type(exc).__name__} while {doing}: {str(exc)[:300]}") from exc
