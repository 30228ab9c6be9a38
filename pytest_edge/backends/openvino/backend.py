"""OpenVINO: ``openvino`` (CPU, float32 arithmetic) and, by name, ``openvino-bf16``/``openvino-f16``.

OpenVINO reads the project's artifacts through its own frontends. Of one model's artifacts it
takes, in this order: its own IR (``.xml`` with its ``.bin`` beside it: what a team converted for
OpenVINO on purpose), the ``.onnx`` (the graph as exported, the golden's usual source), the
``.tflite`` (a converted graph, possibly quantized). Inputs and outputs are matched by position,
as for every backend; a ``.tflite`` read by OpenVINO keeps the layout its own signature has.

Coverage is OpenVINO's own answer, ``Core.query_model``: which operations of the read model the
device's plugin supports (the rest would have to fall back through HETERO). ``target="gpu"`` or
``"npu"`` asks the same of that device's plugin: predicted coverage, since nothing runs there; where
the plugin does not load here it is said unavailable (coverage None).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError, DoesNotConvert
from ..base import Backend, TensorBackend, Coverage, Intermediates, LoadedModel, TensorSpec, unusable_artifact
from ..shapes import InputShapes, LoadShapes

# Nodes that are graph plumbing rather than operations a device runs.
_NOT_OPERATIONS = {"Parameter", "Result", "Constant"}
# Precision hint per variant, and the OPTIMIZATION_CAPABILITIES entry that says the CPU has it.
_PRECISIONS = {"openvino": ("f32", "FP32"), "openvino-bf16": ("bf16", "BF16"), "openvino-f16": ("f16", "FP16")}
_TARGET_DEVICES = {"gpu": "GPU", "npu": "NPU"}


def _spec(port: Any, dim_names: dict[str, list[str | None]] | None = None) -> TensorSpec:
    names = sorted(port.get_names())
    name = names[0] if names else port.get_any_name()
    symbolic = (dim_names or {}).get(name) or []
    shape = tuple(d.get_length() if d.is_static else (symbolic[i] if i < len(symbolic) else None)
                  for i, d in enumerate(port.get_partial_shape()))
    return TensorSpec(name, shape, port.get_element_type().to_dtype().name)


def onnx_dim_names(path: Path) -> dict[str, list[str | None]]:
    """The symbolic dimension names (``dim_param``) of a .onnx file's inputs and outputs, which
    OpenVINO's partial shapes do not keep ("?"): a dynamic dimension reads the same ("height") as on
    ONNX Runtime. Empty where the ``onnx`` package is not installed (then it reads None)."""
    try:
        import onnx
    except ImportError:
        return {}
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - OpenVINO read it; its own shapes stand
        return {}
    return {value.name: [d.dim_param or None for d in value.type.tensor_type.shape.dim]
            for value in [*graph.input, *graph.output]}


def operations(model: Any) -> list[Any]:
    return [op for op in model.get_ordered_ops() if op.get_type_name() not in _NOT_OPERATIONS]


def query_coverage(core: Any, model: Any, device: str, method: str) -> Coverage:
    """``Core.query_model`` on ``device``: supported operations are the device's, the rest fall back."""
    supported = core.query_model(model, device)
    ops = operations(model)
    fallback = Counter(op.get_type_name() for op in ops if op.get_friendly_name() not in supported)
    n_fallback = sum(fallback.values())
    return Coverage(total_ops=len(ops), delegated_ops=len(ops) - n_fallback, fallback_ops=n_fallback,
                    partitions=1 if len(ops) > n_fallback else 0, fallback_op_names=dict(fallback),
                    delegates=[device], method=method)


