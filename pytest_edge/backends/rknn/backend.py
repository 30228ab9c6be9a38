"""Rockchip RKNPU: ``rknn-rk3588`` (float16) and ``rknn-rk3588-int8`` (int8, calibrated on the
golden's inputs), and the same for rk3576, rk3566, rk3568, rk3562 (and, by name, every platform the
toolkit knows): rknn-toolkit2 builds the ``.onnx`` for the chip and runs the ``.rknn`` it made in its
simulator on this host (``init_runtime()`` without a target). The outputs are judged against the
goldens like any backend's; the simulator's numerics are the toolkit's model of the NPU, not the
chip's, and its time is this host's (docs/npu.md, "Rockchip RKNPU").

Named only, never defaults: a test runs on one where the marker's ``backends=``, ``edge_backends`` or
``--edge-backends`` names it. The worker runs in the toolkit's own environment (``environment``:
this folder's requirements; devices/backend_env.py makes it), so this module imports NumPy and the
package's leaves only; the toolkit is imported by the worker, in ``load``.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import resource
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ...errors import BackendError, DoesNotConvert
from ..base import Backend, CalibratedModel, CalibrationCase, TensorBackend, TensorSpec, file_head, unusable_artifact
from ..intermediates import Intermediates, LayerAnalysis
from ..shapes import InputShapes, LoadShapes
from ..toolprocess import MEMORY_VARIABLE, error_line, memory_limit
from . import INT8, PLATFORMS, REGISTERED  # the manifest's (__init__.py)
from .analysis import ANALYSIS_FILE, AnalysisUnreadable, read_analysis
from .details import BuildOptions, CalibrationFigures, RknnDetails

# Every platform rknn-toolkit2 2.5.0 builds for (RKNN.config's target_platform).
KNOWN = (*PLATFORMS, "rv1103", "rv1103b", "rv1106", "rv1106b", "rv1126b", "rk2118")
# The worker's address space (the toolkit's build and its simulator run in it), bounded as every tool
# the product runs is (backends/toolprocess.py: PYTEST_EDGE_TOOL_MEMORY, "0" for none), with a default
# of its own where that is not set: the worker holds torch, and the toolkit maps about 1.1 GB for
# tiny_cnn, where vela's 2 GiB default is meant for a compiler alone.
DEFAULT_MEMORY_BYTES = 8 * 2**30
SIMULATED = "rknn-toolkit2's simulator on this host: the toolkit's model of the NPU's numerics, this host's time"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the toolkit's log colours its levels
# Operators of a model quantized before the toolkit (onnxruntime's quantize_static, QDQ): the toolkit
# imports their scales and builds int8 without a dataset of its own.
_QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearAdd", "ConvInteger",
                  "MatMulInteger", "DynamicQuantizeLinear"}
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
                11: "float64"}


def _limit_memory() -> int | None:
    """Bound this worker's address space (RLIMIT_AS): PYTEST_EDGE_TOOL_MEMORY where set, else 8 GiB.
    Returns the limit (None: none)."""
    limit = memory_limit() if os.environ.get(MEMORY_VARIABLE, "").strip() else DEFAULT_MEMORY_BYTES
    if limit is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def toolkit_reason(error: BaseException) -> str:
    """The toolkit's own reason, from the exception it raised (a ValueError whose text is the traceback
    it logged, ending with the original error): its last error line (toolprocess.error_line)."""
    return error_line(str(error)) if str(error).strip() else type(error).__name__


def _out_of_memory(error: BaseException) -> bool:
    """Whether the toolkit failed for want of address space (the worker's limit), however it says so:
    a MemoryError, or an import or allocation that could not map its memory."""
    text = str(error)
    return isinstance(error, MemoryError) or any(
        said in text for said in ("failed to map segment", "Cannot allocate memory", "bad_alloc", "MemoryError"))


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """The worker in ``folder`` while the toolkit builds: it writes its intermediate graphs
    (check0_base_optimize.onnx, ...) into the working directory, which is the user's project."""
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _memory_message(name: str, path: Path, error: BaseException) -> str:
    shown = resource.getrlimit(resource.RLIMIT_AS)[0]
    limit = "none" if shown == resource.RLIM_INFINITY else f"{shown / 2**20:g} MiB"
    return (f"{name}: rknn-toolkit2 ran out of the worker's memory with {path} (its limit: {limit}; "
            f"{MEMORY_VARIABLE} sets it, 8 GiB unless set): {toolkit_reason(error)}")


class RknnBackend(TensorBackend):
    runtime_module = "rknn.api"
    distribution = "rknn-toolkit2"
    suffix = ".onnx"
    threads_supported = False
    named_only = True
    environment = Path(__file__).resolve().parent
    # A mismatch is triaged by the toolkit's own per-layer accuracy analysis (triage/layers.py).
    triage_method = "layers"

    def __init__(self, name: str) -> None:
        self.name = name
        self.platform = name.removeprefix("rknn-").removesuffix(INT8)
        self.quantized = name.endswith(INT8)
        self.calibrates = self.quantized  # int8 is quantized on calibration cases the load is given

    @classmethod
    def variant(cls, name: str) -> Backend | None:
        platform_name = name.removeprefix("rknn-").removesuffix(INT8)
        return cls(name) if name.startswith("rknn-") and platform_name in KNOWN else None

    def unavailable_reason(self) -> str | None:
        """In its own environment: whether the toolkit is there. Elsewhere: whether this host can
        have that environment (the toolkit's wheels are for Linux on x86-64 and aarch64)."""
        if importlib.util.find_spec("rknn") is not None:
            return None
        if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
            return f"rknn-toolkit2 has wheels for Linux on x86-64 and aarch64 only; this is {sys.platform} {platform.machine()}"
        return None

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> CalibratedModel:
        problem = unusable_artifact(file_head(path), path)
        if problem:
            raise BackendError(f"{self.name}: {problem}")
        _limit_memory()
        try:
            model = RknnModel(self, path, InputShapes.of(shapes))
            if not self.quantized:
                model.build(None)  # float16 now: a model the toolkit cannot build does not convert at load
        except Exception as exc:  # noqa: BLE001 - an import or allocation the memory limit refused
            if isinstance(exc, BackendError) or not _out_of_memory(exc):
                raise
            raise BackendError(_memory_message(self.name, path, exc)) from None
        return model


class RknnModel(CalibratedModel):
    """An ``.onnx`` built by rknn-toolkit2 for one platform, run in its simulator. int8 is built when
    the load's calibration cases arrive (:meth:`calibrate`: the golden's every case, or the marker's
    ``calibration=``); a load given none (a measuring worker's) builds at the first run, on its inputs."""

    def __init__(self, backend: RknnBackend, path: Path, shapes: InputShapes) -> None:
        import onnx

        self.backend, self.path = backend, path.absolute()  # the toolkit builds inside a folder of its own
        self.renamed = shapes  # the golden's input names -> this artifact's (calibration cases use the golden's)
        graph = onnx.load(str(path), load_external_data=False).graph
        initializers = {i.name for i in graph.initializer}
        declared = [(i.name, i.type.tensor_type) for i in graph.input if i.name not in initializers]
        names = [name for name, _ in declared]
        own = [tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)
               for _, t in declared]
        resolved, self.shape_sources = shapes.resolve(names, [s if None not in s else None for s in own])
        for name, shape, artifact_shape in zip(names, resolved, own):
            if shape is None:
                raise BackendError(f"{self.backend.name}: input {name!r} of {path} has dynamic dimensions "
                                   f"{list(artifact_shape)}; the toolkit builds for fixed shapes: give shapes= in the marker")
        self.shape_sources = {k: v for k, v in self.shape_sources.items() if v != "the artifact"}
        self.inputs = [TensorSpec(name, tuple(int(d) for d in shape), _ONNX_DTYPES.get(t.elem_type, "float32"))
                       for (name, t), shape in zip(declared, resolved)]
        self.fixed = any(artifact_shape != tuple(shape) for artifact_shape, shape in zip(own, resolved))
        self.outputs = [TensorSpec(o.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                                for d in o.type.tensor_type.shape.dim),
                                   _ONNX_DTYPES.get(o.type.tensor_type.elem_type, "float32")) for o in graph.output]
        self.rknn: Any = None
        self.prequantized = any(node.op_type in _QUANTIZED_OPS for node in graph.node)
        # What the record keeps (the load's reply): an int8 model is built at its first run, after it.
        self.details = RknnDetails(backend.platform, self._options(None, ""), None,
                                   "at the first run (calibrated on its inputs)", SIMULATED)

    def calibrate(self, cases: Sequence[CalibrationCase], source: str) -> None:
        """Build int8 now, quantized on ``cases`` (their inputs named by the golden's or this
        artifact's input names), said in the record as ``source``. A case without one of the model's
        inputs, or of another shape, is an error naming the case's origin and this backend; no case at
        all is one too."""
        if not self.backend.quantized:
            raise BackendError(f"{self.backend.name}: builds in float16; calibration is for its -int8 target")
        if not cases:
            raise BackendError(f"{self.backend.name}: calibration from {source}: no case to calibrate {self.path} on")
        own = self.renamed.renaming([spec.name for spec in self.inputs])  # golden name -> this artifact's
        golden_name = {mine: theirs for theirs, mine in own.items()}
        samples = []
        for case in cases:
            origin, given = case.origin, case.inputs
            sample = []
            for spec in self.inputs:
                array = given.get(spec.name, given.get(golden_name.get(spec.name, spec.name)))
                if array is None:
                    raise BackendError(f"{self.backend.name}: calibration case {origin} has no input {spec.name!r} "
                                       f"of {self.path} (it has {sorted(given)})")
                array = np.asarray(array)
                if tuple(array.shape) != tuple(spec.shape):
                    raise BackendError(f"{self.backend.name}: calibration case {origin}: input {spec.name!r} has shape "
                                       f"{list(array.shape)}, {self.path} is built for {list(spec.shape)}")
                if array.dtype.kind not in "fiub":
                    raise BackendError(f"{self.backend.name}: calibration case {origin}: input {spec.name!r} holds "
                                       f"{array.dtype}, not numbers")
                sample.append(array.astype(spec.dtype, copy=False))
            samples.append(sample)
        self.build(samples, source)

    def build(self, calibration: Sequence[Sequence[np.ndarray]] | None, source: str = "") -> None:
        """Build for the platform (int8: quantized on ``calibration``, one list of input arrays per
        sample, written as .npy files and the toolkit's dataset list, a line per sample, in a
        temporary folder), export the ``.rknn`` (its size is recorded) and start the simulator.
        DoesNotConvert with the toolkit's reason where it cannot build."""
        from rknn.api import RKNN

        backend = self.backend
        dataset: str | None = None  # the samples' list, for an int8 build calibrated here
        with tempfile.TemporaryDirectory(prefix="pytest-edge-rknn-") as folder, _inside(Path(folder)):
            log = Path(folder) / "toolkit.log"
            rknn = RKNN(verbose=True, verbose_file=str(log))  # the file is written only when verbose
            try:
                self._step(rknn, "config", rknn.config(target_platform=backend.platform), log)
                inputs = {}
                if self.fixed:
                    inputs = {"inputs": [s.name for s in self.inputs], "input_size_list": [list(s.shape) for s in self.inputs]}
                self._step(rknn, "load_onnx", rknn.load_onnx(model=str(self.path), **inputs), log)
                if calibration is not None:
                    lines = []
                    for index, sample in enumerate(calibration):
                        files = [Path(folder) / f"sample{index}_input{position}.npy" for position in range(len(sample))]
                        for file, array in zip(files, sample):
                            np.save(file, np.asarray(array))
                        lines.append(" ".join(map(str, files)))  # a sample's inputs side by side
                    listed = Path(folder) / "dataset.txt"
                    listed.write_text("\n".join(lines) + "\n")
                    dataset = str(listed)
                self._step(rknn, "build", rknn.build(do_quantization=backend.quantized, dataset=dataset), log)
                exported = Path(folder) / f"{self.path.stem}.rknn"
                self._step(rknn, "export_rknn", rknn.export_rknn(str(exported)), log)
                rknn_bytes = exported.stat().st_size
                self._step(rknn, "init_runtime", rknn.init_runtime(), log)
            except DoesNotConvert:
                rknn.release()
                raise
            except Exception as exc:  # noqa: BLE001 - the toolkit raises ValueError, onnx's errors, its own
                rknn.release()
                if not _out_of_memory(exc):
                    raise DoesNotConvert(f"does not convert here: rknn-toolkit2 cannot build {self.path} for "
                                         f"{backend.platform}: {toolkit_reason(exc)}") from None
                raise BackendError(_memory_message(backend.name, self.path, exc)) from None
        self.rknn = rknn
        built = "at load" if source else "at the first run (calibrated on its inputs)"
        self.details = RknnDetails(backend.platform, self._options(calibration, source), rknn_bytes, built, SIMULATED)

    def _options(self, calibration: Sequence[Sequence[np.ndarray]] | None, source: str) -> BuildOptions:
        """The build's options as the record keeps them: for int8, how many samples it was
        calibrated on and where they came from."""
        if not self.backend.quantized and self.prequantized:
            return BuildOptions(False, quantization="the model's own (its quantization operators imported)")
        if not self.backend.quantized:
            return BuildOptions(False, float_dtype="float16")
        return BuildOptions(True, quantized_dtype="w8a8", quantized_algorithm="normal", quantized_method="channel",
                            calibration=CalibrationFigures(len(calibration) if calibration is not None else None,
                                                           source or "the first run's inputs"))

    def _step(self, rknn: Any, step: str, code: Any, log: Path) -> None:
        if code != 0:
            said = []
            try:
                said = [line.strip() for line in _ANSI.sub("", log.read_text(errors="replace")).splitlines()
                        if line.lstrip().startswith("E ")]
            except OSError:
                pass
            reason = said[-1].removeprefix("E ").strip() if said else f"{step} returned {code}"
            raise DoesNotConvert(f"does not convert here: rknn-toolkit2 cannot build {self.path} for "
                                 f"{self.backend.platform}: {step}: {reason}")

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.rknn is None:
            self.build([feeds])
        formats = ["nchw" if np.ndim(feed) == 4 else "nhwc" for feed in feeds]
        try:
            outputs = self.rknn.inference(inputs=[np.ascontiguousarray(feed) for feed in feeds], data_format=formats)
        except Exception as exc:  # noqa: BLE001 - the simulator's own error, named
            raise BackendError(f"{self.backend.name}: rknn-toolkit2's simulator failed on {self.path}: "
                               f"{toolkit_reason(exc)}") from None
        if outputs is None:
            raise BackendError(f"{self.backend.name}: rknn-toolkit2's simulator gave no outputs for {self.path}")
        return [self._as_declared(np.asarray(out), spec) for out, spec in zip(outputs, self.outputs)]

    def _as_declared(self, array: np.ndarray, spec: TensorSpec) -> np.ndarray:
        """An output in its declared dtype; where the simulator dropped or added size-1 dimensions, in
        its declared shape. Another shape is an error naming both, never a silent reshape."""
        array = array.astype(spec.dtype, copy=False)
        static = all(isinstance(d, int) and d > 0 for d in spec.shape)
        if not static or array.shape == tuple(spec.shape):
            return array
        if [d for d in array.shape if d != 1] == [d for d in spec.shape if d != 1]:
            return array.reshape(spec.shape)
        raise BackendError(f"{self.backend.name}: rknn-toolkit2's simulator gave output {spec.name!r} of {self.path} "
                           f"in shape {list(array.shape)}, the model declares {list(spec.shape)}")

    def intermediates(self, feeds: Sequence[np.ndarray]) -> Intermediates | None:
        """The toolkit's per-layer accuracy analysis of the int8 build on ``feeds``
        (``accuracy_analysis(target=None)``: the float model against the quantized simulator, layer by
        layer), method "layers": its ``details`` a LayerAnalysis of the rows the toolkit's file gives, in order.
        Float16 builds are not analysed (said in ``unavailable``); a missing or garbled file too."""
        method = "layers"
        tool = f"rknn-toolkit2 {self.backend.runtime_version()}'s accuracy_analysis"
        if not self.backend.quantized:
            return Intermediates(method, unavailable=f"{tool} compares a quantized build with the float model; "
                                                     f"{self.backend.name} builds in float16")
        if self.rknn is None:
            self.build([feeds])
        with tempfile.TemporaryDirectory(prefix="pytest-edge-rknn-analysis-") as folder, _inside(Path(folder)):
            files = []
            for position, feed in enumerate(feeds):
                files.append(str(Path(folder) / f"input{position}.npy"))
                np.save(files[-1], np.ascontiguousarray(feed))
            snapshot = Path(folder) / "snapshot"
            try:
                code = self.rknn.accuracy_analysis(inputs=files, output_dir=str(snapshot), target=None)
            except Exception as exc:  # noqa: BLE001 - the toolkit's own error, said
                return Intermediates(method, unavailable=f"{tool} failed on {self.path}: {toolkit_reason(exc)}")
            if code != 0:
                return Intermediates(method, unavailable=f"{tool} returned {code} on {self.path}")
            try:
                rows = read_analysis(snapshot)
            except AnalysisUnreadable as exc:
                return Intermediates(method, unavailable=f"{tool}: {exc}")
        return Intermediates(method, details=LayerAnalysis(rows, tool, ANALYSIS_FILE,
                                                           "the float model against the int8 simulator"))

    def runtime_details(self) -> RknnDetails:
        return self.details

    def precision(self) -> str:
        return "int8" if self.backend.quantized or self.prequantized else "float16"


def backends() -> list[Backend]:
    """The registered targets (the manifest's names)."""
    return [RknnBackend(name) for name in REGISTERED]
