"""ncnn: ``ncnn`` (CPU, float32) and, by name, ``ncnn-fp16`` (ncnn's default options: fp16 storage
and arithmetic where the CPU has them) and ``ncnn-vulkan`` (its Vulkan GPU compute).

Artifacts are ``<model>.ncnn.param`` (text) with ``<model>.ncnn.bin`` beside it, as ``pnnx`` writes
them (fixtures/make_models.py). ncnn has no batch dimension: a blob is ``w``, ``h, w`` or
``c, h, w`` (channel-packed inside, which the Python ``Mat`` hides). So inputs are given with a
leading batch of 1, which is dropped, and outputs get it back. pnnx writes no shapes in the
``.ncnn.param`` (``Input in0 0 1 in0``); an input's shape is, in this order, the marker's
``shapes=`` (by the golden's input name, mapped by position: ``x -> in0``), the ``Input`` layer's
``0=w 1=h 2=c`` where the file has them, the golden's input, or the ``#0=(1,3,64,64)f32`` of
pnnx's own ``<model>.pnnx.param`` beside it; the record says which. The output shapes come from
one run on zeros at load.

Coverage: every layer of the loaded net runs on the CPU here; on ``ncnn-vulkan`` the layers whose
``support_vulkan`` is false fall back to the CPU.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import BackendError, DoesNotConvert
from ..base import Backend, TensorBackend, Coverage, LoadedModel, TensorSpec, unusable_artifact
from ..shapes import InputShapes, LoadShapes, Shape, oversized_input
from ..native_output import native_stderr

_VARIANTS = ("ncnn", "ncnn-fp16", "ncnn-vulkan")


def read_param(path: Path) -> list[tuple[str, str, list[str], list[str], dict[str, str]]]:
    """The layers of a text .param: (type, name, input blobs, output blobs, params)."""
    lines = [line.split() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    if not lines or lines[0] != ["7767517"]:
        raise BackendError(f"ncnn: {path} is not a text ncnn .param (its first line is not the magic 7767517)")
    layers = []
    for number, fields in enumerate(lines[2:], start=3):
        try:
            kind, name, n_in, n_out = fields[0], fields[1], int(fields[2]), int(fields[3])
        except (IndexError, ValueError):
            raise BackendError(f"ncnn: {path} line {number} is not a layer (type, name, input and output counts, "
                               f"blobs): {' '.join(fields)[:120]!r}") from None
        blobs = fields[4:4 + n_in + n_out]
        if n_in < 0 or n_out < 0 or len(blobs) != n_in + n_out:
            raise BackendError(f"ncnn: {path} line {number} declares {n_in} input and {n_out} output blobs "
                               f"but names {len(blobs)}")
        params = dict(p.split("=", 1) for p in fields[4 + n_in + n_out:] if "=" in p)
        layers.append((kind, name, blobs[:n_in], blobs[n_in:], params))
    return layers


def io_blobs(layers: list) -> tuple[list[tuple[str, tuple[int, ...] | None]], list[str]]:
    """Input blobs with their shape (batch 1 first; None where the param does not say) and the
    output blobs (produced, never consumed), in file order."""
    inputs, consumed, produced = [], set(), []
    for kind, _, ins, outs, params in layers:
        consumed.update(ins)
        produced += outs
        if kind == "Input":
            dims = [int(params[k]) for k in ("2", "1", "0") if int(params.get(k, 0)) > 0]  # c, h, w
            inputs.append((outs[0], (1, *dims) if dims else None))
    return inputs, [b for b in produced if b not in consumed]


_PNNX_INPUT = re.compile(r"#\S+?=\(([0-9,]+)\)\w+")


def pnnx_input_shapes(path: Path) -> tuple[Shape, ...]:
    """The shapes of the ``pnnx.Input`` layers of a ``.pnnx.param``, in order (pnnx writes them
    from its ``inputshape=``: ``pnnx.Input in0 0 1 0 #0=(1,3,64,64)f32``); () if any lacks one."""
    shapes = []
    with open(path, errors="replace") as lines:
        for line in lines:
            if line.startswith("pnnx.Input "):
                found = _PNNX_INPUT.search(line)
                if found is None:
                    return ()
                shapes.append(tuple(int(d) for d in found.group(1).split(",") if d))
            if len(shapes) > 64:  # a network's inputs, not a file's worth of lines
                return ()
    return tuple(shapes)


def pnnx_param_of(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".ncnn.param") + ".pnnx.param")


