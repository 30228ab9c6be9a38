"""The requests of the worker's protocol (worker/protocol.py: the envelopes and the version; the
replies' types are worker/replies.py): one dataclass per operation, fields by name, as
pytest-xdist's controller sends named commands; and the requests to a backend's zygote
(worker/zygote.py), in a registry of their own. ``request_json`` is a request as the frame carries
it, ``request_from`` the typed request a decoded frame names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import codec
from ..backends.base import CalibrationCase
from ..errors import BackendError

if TYPE_CHECKING:  # a decoder's worker imports it where it opens one
    from ..backends.decoder_config import LlmConfig


class ProtocolError(BackendError):
    """A frame that is malformed, oversized, of another protocol version, or holds what the codec
    refuses (pickled objects, unknown dtypes)."""


# ------------------------------------------------------------------ requests


@dataclass
class Request:
    op: ClassVar[str]
    # Fields the frame carries as their JSON (codec.to_json, request_json), read back as their type by
    # request_from: the field's name, and its reader (the value, where it came from).
    decoded: ClassVar[tuple[tuple[str, Callable[[Any, str], Any]], ...]] = ()


@dataclass(frozen=True)
class CalibrationSet:
    """What a backend that quantizes at load (Backend.calibrates) is given with the Load: where the
    cases come from (said in the record) and the cases, for LoadedModel.calibrate after the load."""

    source: str
    cases: list[CalibrationCase]


def _llm_config(value: Any, where: str) -> LlmConfig:
    from ..backends.decoder_config import LlmConfig  # a decoder's worker only: a tensor model's never imports it

    return codec.from_json(LlmConfig, value, f"{where}: load's decoder", error=ProtocolError)


def _calibration(value: Any, where: str) -> CalibrationSet:
    return codec.from_json(CalibrationSet, value, f"{where}: load's calibration", error=ProtocolError)


@dataclass
class Load(Request):
    """Load an artifact under ``key``; describe it (coverage unless a measuring worker)."""

    op: ClassVar[str] = "load"
    decoded = (("decoder", _llm_config), ("calibration", _calibration))
    key: str
    path: str
    threads: int | None
    shapes: dict[str, Any] = field(default_factory=dict)  # codec.to_json(backends.InputShapes): JSON on the pipe
    with_coverage: bool = True
    # On a device: the external data files of an .onnx, by location, as content names in its cache.
    external: dict[str, str] = field(default_factory=dict)
    # A decoder LLM's configuration: the artifact is opened as a decoder (Backend.decoders), not as a
    # tensor model; Generate and MeasureGeneration run it.
    decoder: LlmConfig | None = None
    calibration: CalibrationSet | None = None  # a backend that quantizes at load (Backend.calibrates)


@dataclass
class Generate(Request):
    """Greedy decoding of ``new_tokens`` after ``prompt`` on the decoder loaded under ``key``: the
    tokens, the logits the first was chosen from, the prefill and per-token times."""

    op: ClassVar[str] = "generate"
    key: str
    prompt: list[int]
    new_tokens: int


# The timed generations of one MeasureGeneration stop after this many seconds (warm-up: half of it),
# whatever ``runs`` asks: a measurement is bounded by time as well as count (docs/llm.md).
GENERATION_TIME_CAP_S = 60.0


@dataclass
class TeacherForce(Request):
    """The logits at each position of ``tokens`` after ``prompt`` on the decoder loaded under ``key``,
    the tokens fed whatever the decoder would choose (backends.decoder.teacher_forced)."""

    op: ClassVar[str] = "teacher_force"
    key: str
    prompt: list[int]
    tokens: list[int]


@dataclass
class MeasureGeneration(Request):
    """``warmup`` discarded generations, then ``runs`` timed ones (TTFT and TPOT samples), and the
    memory the decoder took over this process's baseline (a fresh measuring worker)."""

    op: ClassVar[str] = "measure_generation"
    key: str
    prompt: list[int]
    new_tokens: int
    warmup: int
    runs: int


@dataclass
class OpenSpeech(Request):
    """Open the speech export in ``folder`` under ``key`` (Backend.speech): its recognizer stays in
    this worker; the reply is its configuration (its backends.speech.SpeechConfig through the codec)."""

    op: ClassVar[str] = "open_speech"
    key: str
    folder: str
    threads: int

    @property
    def path(self) -> str:
        """What it opens, as a Load's ``path`` says (a worker's restart note names it)."""
        return self.folder


@dataclass
class Transcribe(Request):
    """Greedy recognition of ``audio`` (float32 samples at the configuration's rate) for at most
    ``new_tokens`` tokens; the reply is a backends.speech.Transcription's to_reply()."""

    op: ClassVar[str] = "transcribe"
    key: str
    audio: np.ndarray
    new_tokens: int


@dataclass
class ForceSpeech(Request):
    """The decoder's logits at each position of ``tokens`` fed after the forced start, on ``audio``:
    {"logits": [len(tokens), vocab], or None where the runtime gives none}."""

    op: ClassVar[str] = "force_speech"
    key: str
    audio: np.ndarray
    tokens: list[int]


@dataclass
class LimitAddressSpace(Request):
    """Let this worker map at most ``limit_mb`` more than it has now, for the rest of its life (a
    fresh worker of the context sweep, before its decoder is loaded): the limit in bytes."""

    op: ClassVar[str] = "limit_address_space"
    limit_mb: float