@lru_cache(maxsize=1)
def cpu_capabilities() -> tuple[str, ...]:
    import openvino as ov

    return tuple(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def read_model(core: Any, path: Path, backend: str) -> Any:
    """The model in ``path`` (.xml, .onnx, .tflite), or a BackendError naming the file and backend."""
    with open(path, "rb") as f:
        problem = unusable_artifact(f.read(1024), path)  # an LFS pointer is ~130 bytes: all of it
    if problem:
        raise BackendError(f"{backend}: {problem}")
    weights = path.with_suffix(".bin")
    beside = sorted(path.parent.glob("*.bin"))
    if path.suffix == ".xml" and not weights.is_file() and re.fullmatch(r"[0-9a-f]{64}\.xml", path.name) \
            and len(beside) == 1:
        weights = beside[0]  # on a device: the .xml under its content name, its weights as named
    if path.suffix == ".xml" and not weights.is_file():
        raise BackendError(f"{backend}: {path} is OpenVINO IR without its weights {weights}")
    try:
        return core.read_model(str(path), str(weights)) if path.suffix == ".xml" else core.read_model(str(path))
    except RuntimeError as exc:
        if path.suffix == ".xml":  # its own IR: a broken file is an error
            raise BackendError(f"{backend}: OpenVINO cannot read {path}: {_detail(exc)}") from exc
        raise DoesNotConvert(f"does not convert here: OpenVINO's {_FRONTENDS.get(path.suffix, path.suffix)} frontend "
                             f"cannot convert {path}: {_detail(exc)}") from exc


# The frontend that reads each borrowed format (OpenVINO converts it to its own graph on read).
_FRONTENDS = {".onnx": "ONNX", ".tflite": "TensorFlow Lite"}


def _detail(exc: Exception) -> str:
    """The frontend's own reason, without OpenVINO's source-location lines."""
    return " ".join(line for line in str(exc).splitlines() if line.strip() and "Exception from" not in line)


@dataclass(frozen=True)
class CpuConfig:
    """How the CPU plugin compiles a model: the arithmetic it uses, for latency, on how many threads
    (None: OpenVINO's choice)."""

    precision_hint: str  # "f32", "bf16", "f16"
    threads: int | None = None

    def properties(self) -> dict[str, str | int]:
        """As ``Core.compile_model`` takes them, by OpenVINO's property names."""
        found: dict[str, str | int] = {"INFERENCE_PRECISION_HINT": self.precision_hint, "PERFORMANCE_HINT": "LATENCY"}
        if self.threads:
            found["INFERENCE_NUM_THREADS"] = self.threads
        return found


class OpenVINOModel(LoadedModel):
    def __init__(self, core: Any, model: Any, compiled: Any, config: CpuConfig,
                 signature: tuple[list[TensorSpec], list[TensorSpec]]) -> None:
        self.core, self.model, self.compiled, self.config = core, model, compiled, config
        self.request = compiled.create_infer_request()
        # The artifact's signature as read, before shapes= fixed its dynamic dimensions (as every
        # other backend reports it), with the .onnx's dimension names.
        self.inputs, self.outputs = signature

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.request.infer(list(feeds))
        return [self.request.get_output_tensor(i).data.copy() for i in range(len(self.outputs))]

    def bind(self, feeds: Sequence[np.ndarray]):
        request, values = self.request, list(feeds)
        return lambda: request.infer(values, share_inputs=True)

    def delegates(self) -> list[str]:
        return ["CPU"]

    def intermediates(self, feeds: Sequence[np.ndarray]) -> Intermediates:
        """Every operation's outputs, by adding them as model outputs (OpenVINO's way to expose
        them) and compiling with this model's configuration. Tensors are ``<operation>:<port>``,
        which both precisions of one artifact share (openvino-bf16 against openvino). Extra
        outputs keep the plugin from fusing across them: what diverges is named per operation."""
        model = self.model.clone()
        ports = [(op, i) for op in operations(model) for i in range(op.get_output_size())
                 if op.get_output_element_type(i).is_real()]
        # Tensor names as the artifact has them (adding outputs names the unnamed ones Result_*).
        tensor_names = {(op.get_friendly_name(), i): min(op.output(i).get_names(), default=None) for op, i in ports}
        added = model.add_outputs([op.output(i) for op, i in ports])
        request = self.core.compile_model(model, "CPU", self.config.properties()).create_infer_request()
        request.infer(list(feeds))
        order, producers, tensors, names = [], {}, {}, {}
        for (op, i), port in zip(ports, added):
            tensor_id = f"{op.get_friendly_name()}:{i}"
            order.append(tensor_id)
            producers[tensor_id] = f"{op.get_type_name()} {op.get_friendly_name()!r} on the CPU plugin"
            tensors[tensor_id] = request.get_tensor(port).data.copy()
            names[tensor_id] = tensor_names[(op.get_friendly_name(), i)] or tensor_id
        return Intermediates("tensors", order=order, producers=producers, tensors=tensors, names=names,
                             delegated=True)

    def coverage(self) -> Coverage | None:
        return query_coverage(self.core, self.model, "CPU", "runtime")

    def precision(self) -> str:
        # The arithmetic the CPU plugin really uses (bf16 by default on a CPU with BF16 units).
        hint = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        return {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}.get(hint, super().precision())


class OpenVINOBackend(TensorBackend):
    runtime_module = "openvino"
    distribution = "openvino"
    suffix = ".onnx"
    suffixes = (".xml", ".onnx", ".tflite")
    predicts_targets = tuple(_TARGET_DEVICES)

    def __init__(self, name: str = "openvino") -> None:
        self.name = name
        self.hint, self.capability = _PRECISIONS[name]
        # A reduced-precision variant is told from the artifact by the same runtime in float32.
        self.reference_sibling = None if name == "openvino" else "openvino"

    @classmethod
    def variant(cls, name: str) -> Backend | None:
        return cls(name) if name in _PRECISIONS else None

    def weights_file(self, artifact: Path) -> Path | None:
        """Its IR ``m.xml`` keeps its weights in ``m.bin``; the other formats it reads are asked of
        their own backends (``backends.format_backend``)."""
        return artifact.with_suffix(".bin") if artifact.suffix == ".xml" else None

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason or self.name == "openvino":
            return reason
        capabilities = cpu_capabilities()
        if self.capability not in capabilities:
            return (f"this CPU has no {self.capability} inference in OpenVINO (OPTIMIZATION_CAPABILITIES: "
                    f"{', '.join(capabilities)})")
        return None

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        import openvino as ov

        core = ov.Core()
        model = read_model(core, Path(path), self.name)
        # Only a dynamic dimension needs its ONNX name: importing onnx costs ~0.6 s, which a static
        # model's load time (and every fresh measuring process) would otherwise carry.
        dynamic = any(not port.get_partial_shape().is_static for port in [*model.inputs, *model.outputs])
        dim_names = onnx_dim_names(Path(path)) if dynamic and Path(path).suffix == ".onnx" else {}
        signature = ([_spec(p, dim_names) for p in model.inputs], [_spec(p, dim_names) for p in model.outputs])
        wanted = InputShapes.of(shapes).for_inputs([spec.name for spec in signature[0]])
        if wanted:
            names = {n for port in model.inputs for n in port.get_names()}
            model.reshape({n: list(s) for n, s in wanted.items() if n in names})
        # Set explicitly: on a CPU with BF16 units OpenVINO's default is bf16, not the graph's f32.
        config = CpuConfig(self.hint, threads)
        try:
            compiled = core.compile_model(model, "CPU", config.properties())
        except RuntimeError as exc:
            if Path(path).suffix == ".xml":
                raise BackendError(f"{self.name}: OpenVINO's CPU plugin cannot compile {path}: {_detail(exc)}") from exc
            # A converted graph the plugin cannot compile did not convert to something OpenVINO runs.
            raise DoesNotConvert(f"does not convert here: OpenVINO converted {path} but its CPU plugin cannot "
                                 f"compile the result: {_detail(exc)}") from exc
        return OpenVINOModel(core, model, compiled, config, signature)

    def predicted_coverage(self, artifact: Path, target: str) -> Coverage | None:
        """Coverage on the ``target`` device's plugin; None (said unavailable) where it does not load."""
        import openvino as ov

        core = ov.Core()
        model = read_model(core, artifact, self.name)
        try:
            return query_coverage(core, model, _TARGET_DEVICES[target], "predicted")
        except RuntimeError:
            return None  # no OpenCL (GPU) or no NPU driver/compiler here: the check says it cannot be read


def backends() -> list[Backend]:
    """``openvino`` (float32 on the CPU); the precision variants are named, not registered, since
    bf16/f16 outputs need tolerances of their own."""
    return [OpenVINOBackend()]