@lru_cache(maxsize=1)
def vulkan_devices() -> int:
    """How many Vulkan devices ncnn finds, asked in a child process: without libvulkan ncnn prints
    its dlopen failures on the process's own stderr."""
    done = subprocess.run([sys.executable, "-c", "import ncnn; print(ncnn.get_gpu_count())"],
                          capture_output=True, text=True, timeout=60)
    return int(done.stdout.split()[-1]) if done.returncode == 0 and done.stdout.split() else 0


class NcnnModel(LoadedModel):
    def __init__(self, net: Any, layers: list, vulkan: bool, path: Path, shapes: InputShapes) -> None:
        import ncnn

        self.net, self.layers, self.vulkan, self.path, self._ncnn = net, layers, vulkan, path, ncnn
        declared, outputs = io_blobs(layers)
        self._in = [name for name, _ in declared]
        resolved, self.shape_sources = shapes.resolve(self._in, [shape for _, shape in declared])
        missing = [name for name, shape in zip(self._in, resolved) if shape is None]
        if missing:
            raise BackendError(f"ncnn: {path} does not give the shape of input {', '.join(map(repr, missing))} "
                               "(pnnx writes none in the Input lines of a .ncnn.param) and neither does a golden, "
                               f"nor a {pnnx_param_of(path).name} beside it; give shapes= in the marker "
                               "(by the reference model's input names), or add 0=w 1=h 2=c to the Input lines")
        for name, shape in zip(self._in, resolved):
            too_big = oversized_input(shape)
            if too_big:
                raise BackendError(f"ncnn: {path}: input {name!r} ({self.shape_sources[name]}): {too_big}")
        self._out = outputs
        self.inputs = [TensorSpec(name, shape, "float32") for name, shape in zip(self._in, resolved)]
        probe = self.run([np.zeros(spec.shape, np.float32) for spec in self.inputs])
        self.outputs = [TensorSpec(name, value.shape, "float32") for name, value in zip(outputs, probe)]

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        extractor = self.net.create_extractor()
        for name, value in zip(self._in, feeds):
            if value.shape[:1] != (1,):
                raise BackendError(f"ncnn: {self.path} takes a batch of 1 (ncnn blobs have no batch), "
                                   f"input {name!r} has shape {value.shape}")
            extractor.input(name, self._ncnn.Mat(np.ascontiguousarray(value[0], dtype=np.float32)))
        outputs = []
        for name in self._out:
            ret, mat = extractor.extract(name)
            if ret != 0:
                raise BackendError(f"ncnn: extracting {name!r} of {self.path} failed ({ret})")
            outputs.append(np.array(mat)[None].copy())
        return outputs

    def delegates(self) -> list[str]:
        return ["vulkan" if self.vulkan else "cpu"]

    def coverage(self) -> Coverage:
        layers = [layer for layer in self.net.layers() if layer.type != "Input"]
        fallback = Counter(layer.type for layer in layers if self.vulkan and not layer.support_vulkan)
        n_fallback = sum(fallback.values())
        return Coverage(total_ops=len(layers), delegated_ops=len(layers) - n_fallback, fallback_ops=n_fallback,
                        partitions=1 if len(layers) > n_fallback else 0, fallback_op_names=dict(fallback),
                        delegates=self.delegates(), method="runtime")

    def precision(self) -> str:
        opt = self.net.opt
        return "float16" if opt.use_fp16_storage or opt.use_fp16_arithmetic else "float32"


