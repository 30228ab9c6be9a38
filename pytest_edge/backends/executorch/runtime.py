"""ExecuTorch's runtime as the backend, its decoder and its metadata reader use it: its error codes
explained, a .pte checked before the runtime reads it, the runtime imported alone and its
quantized kernels registered. Below the backend, so none of them imports it back."""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

from ..base import unusable_artifact

# executorch::runtime::Error (runtime/core/error.h of executorch 1.5), whose codes the Python
# bindings print in hex ("Failed to load program, error: 0x:23"): name and documented meaning.
ERROR_CODES = {
    0x01: ("Internal", "an internal error occurred"),
    0x02: ("InvalidState", "the executor is in an invalid state for the operation"),
    0x03: ("EndOfMethod", "there are no more steps of execution to run"),
    0x04: ("AlreadyLoaded", "the resource has already been loaded"),
    0x10: ("NotSupported", "the operation is not supported in the current context"),
    0x11: ("NotImplemented", "the operation is not yet implemented"),
    0x12: ("InvalidArgument", "an invalid argument was given (for a program: data too short to hold one)"),
    0x13: ("InvalidType", "an object is of an invalid type for the operation"),
    0x14: ("OperatorMissing", "operator(s) missing in the operator registry: this executorch build "
                              "lacks kernels the .pte calls"),
    0x15: ("RegistrationExceedingMaxKernels", "registering exceeds the maximum number of kernels"),
    0x16: ("RegistrationAlreadyRegistered", "the kernel is already registered"),
    0x20: ("NotFound", "a requested resource could not be found"),
    0x21: ("MemoryAllocationFailed", "could not allocate the requested memory"),
    0x22: ("AccessFailed", "could not access a resource"),
    0x23: ("InvalidProgram", "error caused by the contents of the program: not a .pte of a version "
                             "this runtime reads, truncated, or corrupt"),
    0x24: ("InvalidExternalData", "error caused by the contents of external data"),
    0x25: ("OutOfResources", "not enough resources to perform the operation"),
    0x30: ("DelegateInvalidCompatibility", "a delegate received a payload of an incompatible version"),
    0x31: ("DelegateMemoryAllocationFailed", "a delegate failed to allocate memory"),
    0x32: ("DelegateInvalidHandle", "a delegate's handle is invalid"),
}
_ERROR_CODE = re.compile(r"error:? 0x:?([0-9a-fA-F]+)")
# A .pte is a flatbuffer with file identifier "ET" + two digits (ET12 for executorch 1.x).
_PTE_IDENTIFIER = re.compile(rb"ET[0-9]{2}")


def explain_error(message: str) -> str:
    """``message`` with its ExecuTorch error code named: "... 0x:23" -> "... 0x:23
    (Error::InvalidProgram: error caused by the contents of the program ...)"."""
    match = _ERROR_CODE.search(message)
    if match is None:
        return message
    code = int(match.group(1), 16)
    name, meaning = ERROR_CODES.get(code, ("Unknown", "a code this version of pytest-edge does not know"))
    return f"{message} (Error::{name}: {meaning})"


def pte_problem(data: bytes, path: Path, size: int | None = None) -> str | None:
    """What makes ``data`` no ExecuTorch program, checked before the runtime sees it: the runtime
    logs the identifier bytes it found, and non-UTF-8 bytes there abort the process from inside
    pybind11 (seen with executorch 1.5) instead of raising. ``size``: the file's, where ``data`` is
    only its head (:func:`program_bytes`)."""
    problem = unusable_artifact(data, path)
    if problem:
        return problem
    if len(data) < 8 or not _PTE_IDENTIFIER.fullmatch(data[4:8]):
        return (f"{path} is not an ExecuTorch program: bytes 4-8 are {data[4:8]!r}, a .pte has the file "
                "identifier b'ET12'; re-export it with to_executorch()")
    if data[8:12] == b"eh00" and len(data) >= 32:
        # Extended header: program size, segment base offset, segment data size (little endian).
        length = int.from_bytes(data[12:16], "little")
        program_size = int.from_bytes(data[16:24], "little")
        base = int.from_bytes(data[24:32], "little")
        segments = int.from_bytes(data[32:40], "little") if length > 24 and len(data) >= 40 else 0
        expected = base + segments if segments else program_size
        total = len(data) if size is None else size
        if expected > total:
            return (f"{path} is truncated: its header says {expected} bytes, the file has {total}; "
                    "re-export or re-download it")
    return None


