"""The interface every backend implements: load an artifact, describe it, run it.

A backend is one runtime in one configuration (``litert`` vs ``litert-ref``). It is created
cheaply in the pytest process (no runtime import) and loads models only inside its worker
process, so importing pytest-edge never pays for ``import executorch.runtime``.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .. import installed
from .shapes import LoadShapes, Shape
from .tensors import Coverage, TensorSpec  # noqa: F401 - the interface's names too

if TYPE_CHECKING:
    from .arena import TensorArena
    from .intermediates import Intermediates
    from .compiled import Compiler
    from .decoder import DecoderRuntime
    from .quant_pair import QuantPairs
    from .speech import SpeechRuntime


@dataclass(frozen=True)
class CalibrationCase:
    """One case a model quantizes on at load (``LoadedModel.calibrate``): where it came from (a
    file, a golden case) and its inputs by name (the golden's names, or the artifact's)."""

    origin: str
    inputs: dict[str, np.ndarray]


class RuntimeDetails:
    """What a runtime adds to the record's ``runtime`` block about one model
    (``LoadedModel.runtime_details``): a codec dataclass of the backend's own, written after the
    block's own keys (rknn/details.py's RknnDetails: the toolkit's build options)."""


class LoadedModel(ABC):
    """A model loaded in one runtime. Lives only inside the backend's worker process."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # Where each input's shape came from, for a format that may not carry them (ncnn): input name
    # -> "marker shapes=", "the artifact", "the golden" or the converter's file; empty otherwise.
    shape_sources: dict[str, str] = {}

    @abstractmethod
    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run once on positional inputs; return positional outputs as NumPy arrays."""

    def bind(self, feeds: Sequence[np.ndarray]) -> Callable[[], Any]:
        """One inference on ``feeds`` already in the runtime's own form, for the timing loop: the
        conversions ``run`` does on every call (NumPy <-> runtime tensors) are done here once."""
        return lambda: self.run(feeds)

    def coverage(self) -> Coverage | None:
        """Delegate coverage, or None where this backend cannot tell."""
        return None

    def delegates(self) -> list[str]:
        return []

    def runtime_details(self) -> RuntimeDetails | None:
        """What the runtime adds to the record's ``runtime`` block about this model (a toolkit's
        build options, the size of what it built); None for most."""
        return None

    def intermediates(self, feeds: Sequence[np.ndarray]) -> Intermediates | None:
        """Tensors computed on the way for one run, for triage; None where the runtime cannot tell."""
        return None

    def reset(self) -> None:
        """Forget state kept between runs (variables of stateful models) before a golden case."""

    def arena(self) -> "TensorArena | None":
        """The tensor arena a microcontroller runtime allocated for the model, as the runtime itself
        reports it (backends/arena.py); None for a runtime that plans no arena."""
        return None

    def precision(self) -> str:
        """The arithmetic the model runs in; by default the dtype of its first floating tensor."""
        for spec in [*self.inputs, *self.outputs]:
            if np.dtype(spec.dtype).kind == "f":
                return spec.dtype
        return self.inputs[0].dtype if self.inputs else "unknown"


class CalibratedModel(LoadedModel):
    """A loaded model that quantizes on calibration cases given with its load (a backend whose
    ``calibrates`` is set: rknn's -int8), before its first run."""

    @abstractmethod
    def calibrate(self, cases: Sequence[CalibrationCase], source: str) -> None:
        """Quantize on ``cases`` (``source`` says where they came from, for the record)."""


def unusable_artifact(content: bytes, path: Path) -> str | None:
    """What makes ``content`` no model at all, in words naming ``path``; None if it may be one.
    Runtimes say only "`model_path` or `model_content` must be specified" for an empty file."""
    if not content:
        return f"{path} is empty (0 bytes); re-export or re-download it"
    if content.startswith(LFS_POINTER):
        return f"{path} is a Git LFS pointer ({len(content)} bytes), not the model; run git lfs pull"
    return None


LFS_POINTER = b"version https://git-lfs"
# A pointer file is a few lines of text (~130 bytes); its head is all of it.
POINTER_HEAD = 1024


def file_head(path: Path) -> bytes:
    """The first bytes of ``path``: all of an empty file or of an LFS pointer, for
    :func:`unusable_artifact` without reading a large model."""
    with open(path, "rb") as handle:
        return handle.read(POINTER_HEAD)