class NcnnBackend(TensorBackend):
    runtime_module = "ncnn"
    distribution = "ncnn"
    suffix = ".ncnn.param"

    def __init__(self, name: str = "ncnn") -> None:
        self.name = name
        self.reference_sibling = None if name == "ncnn" else "ncnn"

    @classmethod
    def variant(cls, name: str) -> Backend | None:
        return cls(name) if name in _VARIANTS else None

    def weights_file(self, artifact: Path) -> Path | None:
        """``m.ncnn.param`` keeps its weights in ``m.ncnn.bin``."""
        return artifact.with_name(artifact.name.removesuffix(".param") + ".bin")

    def unavailable_reason(self) -> str | None:
        reason = super().unavailable_reason()
        if reason or self.name != "ncnn-vulkan":
            return reason
        return None if vulkan_devices() else "ncnn finds no Vulkan device here (no GPU or no libvulkan)"

    def shapes_beside(self, artifact: Path) -> tuple[tuple[Shape, ...], str]:
        pnnx_param = pnnx_param_of(Path(artifact))
        if not pnnx_param.is_file() or pnnx_param.stat().st_size > 16 * 2**20:
            return (), ""
        # ncnn's blobs have no batch; pnnx's shapes keep it, as the golden's do.
        return pnnx_input_shapes(pnnx_param), pnnx_param.name

    def load(self, path: Path, *, threads: int | None, shapes: LoadShapes) -> LoadedModel:
        import ncnn

        path = Path(path)
        weights = path.with_name(path.name.removesuffix(".param") + ".bin")
        beside = sorted(path.parent.glob("*.ncnn.bin"))
        if not weights.is_file() and re.fullmatch(r"[0-9a-f]{64}\.param", path.name) and len(beside) == 1:
            weights = beside[0]  # on a device: the .param under its content name, its weights as named
        with open(path, "rb") as f:
            problem = unusable_artifact(f.read(1024), path)
        if problem:
            raise BackendError(f"{self.name}: {problem}")
        if not weights.is_file():
            raise BackendError(f"{self.name}: {path} has no weights file {weights} beside it")
        layers = read_param(path)
        net = ncnn.Net()
        if self.name == "ncnn":
            # ncnn's defaults store (and on ARM compute) in fp16 where the CPU can: ncnn-fp16.
            opt = net.opt
            opt.use_fp16_packed = opt.use_fp16_storage = opt.use_fp16_arithmetic = False
            opt.use_bf16_storage = False
        net.opt.use_vulkan_compute = self.name == "ncnn-vulkan"
        if threads:
            net.opt.num_threads = threads
        with native_stderr() as said:
            loaded = net.load_param(str(path))
        if loaded != 0:
            told = "; ".join(said.lines()) or "nothing on stderr"
            unknown = re.findall(r"layer (\S+) not exists or registered", said.text)
            if unknown:
                # The converter left operators ncnn has no layer for (pnnx keeps what it could not
                # lower as pnnx.Expression, ...): the network does not convert to ncnn here.
                raise DoesNotConvert(f"{self.name}: ncnn has no layer {', '.join(dict.fromkeys(unknown))} in {path} "
                                     f"(the converter's output keeps operators ncnn cannot run; ncnn said: {told})")
            raise BackendError(f"{self.name}: ncnn cannot load {path} (a malformed line; ncnn said: {told})")
        with native_stderr() as said:
            loaded = net.load_model(str(weights))
        if loaded != 0:
            raise BackendError(f"{self.name}: ncnn cannot load the weights {weights} for {path} "
                               f"(truncated, or written for another .param; ncnn said: "
                               f"{'; '.join(said.lines()) or 'nothing on stderr'})")
        return NcnnModel(net, layers, self.name == "ncnn-vulkan", path, InputShapes.of(shapes))


def backends() -> list[Backend]:
    """``ncnn`` (float32 on the CPU); ``ncnn-fp16`` and ``ncnn-vulkan`` are named, not registered."""
    return [NcnnBackend()]
