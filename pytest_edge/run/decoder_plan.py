"""The plan of an ``edge_llm`` test: its decoder resolved (an export folder, a ``.gguf``), its
configuration read, and one :class:`LlmTarget` per decoder backend (the ``edge_llm`` fixture's
parametrization value, as a :class:`~pytest_edge.core.plan.Plan` is the ``edge_model`` fixture's),
with why it cannot run here; and the context a decoder is loaded with."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..backends import Backend, decoder_backends, get_backend, split_device
from ..backends.decoder import DecoderRuntime
from ..backends.decoder_config import LlmConfig, read_config
from ..errors import EdgeError, EdgeUsageError
from ..llm.marker import LlmSpec
from ..core.external_data import external_files
from ..core.models import Model, ModelKeys, refuse_outside, resolve_model
from ..core.plan import expand_patterns, is_pattern, key_bases, known_device, search_dirs, unavailable_on
from ..core.record_blocks import ModelIdentity
from ..core.settings import Settings


@dataclass(frozen=True)
class LlmTarget:
    """One ``edge_llm`` test's model on one backend: the fixture's parametrization value."""
    spec: LlmSpec
    model: Model
    backend: str
    unavailable: str | None = None
    reference: Model | None = None  # ``reference=``: the model whose goldens this one is judged against
    required: bool = False  # --edge-require names the backend: what would skip it fails it
    targeted = False  # a decoder artifact is never a borrowed one its backend may refuse to convert
    kind = "decoder"  # which check runs it (run.kinds)

    @property
    def artifact(self) -> Path | None:
        return self.model.artifact(get_backend(self.backend).suffix)

    @property
    def golden_model(self) -> Model:
        """The model that owns the goldens this target is checked against."""
        return self.reference or self.model


def targets(spec: LlmSpec, model: Model, settings: Settings, reference: Model | None = None) -> list[LlmTarget]:
    """One target per LLM backend, with the reason where it cannot run here (a skip, or a failure
    where --edge-require names it): this machine's decoder runtimes, and ``BACKEND@DEVICE`` where
    the marker's ``backends=`` or --edge-backends names one (an SSH or command device, qemu:aarch64),
    whose worker serves the decoder there as it serves tensor models."""
    registry = decoder_backends()
    for name in [*(spec.backends or []), *spec.skip_backends, *(backend for backend, _ in spec.tolerances)]:
        if not is_pattern(name) and split_device(name)[0] not in registry:
            raise EdgeUsageError(f"edge_llm: unknown backend {name!r}; LLM backends: {', '.join(registry)}")
    # Patterns (``onnxruntime-*``, ``*@pi5``) select as they do for tensor models (core.plan).
    chosen = expand_patterns(list(spec.backends), registry, settings.devices) if spec.backends is not None else None
    selected = _decoders_of(settings.backends, registry, settings.devices)
    for name in [*(chosen or []), *spec.skip_backends, *(selected or [])]:
        known_device(settings, name)
    on_devices = [n for n in [*(chosen or []), *(selected or [])] if split_device(n)[1] is not None]
    found = []
    for name in dict.fromkeys([*registry, *on_devices]):
        if name in spec.skip_backends or (chosen is not None and name not in chosen) \
                or (selected is not None and name not in selected):
            continue
        base, device = split_device(name)
        backend = registry[base]
        # A runtime without a runner here says so first: that is what holds it back, artifact or not.
        artifact = model.artifact(backend.suffix)
        decoders = backend.decoders
        assert decoders is not None  # decoder_backends() has only backends that have it
        reason = (f"no {backend.suffix} artifact for {model.name}" if artifact is None else
                  unavailable_on(settings, backend, device) or decoders.refuses(artifact))
        found.append(LlmTarget(spec, model, name, reason, reference, name in settings.require))
    return found


def plan_decoder_test(args: Sequence[Any], kwargs: dict[str, Any], settings: Settings, models: ModelKeys,
                      test_dir: Path) -> tuple[Model, list[LlmTarget]]:
    """An ``edge_llm`` marker resolved for the test in ``test_dir``: its model (and ``reference=``'s)
    claimed by their keys, and its targets. Any error is this test's alone, an EdgeError naming
    what was being done (a model not found, an artifact kind no runtime knows, a file that breaks a
    reader), never a collection error that would end the session's other tests."""
    from ..llm.marker import parse_llm_marker

    doing = "reading @pytest.mark.edge_llm"
    try:
        spec = parse_llm_marker(args, kwargs)
        doing = f"resolving edge_llm model={spec.model!r}"
        dirs, bases = search_dirs(settings, test_dir), key_bases(settings)
        model = models.claim(resolve_llm_model(spec.model, dirs, bases))
        doing = f"resolving edge_llm reference={spec.reference!r}"
        reference = _reference(spec.reference, dirs, bases, models) if spec.reference else None
        if reference is not None and reference.key == model.key:
            raise EdgeUsageError(f"edge_llm reference={spec.reference!r} names the tested model {model.key!r} itself; "
                                 "drop reference= (a model is checked against its own goldens by default)")
        doing = f"choosing the backends of {model.key}"
        return model, targets(spec, model, settings, reference)
    except EdgeError:
        raise
    except Exception as exc:  # what no check foresaw: still this test's alone
        raise EdgeError(f"{type(exc).__name__} while {doing}: {str(exc)[:300]}") from exc


def _reference(spec: str, dirs: Sequence[Path], bases: Sequence[Path], models: ModelKeys) -> Model:
    """``reference=``'s decoder, every error saying ``reference=`` (not ``model=``): one outside the
    model folders, one not found, one that is no decoder (a tensor model has no decoder
    configuration, so --edge-update-golden could not record its tokens either)."""
    try:
        reference = models.claim(resolve_llm_model(spec, dirs, bases, keyword="edge_llm reference"))
        config_of(reference)
    except EdgeUsageError as exc:
        text = str(exc)
        said = text if text.startswith("edge_llm reference=") else f"edge_llm reference={spec!r}: {text}"
        raise EdgeUsageError(said) from None
    return reference


def _decoders_of(names: list[str] | None, registry: Any, devices: Any) -> list[str] | None:
    """The decoder backends a --edge-backends selection names: its LLM backends, and what its patterns
    match among them. The selection is the whole run's: a tensor-only backend in it (validated at
    configuration) selects no decoder backend, and a pattern that matches none selects none here."""
    if names is None:
        return None
    universe = [*registry, *(f"{b}@{d}" for d in devices for b in registry)]
    found: list[str] = []
    for name in names:
        if is_pattern(name):
            found += fnmatch.filter(universe, name)
        elif split_device(name)[0] in registry:
            found.append(name)
    return list(dict.fromkeys(found))


def resolve_llm_model(spec: str, dirs: Sequence[Path], key_bases: Sequence[Path] = (),
                      keyword: str = "edge_llm model") -> Model:
    """A decoder as its exporter left it: an export folder (ONNX Runtime GenAI's, with the decoder its
    ``genai_config.json`` names; an Optimum folder's ``model.onnx``; a lone ``.pte``/``.gguf``/``.tflite``
    in it), else a path or stem with the LLM runtimes' suffixes (``.gguf`` among them). Its key is the
    export folder's place (an exporter's decoder named by file, ``models/base/model``, is its folder's
    model too), else the file's without suffix (core.models)."""
    suffixes = list(dict.fromkeys(b.suffix for b in decoder_backends().values()))
    refuse_outside(spec, dirs, suffixes, keyword)
    for folder in dirs:
        candidate = Path(spec) if Path(spec).is_absolute() else folder / spec
        if not candidate.is_dir():
            continue
        artifacts: dict[str, Path] = {}
        for backend in decoder_backends().values():  # an exporter's folder convention (DecoderRuntime.folder_decoder)
            decoder = None if backend.suffix in artifacts else _decoders(backend).folder_decoder(candidate)
            if decoder is not None:
                artifacts[backend.suffix] = decoder
        for suffix in suffixes:
            found = _whole_artifacts(sorted(candidate.glob("*" + suffix)))
            if suffix not in artifacts and len(found) == 1:
                artifacts[suffix] = found[0]
        if artifacts:
            return Model(candidate.name, artifacts).placed(candidate, key_bases)
    model = resolve_model(spec, dirs, suffixes, key_bases)
    for artifact in model.artifacts.values():
        if any(_decoders(b).folder_decoder(artifact.parent) == artifact for b in decoder_backends().values()):
            return model.placed(artifact.parent, key_bases)
    return model


def _decoders(backend: Backend) -> DecoderRuntime:
    """The decoder capability of one of decoder_backends()."""
    assert backend.decoders is not None
    return backend.decoders


def _whole_artifacts(files: list[Path]) -> list[Path]:
    """``files`` less those another of them is made of (a split GGUF's later shards): a folder
    holding one artifact in several files holds one artifact."""
    parts: set[str] = set()
    for path in files:
        try:
            parts |= set(external_files(path)) - {path.name}
        except EdgeError:
            continue  # a later shard, or a file whose parts are missing: its load says so
    return [path for path in files if path.name not in parts]


def _carried(artifact: Path) -> LlmConfig | None:
    """The configuration an artifact carries inside (a GGUF's metadata), as its runtime reads it."""
    for backend in decoder_backends().values():
        if artifact.name.endswith(backend.suffix):
            found = _decoders(backend).config_of(artifact)
            if found is not None:
                return found
    return None


def config_of(model: Model, artifact: Path | None = None) -> LlmConfig:
    """The decoder configuration its exporter wrote with ``artifact``, the one that runs (a GGUF's own
    header, not the genai_config.json of the ONNX export beside it: their cache dtypes differ); where
    it carries none, with another of the model's artifacts (the first that has one:
    config.read_config's order); none: the error of the first, naming what was looked for."""
    first: EdgeUsageError | None = None
    for path in dict.fromkeys([*([artifact] if artifact is not None else []), *model.artifacts.values()]):
        try:
            return read_config(path, metadata=_carried)
        except EdgeUsageError as exc:
            first = first or exc
    assert first is not None, model
    raise first


# The least context a decoder is loaded with: prompts of a few tokens share one load (and one cache
# of a few kilobytes) rather than each loading the model again.
MIN_RUN_CONTEXT = 64


def spec_context(spec: LlmSpec) -> int:
    """The positions one ``edge_llm`` test's generations need: its longest prompt and its new tokens."""
    return max(len(prompt) for prompt in spec.prompts) + spec.new_tokens


def run_context(tokens: int, config: LlmConfig) -> int:
    """The context a decoder is loaded with to generate ``tokens`` positions (prompt + new tokens):
    the next power of two, at least :data:`MIN_RUN_CONTEXT`, at most the model's maximum, so that
    tests of similar lengths share one load and none allocates the declared maximum."""
    return min(config.max_context, max(MIN_RUN_CONTEXT, 1 << max(0, int(tokens) - 1).bit_length()))


def model_identity(target: LlmTarget, rootdir: Path) -> ModelIdentity:
    """The record's ``model`` as for every model (ModelIdentity.of): name, artifact (relative to the
    rootdir), its sha256 (None without one) and each of its files' where it has more than one."""
    return ModelIdentity.of(target.model.key, target.artifact, rootdir)