def is_lfs_pointer(path: Path) -> bool:
    """Whether ``path`` is a Git LFS pointer checked out instead of its content (no git lfs pull)."""
    try:
        return file_head(path).startswith(LFS_POINTER)
    except OSError:
        return False


@dataclass(frozen=True)
class Declared:
    """A backend as its folder's manifest declares it (the ``manifest`` an entry point names):
    what the registry lists, selects and searches files by, known without importing the backend's
    module. ``load`` ("module:callable") is that module's list of backends, as an entry point
    returns it: imported when the backend itself is needed (a test of it, its worker). Every
    field here is the loaded backend's own (tests/test_backends.py compares them)."""

    name: str
    load: str
    suffix: str
    suffixes: tuple[str, ...] = ()
    reference_priority: int | None = None
    predicts_targets: tuple[str, ...] = ()
    decodes: bool = False
    runs_tensors: bool = True
    compile_only: bool = False
    named_only: bool = False

    def artifact_suffixes(self) -> tuple[str, ...]:
        return self.suffixes or (self.suffix,)


class Backend(ABC):
    """A runtime in one configuration: a small identity (name, suffixes, version, how its artifact
    is found) and the capabilities it has (:attr:`tensors`, :attr:`decoders`, :attr:`compiler`,
    :attr:`quant_pairs`), each present or None."""

    name: str  # e.g. "litert-ref"
    suffix: str  # artifact suffix, e.g. ".tflite"
    # Every artifact suffix the runtime reads, most preferred first (OpenVINO: .xml, .onnx,
    # .tflite); empty for a runtime of one format, ``suffix``.
    suffixes: tuple[str, ...] = ()
    runtime_module: str  # module whose presence makes the backend available
    distribution: str  # PyPI name reported in records
    threads_supported: bool = True
    # False for a configuration with no delegate by design (litert-ref): it reports 0 delegated,
    # and delegate budgets (max_fallback, max_partitions) do not apply to it.
    has_delegate: bool = True
    # The same runtime without its delegate, on the same artifact (litert -> litert-ref): running
    # it tells a delegate's kernels from the artifact itself when outputs disagree.
    reference_sibling: str | None = None
    # Preference as the backend that records goldens when the configured one has no artifact for
    # a model (lower first); None: this backend is chosen only when nothing else can run the model.
    reference_priority: int | None = None
    # Mobile targets whose delegate coverage this backend can predict from its artifact alone
    # (ONNX Runtime's usability checker for NNAPI and Core ML); see predicted_coverage.
    predicts_targets: tuple[str, ...] = ()
    # What triage does for this backend when its outputs miss the golden and it has no delegate-free
    # sibling: read its own intermediates of this ``Intermediates.method`` ("nodes", "etdump");
    # None: nothing more to try.
    triage_method: str | None = None
    # Capabilities, each an object the backend has or not (None), so that no backend carries a method
    # that exists only to raise: decoder LLMs (edge_llm tests, docs/llm.md), an NPU compiler that
    # runs here (a compile-time target, docs/npu.md: nothing executes, so no output is compared and
    # nothing is timed; named only, never in a test's default parametrization, so installing a
    # compiler never adds a target nobody asked for), and the float/quantized pair of ``pytest-edge
    # triage quant``, speech recognition. Running tensor models is one more: :attr:`tensors`.
    decoders: "DecoderRuntime | None" = None
    compiler: "Compiler | None" = None
    quant_pairs: "QuantPairs | None" = None
    speech: "SpeechRuntime | None" = None  # Whisper-class speech recognition (edge_asr tests, docs/speech.md)

    # A target that runs tensors but is a test's only where named, like a compile-time one (an NPU's
    # simulator: rknn-rk3588): never in a test's default parametrization.
    named_only: bool = False
    # The folder of the requirements (requirements.txt, requirements-no-deps.txt) of the environment
    # this backend's worker runs in, made by pytest-edge (devices/backend_env.py): a runtime whose
    # pins cannot live in the main environment. None: the main environment.
    environment: Path | None = None
    # A target that quantizes the artifact itself at load (an NPU toolkit's int8 build): its load is
    # given calibration cases (the golden's every case, or the marker's calibration=), LoadedModel.calibrate.
    calibrates: bool = False

    # What an emulated device (devices/qemu.py) installs to run this runtime, at the host's
    # versions: its own distribution first, then what it needs beside it; empty: none is installed.
    device_distributions: tuple[str, ...] = ()
    # Why an emulated device is not given this runtime at all, in words (a skip that says so).
    device_why_not: str | None = None

    @classmethod
    def variant(cls, name: str) -> "Backend | None":
        """A backend of this runtime named ``name`` that is not registered, because this machine
        cannot run it (``onnxruntime-nnapi`` on a CPU-only wheel): it is then reported unavailable
        instead of unknown. None if ``name`` is not one of this runtime's."""
        return None

    def predicted_coverage(self, artifact: Path, target: str) -> Coverage | None:
        """Coverage predicted for ``target`` (one of ``predicts_targets``) in this process."""
        return None

    def artifact_suffixes(self) -> tuple[str, ...]:
        return self.suffixes or (self.suffix,)

    def weights_file(self, artifact: Path) -> Path | None:
        """The file beside ``artifact`` that holds its weights by the format's convention (part of
        the artifact: hashed, sized, shipped with it); None for a format that keeps them inside.
        Asked of the backend whose format ``artifact`` is (``backends.format_backend``)."""
        return None

    def external_locations(self, artifact: Path) -> tuple[str, ...]:
        """The files (relative locations) ``artifact`` names inside itself as holding its data, in
        the order first met, read without loading it; () for a self-contained model. The caller
        checks each location stays in the artifact's folder (``external_data.external_files``)."""
        return ()

    def shapes_beside(self, artifact: Path) -> tuple[tuple[Shape, ...], str]:
        """Input shapes (by position) that the artifact's converter wrote in a file beside it, and
        that file's name, read in the pytest process (so a device's worker gets them too); none
        for most formats, which carry their shapes themselves."""
        return (), ""

    def artifact_of(self, model: Any) -> Path | None:
        """The artifact of ``model`` (a models.Model) this backend runs: the first of its suffixes
        the model has; None if it has none of them."""
        for suffix in self.artifact_suffixes():
            if model.artifact(suffix) is not None:
                return model.artifact(suffix)
        return None

    def missing_artifact(self, model_name: str) -> str:
        """Why a model without any artifact this backend reads is skipped on it."""
        return f"no {' / '.join(self.artifact_suffixes())} artifact for {model_name}"

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here, without importing the runtime; None if it can."""
        if importlib.util.find_spec(self.runtime_module.split(".")[0]) is None:
            return f"{self.distribution} not installed"
        return None

    def runtime_version(self) -> str | None:
        return installed.version(self.distribution)

    def import_runtime(self) -> None:
        """Import the runtime so a worker's memory baseline includes it."""
        importlib.import_module(self.runtime_module)

    @property
    def tensors(self) -> "TensorBackend | None":
        """This backend as a runtime of tensor models (edge tests, tensor goldens): a
        :class:`TensorBackend` has ``load``; None for a runtime of decoders only (llama.cpp, ONNX
        Runtime GenAI, LiteRT-LM) or a compile-time target, which tensor tests never get."""
        return None

    @property
    def runs_tensors(self) -> bool:
        return self.tensors is not None

    @property
    def decodes(self) -> bool:
        return self.decoders is not None

    @property
    def compile_only(self) -> bool:
        """A compile-time target: its compiler runs here, nothing executes what it makes."""
        return self.compiler is not None and self.tensors is None