@dataclass
class ProbeContext(Request):
    """One point of the context sweep on the decoder loaded under ``key`` (in a fresh worker, loaded
    for ``context`` positions): a prompt of ``context`` - 1 tokens and one decode step, and the
    memory it took over the worker's RSS before the load."""

    op: ClassVar[str] = "probe_context"
    key: str
    context: int
    vocab_size: int  # the prompt's ids are drawn below it


@dataclass
class Run(Request):
    op: ClassVar[str] = "run"
    key: str
    feeds: list[np.ndarray]
    reset: bool = True


@dataclass
class Measure(Request):
    """The timing and memory protocol in this worker: ``warmup`` runs, then at least ``runs`` timed
    runs taking at least ``min_time_s`` together."""

    op: ClassVar[str] = "measure"
    key: str
    feeds: list[np.ndarray]
    warmup: int
    runs: int
    min_time_s: float = 0.0


@dataclass
class Count(Request):
    """Counted mode, in a worker running under Valgrind's callgrind: ``warmup`` runs uncounted, then
    the instructions (and simulated cache misses) of ``runs`` runs, per inference."""

    op: ClassVar[str] = "count"
    key: str
    feeds: list[np.ndarray]
    warmup: int
    runs: int


@dataclass
class ReadIntermediates(Request):
    """One run of ``key`` that keeps the tensors computed on the way (a backend's ``Intermediates``)."""

    op: ClassVar[str] = "intermediates"
    key: str
    feeds: list[np.ndarray]


@dataclass
class Start(Request):
    """The first request to a device worker (``--stdio``) and to a spare (``--spare``): which
    backend to serve; a spare's ``source`` is where it comes from (backends.backend_source; a
    device's install is its own: none)."""

    op: ClassVar[str] = "start"
    backend: str
    source: str | None = codec.optional()


@dataclass
class Has(Request):
    """Does the device's artifact cache hold ``name`` (``<sha256><suffix>``)?"""

    op: ClassVar[str] = "has"
    name: str


@dataclass
class Put(Request):
    """Store an artifact in the device's cache under its content name (checked on arrival)."""

    op: ClassVar[str] = "put"
    name: str
    data: np.ndarray  # uint8


@dataclass
class Ping(Request):
    op: ClassVar[str] = "ping"


@dataclass
class Exit(Request):
    op: ClassVar[str] = "exit"


REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (Load, Run, Measure, Count, ReadIntermediates, Start, Has, Put,
                                                                Ping, Exit, Generate, MeasureGeneration,
                                                                TeacherForce, LimitAddressSpace, ProbeContext,
                                                                OpenSpeech, Transcribe, ForceSpeech)}


# ------------------------------------------------------------------ the zygote's requests
# From the host to a backend's zygote (worker/zygote.py), as JSON over its Unix socket: a registry
# of their own, so a worker refuses a zygote's op and the zygote a worker's (Exit, ending either, aside).


@dataclass
class Fork(Request):
    """Fork a fresh worker on the two file descriptors sent with this request (SCM_RIGHTS): its
    connection and its log. Replies its pid."""

    op: ClassVar[str] = "fork"


@dataclass
class ProcessStatus(Request):
    """The exit code of the zygote's child ``pid`` (negative: the signal that ended it), None while it
    runs, after waiting up to ``timeout_s`` for it to end."""

    op: ClassVar[str] = "status"
    pid: int
    timeout_s: float


@dataclass
class KillProcess(Request):
    """SIGKILL the zygote's child ``pid``, if it still runs."""

    op: ClassVar[str] = "kill"
    pid: int


ZYGOTE_REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (Fork, ProcessStatus, KillProcess, Exit)}


def request_json(request: Request) -> dict[str, Any]:
    """``request`` as the frame carries it: its fields by name, each as its JSON (arrays as arrays),
    but an optional one's None (Start's source: a device's Start is what it always was)."""
    args = {}
    for f in fields(request):
        value = getattr(request, f.name)
        if not codec.omitted(f, value):
            args[f.name] = codec.to_json(value)
    return {"op": request.op, "args": args}


def request_from(message: Any, registry: Mapping[str, type[Request]] = REQUESTS) -> Request:
    """The typed request of ``registry`` (a worker's, or ZYGOTE_REQUESTS) a decoded message names;
    ProtocolError for anything else."""
    if (not isinstance(message, dict) or not isinstance(message.get("op"), str) or message["op"] not in registry
            or not isinstance(message.get("args"), dict)):
        raise ProtocolError(f"not a request: {str(message)[:200]}")
    cls = registry[message["op"]]
    names = {f.name for f in fields(cls)}
    unknown = set(message["args"]) - names
    if unknown:
        raise ProtocolError(f"{cls.op}: unknown field(s) {sorted(unknown)}")
    args = dict(message["args"])
    for name, read in cls.decoded:
        if args.get(name) is not None:
            args[name] = read(args[name], str(args.get("path", cls.op)))
    try:
        return cls(**args)
    except TypeError as exc:
        raise ProtocolError(f"{cls.op}: {exc}") from None


__all__ = ["GENERATION_TIME_CAP_S", "ProtocolError", "Request", "CalibrationSet", "Load", "Generate", "MeasureGeneration", "TeacherForce",
           "LimitAddressSpace", "ProbeContext", "OpenSpeech", "Transcribe", "ForceSpeech", "Run", "Measure", "Count",
           "ReadIntermediates", "Start", "Has", "Put", "Ping", "Exit", "REQUESTS", "Fork", "ProcessStatus",
           "KillProcess", "ZYGOTE_REQUESTS", "request_json", "request_from"]