def program_bytes(path: Path) -> tuple[bytes, int]:
    """A ``.pte``'s program (its flatbuffer: the extended header says how long; the segments after
    it hold the weights) and the file's size, for reading its methods without its weights."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(40)
        program_size = int.from_bytes(head[16:24], "little") if head[8:12] == b"eh00" and len(head) >= 24 else 0
        rest = handle.read(program_size - len(head)) if len(head) < program_size <= size else handle.read()
    return head + rest, size

def import_runtime_alone() -> None:
    """``import executorch.runtime`` without the exporter. The bindings import
    ``executorch.exir._warnings`` for one decorator, and ``executorch.exir``'s package init imports
    the whole exporter (torch.export, passes, serializer): 4.3 s of the 5.4 s a fresh process spent
    importing the runtime, and ~140 MB. For that one import the package is entered as a bare
    namespace, so only the submodule loads; a later ``import executorch.exir`` (the .pte reader of
    coverage, triage) runs the real package init as usual."""
    if "executorch.runtime" in sys.modules or "executorch.exir" in sys.modules:
        return
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        import executorch.runtime  # noqa: F401 - an unusual layout: the plain import, exporter and all
        return
    bare = types.ModuleType("executorch.exir")
    bare.__path__ = [str(Path(folder) / "exir") for folder in spec.submodule_search_locations]
    sys.modules["executorch.exir"] = bare
    try:
        import executorch.runtime  # noqa: F401
    finally:
        if sys.modules.get("executorch.exir") is bare:
            del sys.modules["executorch.exir"]
        package = sys.modules.get("executorch")
        if package is not None and getattr(package, "exir", None) is bare:
            delattr(package, "exir")


def register_quantized_kernels() -> None:
    """Register the pip package's quantized_decomposed kernels (quantize/dequantize per tensor and
    per channel), so an int8 PT2E program lowered without a delegate loads, as it does in an app
    that links them; a build without them leaves its programs to say OperatorMissing."""
    try:
        import executorch.kernels.quantized  # noqa: F401
    except ImportError:
        pass


_CONTENT_NAME = re.compile(r"[0-9a-f]{64}")


def data_file(program: Path) -> Path | None:
    """The external weights of a program exported with ``external_constants`` (its named data map,
    ``write_tensor_data_to_file``): ``<stem>.ptd`` beside it, the name the runtime is given
    (``load_program(..., data_path=)``, the runner's ``--data_path``); in a device's bundle, where
    the program has its content name, the one ``.ptd`` beside it. None: a self-contained program."""
    program = Path(program)
    beside = program.with_suffix(".ptd")
    if beside.is_file():
        return beside
    if _CONTENT_NAME.fullmatch(program.stem):
        found = sorted(program.parent.glob("*.ptd"))
        if len(found) == 1:
            return found[0]
    return None


def load_program(data: bytes, path: Path | str) -> Any:
    """The runtime's program of ``data`` (read from ``path``), with its external weights where it
    has a ``.ptd`` (:func:`data_file`)."""
    from executorch.runtime import Runtime

    weights = data_file(Path(path)) if str(path) != "<bytes>" else None
    if weights is None:
        return Runtime.get().load_program(data)
    return Runtime.get().load_program(data, data_path=str(weights))


def load_failure_hint(data: bytes, path: Path | str) -> str:
    """What a load failure adds: the delegates the program is lowered to that this runtime does not
    have (it then cannot load the method: Error::NotFound, which says no more), else, for a program
    without a ``.ptd``, that one exported with external weights needs it (the runtime says only
    'external_data_map is null')."""
    missing = missing_delegates(data)
    if missing:
        from executorch.runtime import Runtime

        have = Runtime.get().backend_registry.registered_backend_names
        return (f"; it is lowered to the {', '.join(missing)} delegate{'s' if len(missing) > 1 else ''}, which "
                f"this ExecuTorch runtime does not have (its delegates: {', '.join(have) or 'none'}): the "
                f"executorch backend runs a program on this machine's CPU runtime, and this one runs only "
                f"where that delegate's backend is linked into the runtime (its target's)")
    if str(path) == "<bytes>" or data_file(Path(path)) is not None:
        return ""
    return (f"; a program exported with external weights (external_constants) needs its .ptd beside it as "
            f"{Path(path).with_suffix('.ptd').name}")


def missing_delegates(data: bytes) -> list[str]:
    """The delegates (their ids, ``EthosUBackend``) the program's methods are lowered to that this
    ExecuTorch runtime has not registered; [] where it has them all or the program cannot be read."""
    from executorch.runtime import Runtime

    from .program import UNREADABLE, read_plans

    try:
        wanted = dict.fromkeys(d for plan in read_plans(data) for d in plan.delegates)
    except UNREADABLE:
        return []
    registry = Runtime.get().backend_registry
    return [delegate for delegate in wanted if not registry.is_available(delegate)]
