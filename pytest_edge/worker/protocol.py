"""The messages between the pytest process and a backend worker: typed requests (one dataclass per
operation, fields by name, as pytest-xdist's controller sends named commands: :mod:`.requests`,
re-exported here) and replies, versioned; and the requests to a backend's zygote (worker/zygote.py),
in a registry of their own. The worker's frames, a codec that executes nothing (no pickle, so the
same protocol crosses a machine boundary, a device over SSH or adb, without a peer being able to run
code on the other side), are :mod:`.frames`; the zygote's messages are JSON, as bounded and as free
of pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from .. import codec
from ..backends.arena import TensorArena
from ..backends.decoder import RuntimeCounters
from ..backends.tensors import Coverage, TensorSpec
from ..measurement.machine import Machine
from .requests import (GENERATION_TIME_CAP_S, REQUESTS, ZYGOTE_REQUESTS, CalibrationSet, Count, Exit, ForceSpeech,
                       Fork, Generate, Has, KillProcess, LimitAddressSpace, Load, Measure, MeasureGeneration, OpenSpeech, Ping,
                       ProbeContext, ProcessStatus, ProtocolError, Put, ReadIntermediates, Request, Run, Start,
                       TeacherForce, Transcribe, request_from, request_json)

PROTOCOL_VERSION = 6  # 2: Load.external (an .onnx's external data files on a device); 3: Load.shapes an InputShapes;
# 4: Load.decoder, Generate, MeasureGeneration (decoder LLMs); 5: TeacherForce; 6: LimitAddressSpace, ProbeContext


# ------------------------------------------------------------------ replies
# A request's value, typed (as backends.decoder.Generation is Generate's): the worker sends
# ``codec.to_json(value)`` (what the frame codec carries: dicts, lists, numbers, arrays), the pytest
# side reads it with :func:`reply_as`; a reply without a field it needs, or with one of another type,
# is a ProtocolError naming the request.

R = TypeVar("R")


def reply_as(cls: type[R], op: str, reply: Any, **given: Any) -> R:
    """``reply`` to the request ``op`` read as ``cls``, with the values of its fields the request
    holds by name (``given``, as ``dataclasses.replace`` takes them: a Generation's prompt);
    ProtocolError naming the request and the field."""
    return codec.from_json(cls, reply, f"malformed reply to {op}", error=ProtocolError, given=given or None)


@codec.layout(order=("inputs", "outputs", "runtime", "coverage", "load_ms", "precision", "shape_sources",
                     "threads_applied", "arena"))  # the reply's order since protocol 3
@dataclass
class Loaded:
    """Load's reply for a tensor model: its signature, the runtime (delegates and installed package
    only where coverage was read), its coverage (None in a measuring worker), load time, precision,
    whether the thread count was applied, where each input's shape came from, and the tensor arena a
    microcontroller runtime reports (None for other runtimes; a reply without it: None)."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    runtime: dict[str, Any]  # what the runtime says of itself: name, version, delegates, package, its details
    coverage: Coverage | None
    load_ms: float
    precision: str
    threads_applied: bool
    shape_sources: dict[str, str] = field(default_factory=dict)  # LoadedModel.shape_sources
    arena: TensorArena | None = None  # LoadedModel.arena()


@dataclass(frozen=True)
class RuntimeName:
    """A runtime as a worker's hello and a decoder's Load reply name it: its distribution (the
    backend's PyPI name) and its version (None where it is not installed as a distribution)."""

    name: str
    version: str | None


@dataclass
class DecoderLoaded:
    """Load's reply for a decoder (``Load.decoder``): its load time and runtime."""

    load_ms: float
    runtime: RuntimeName


def _logits(value: Any) -> np.ndarray:
    return np.asarray(value, np.float32)


@dataclass
class TeacherForcedLogits:
    """TeacherForce's reply: the logits [len(tokens), vocab] at each position of the forced tokens."""

    logits: np.ndarray = codec.json_field(decode=_logits)


@dataclass
class GenerationTimes:
    """MeasureGeneration's reply: per timed generation its TTFT, decode time (after the first token)
    and whole time, every TPOT sample, how many ran (fewer than asked where the time cap stopped
    them), the memory over the load's base, the machine probe, and the runtime's own counters per
    generation (None where it keeps none)."""

    ttft_s: list[float]
    tpot_s: list[float]
    decode_s: list[float]
    generation_s: list[float]
    runs: int
    peak_memory_mb: float | None
    steady_memory_mb: float | None
    probe_us: float | None
    runtime_timings: list[RuntimeCounters | None] | None = None  # a runtime's own counters (Decoder.runtime_timings)


@dataclass
class ContextMemory:
    """ProbeContext's reply: peak and steady memory over the worker's RSS before the load (None
    where the high-water mark could not be trusted)."""

    peak_memory_mb: float | None
    steady_memory_mb: float | None


def _no_cache(cache: dict[str, float]) -> bool:
    return not cache  # no cache simulation: no ``cache`` key, as counted mode has always written


@dataclass
class CountedRuns:
    """Count's reply (worker/callgrind.count_runs): how many runs were counted after how many
    uncounted ones, the median run's instructions and, with the cache simulation, its data reads,
    writes and simulated misses by name (``data_reads``, ``l1_read_misses``, ...), how far the runs
    lay apart (largest over smallest, minus one; None where one counted nothing) and each run's
    instructions."""

    runs: int
    warmup_runs: int
    instructions: float
    cache: dict[str, float] = codec.json_field(default_factory=dict, omit=_no_cache)
    run_spread: float | None = None
    run_instructions: list[int] = field(default_factory=list)


# ------------------------------------------------------------------ the hellos
# The first message of a worker and of a zygote: the value of an ``ok`` envelope, typed as a reply is.


@dataclass(frozen=True)
class WorkerHello:
    """A worker's first message: the protocol it speaks, the pytest-edge it runs, its backend, the
    device's machine (None: this machine's worker) and its runtime."""

    protocol: int
    plugin: str
    backend: str
    machine: Machine | None  # measurement.machine.machine_info().on_device(): a record's device.machine block
    runtime: RuntimeName | None


@dataclass(frozen=True)
class ZygoteHello:
    """A zygote's first message, once its runtime is imported: its pid, the import's seconds and
    the threads it holds (what every forked worker starts with)."""

    pid: int
    import_s: float
    threads: int


def ok(value: Any) -> dict[str, Any]:
    return {"ok": True, "value": value}


def failure(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "message": message}


def hello(backend: str, machine: Machine | None = None, runtime: RuntimeName | None = None) -> dict[str, Any]:
    """The worker's first frame: who it is, which protocol it speaks, and (a device) its machine."""
    from .. import __version__

    return ok(codec.to_json(WorkerHello(PROTOCOL_VERSION, __version__, backend, machine, runtime)))


__all__ = ["PROTOCOL_VERSION", "GENERATION_TIME_CAP_S", "ProtocolError", "Request", "CalibrationSet", "Load", "Generate",
           "MeasureGeneration", "TeacherForce", "LimitAddressSpace", "ProbeContext", "OpenSpeech", "Transcribe",
           "ForceSpeech", "Run", "Measure", "Count", "ReadIntermediates", "Start", "Has", "Put", "Ping", "Exit",
           "REQUESTS", "Fork", "ProcessStatus", "KillProcess", "ZYGOTE_REQUESTS", "request_json", "request_from", "ok",
           "reply_as", "Loaded", "RuntimeName", "DecoderLoaded", "TeacherForcedLogits", "GenerationTimes", "ContextMemory",
           "CountedRuns", "WorkerHello", "ZygoteHello",
           "failure", "hello"]
