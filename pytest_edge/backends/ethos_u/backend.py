"""Ethos-U: ``ethos-u55-128``, ``ethos-u65-256`` and ``ethos-u85-256`` (and, by name, every other
accelerator configuration vela knows), compile-time targets of an int8 ``.tflite``.

vela compiles the model for the target here (vela.py); nothing executes the command stream, so a
test on such a target compares no outputs and times nothing: what it judges is the compiler's
placement (the delegate budgets, each CPU operator with vela's reason), the memory it planned
(the SRAM and flash budgets) and its estimated NPU time at the configured clock (an estimate kept
apart from measured latency: the budgets checks.check_compiled judges). The system configuration and
memory mode are vela's defaults for the accelerator unless ``edge_compile_options`` names them
(docs/npu.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ...errors import BackendError
from ..base import Backend, unusable_artifact
from ..compiled import Compilation, Compiler
from . import REGISTERED  # the manifest's (__init__.py)

KNOWN = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512",
         "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")
# vela's defaults when no system configuration or memory mode is given (its bundled Arm/vela.ini),
# said in docs/npu.md and checked against vela by tests/test_ethos_u.py.
DEFAULTS = {"ethos-u55": ("Ethos_U55_High_End_Embedded", "Shared_Sram"),
            "ethos-u65": ("Ethos_U65_Client_Server", "Dedicated_Sram_384KB"),
            "ethos-u85": ("Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram_384KB")}


class VelaCompiler(Compiler):
    """vela for one accelerator configuration: a .tflite compiled with the user's options, an
    ExecuTorch .pte's Ethos-U delegates read as compiled at export."""

    def __init__(self, backend: "EthosUBackend") -> None:
        self.backend = backend

    def compile(self, artifact: Path, options: Mapping[str, str], timeout_s: float) -> Compilation:
        from .vela import compile_with_vela

        name, version = self.backend.name, self.backend.runtime_version() or "?"
        with open(artifact, "rb") as handle:
            problem = unusable_artifact(handle.read(1024), artifact)
        if problem:
            raise BackendError(f"{name}: {problem}")
        if artifact.suffix == ".pte":
            from .pte import compile_pte

            # Compiled at export: the delegate's own flags, not edge_compile_options (docs/npu.md).
            return compile_pte(artifact, name, timeout_s, version)
        return compile_with_vela(artifact, name, options, timeout_s, version)


class EthosUBackend(Backend):
    runtime_module = "ethosu.vela"
    distribution = "ethos-u-vela"
    suffix = ".tflite"
    # An ExecuTorch program with Ethos-U delegates (ExecuTorch's Arm backend): pte.py.
    suffixes = (".tflite", ".pte")
    threads_supported = False

    def __init__(self, name: str) -> None:
        self.name = name
        # A compile-time target: vela compiles here, nothing runs what it makes (no tensors capability).
        self.compiler = VelaCompiler(self)

    @classmethod
    def variant(cls, name: str) -> Backend | None:
        if name == "tosa-ref":  # unregistered (no environment named): unavailable, with the reason, not unknown
            from .tosa_reference import TosaReferenceBackend

            return TosaReferenceBackend()
        return cls(name) if name in KNOWN else None


def backends() -> list[Backend]:
    """One Ethos-U configuration per family (the others are named: ``variant``), and the TOSA
    reference model for the numerics of the delegate's graph where an environment for it is named
    (PYTEST_EDGE_TOSA_PYTHON): a tensor backend is in every test's parametrization, so without one
    it is not registered and adds no skipped test to every suite (named, it is skipped with why)."""
    from .tosa_reference import TosaReferenceBackend, tosa_python

    return [*(EthosUBackend(name) for name in REGISTERED), *([TosaReferenceBackend()] if tosa_python() else [])]