def no_tensors_reason(backend: Backend) -> str:
    """Why ``backend`` runs no tensor model (it has no ``tensors`` capability), in words."""
    if backend.compiler is not None:
        return (f"{backend.name} is a compile-time target: its compiler runs here, nothing runs the model "
                "(its outputs are not computed; docs/npu.md)")
    if backend.decoders is not None:
        return f"{backend.name} runs decoder LLMs only (an edge_llm test), not tensor models"
    if backend.speech is not None:
        return f"{backend.name} recognizes speech only (an edge_asr test), not tensor models"
    return f"{backend.name} runs no tensor models"


class TensorBackend(Backend):
    """A backend that runs tensor models: ``load`` an artifact into a :class:`LoadedModel`."""

    @property
    def tensors(self) -> "TensorBackend | None":
        return self

    @abstractmethod
    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        """Load ``path`` (with ``InputShapes.of(shapes).for_inputs(...)`` where the runtime fixes
        dynamic dimensions at load); raise an exception with a readable message if the runtime refuses it."""


def __getattr__(name: str) -> Any:
    # Intermediates is the interface's name too (``from ..base import Intermediates``), imported on
    # first use: only triage reads them, and a tensor check's session does not pay for its types.
    if name == "Intermediates":
        from .intermediates import Intermediates

        return Intermediates
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
