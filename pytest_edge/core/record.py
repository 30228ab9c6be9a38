"""``Record``: what one test found on one backend, the unit of the JSON report.

The core builds records; the plugin only tells it pytest's outcome. A record's verdict is decided
here, in :meth:`Record.conclude`, and nowhere else. ``to_json``/``from_json`` keep the report's
field names (docs/reports.md); fields a report has that this version does not know are kept
in ``extra`` and written back unchanged.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Mapping

from .. import codec
from ..backends.arena import TensorArena
from ..backends.compiled import Compilation
from ..checks import Finding
from ..errors import EdgeError
from ..files import relative_path, sha256_file
from ..measurement.counts import CountedMeasurement
from .external_data import identity_files
from .generation_figures import (GENERATION_FIGURE_KEYS, ContextSweep, GenerationFigures, PromptResult,
                                 TeacherForcedOverall)

# The backend of a record whose test errored before any backend was chosen (its marker unresolved).
UNRESOLVED_BACKEND = "(unresolved)"

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (requires-python): 3.11's StrEnum, whose str() and format() are the value
    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


class Verdict(StrEnum):
    """A record's verdict, decided by :meth:`Record.conclude` and the constructors. The values are the
    report's strings (SPEC §6), so a member equals what a stored report holds: a report read as JSON
    is compared with members without converting it."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    DOES_NOT_CONVERT = "does not convert"  # a borrowed artifact the backend's frontend cannot convert

    @classmethod
    def from_json(cls, value: Any, where: str) -> "Verdict":
        """The member a report's ``verdict`` names; ValueError naming ``where`` (the file and record)
        for anything else: a stored report is untrusted input."""
        return _member(cls, value, where, "verdict")


class GateVerdict(StrEnum):
    """The merge gate's verdict on a record (``baseline_check["verdict"]``) and on each figure it
    judged (a finding's ``verdict``: failed, inconclusive, or accepted by an acceptance)."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    ACCEPTED = "accepted"  # a failure that an acceptance (core/acceptance.py) passes, with its reason

    @classmethod
    def from_json(cls, value: Any, where: str) -> "GateVerdict":
        """As :meth:`Verdict.from_json`, for a gate's or a finding's verdict."""
        return _member(cls, value, where, "gate verdict")


def _member(enum: Any, value: Any, where: str, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(repr(m.value) for m in enum)
        raise ValueError(f"{where}: unknown {what} {str(value)[:60]!r} (known: {known})") from None


class TimingNotJudged(Enum):
    """Why a record's timing and memory are not judged, as a policy: code compares members; the
    sentence the report shows (its ``timing_not_judged``) is the member's :attr:`reason`, read back
    by :meth:`from_json`. Not a str, so a member written to JSON as it is fails instead of writing a
    name no report has."""

    # An emulated device (edge_emulated_timing = off | record | judge): recorded, or not even measured.
    NOT_JUDGED = "recorded, not judged"
    NOT_MEASURED = "not measured"
    # A compile-time target (an NPU compiler, docs/npu.md).
    COMPILE_ONLY = "compile only"

    @property
    def reason(self) -> str:
        """The report's sentence for this policy (docs/devices-emulated-arm.md and docs/npu.md quote it)."""
        return _TIMING_REASONS[self]

    def __str__(self) -> str:
        return self.reason

    @classmethod
    def from_json(cls, value: Any, where: str) -> "TimingNotJudged | None":
        """The policy a report's ``timing_not_judged`` says (None for none); ValueError naming
        ``where`` for a sentence of no policy: a stored report is untrusted input."""
        try:
            return cls.read(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def read(cls, value: Any) -> "TimingNotJudged | None":
        """:meth:`from_json` without the place (the codec adds it)."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str) and value in _BY_REASON:
            return _BY_REASON[value]
        raise ValueError(f"unknown timing_not_judged {str(value)[:60]!r} (expected null or one of the "
                         "sentences pytest-edge writes: an emulated device's, recorded or not measured, or a "
                         "compile-time target's)")


_TIMING_REASONS = {
    TimingNotJudged.NOT_JUDGED: "emulated device: timing and memory are not the target's",
    TimingNotJudged.NOT_MEASURED: ("emulated device: timing and memory are not the target's, so they were not measured "
                                   "(edge_emulated_timing = record measures them)"),
    TimingNotJudged.COMPILE_ONLY: ("compile-time target: the compiler ran here and nothing executed, so no output was "
                                   "compared and no latency, load time or memory was measured (the compiler's estimate "
                                   "is the record's npu block)"),
}
_BY_REASON = {reason: member for member, reason in _TIMING_REASONS.items()}
NOT_JUDGED, NOT_MEASURED, COMPILE_ONLY = TimingNotJudged.NOT_JUDGED, TimingNotJudged.NOT_MEASURED, \
    TimingNotJudged.COMPILE_ONLY


def timing_not_judged(machine: Mapping[str, Any] | None, emulated_timing: str) -> TimingNotJudged | None:
    """Why budgets and the baseline gate are not judged on this machine (``NOT_MEASURED``: not even
    measured, the default on an emulated device; ``NOT_JUDGED``: recorded), or None."""
    if not machine or not machine.get("emulated") or emulated_timing == "judge":
        return None
    return NOT_MEASURED if emulated_timing == "off" else NOT_JUDGED


def dig(data: Any, *path: str) -> Any:
    """``data[path[0]][path[1]]...`` of a report record, or None where any level is missing."""
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def is_finite_number(value: Any) -> bool:
    """An int or float a float can hold and that is finite (not a bool; not an int of 400 digits,
    which would overflow every page's formatting; not NaN or infinity, which JSON readers accept)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def model_json(name: str, artifact: Path | None, rootdir: Path) -> dict[str, Any]:
    """A record's ``model``: its name (the model's key: ``a/net``, unique per model, so two models never
    share a row or a stored baseline), the artifact relative to the project, the artifact's sha256,
    and where the artifact is made of more files than one (external data, a GenAI folder's
    configuration) ``files``: each one's sha256 by name, the model file's among them."""
    found = {"name": name,
             "artifact": relative_path(artifact, rootdir) if artifact else None,
             "sha256": sha256_file(artifact) if artifact and artifact.is_file() else None}
    if found["sha256"] is not None:
        try:
            files = identity_files(artifact)
        except (EdgeError, OSError):
            files = {}  # a missing data file is the test's error, said where it is loaded
        if len(files) > 1:
            found["files"] = {file: sha256_file(path) for file, path in files.items()}
    return found


def artifact_identity(model: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The sha256 of every file of a record's ``model`` (:func:`model_json`): what an acceptance
    must list to hold for it; () where the record names no artifact."""
    model = model or {}
    files = model.get("files")
    if isinstance(files, Mapping) and files:
        return tuple(str(d) for d in files.values())
    return (model["sha256"],) if isinstance(model.get("sha256"), str) else ()


# The keys of a decoder's block before its measured figures (its spec and accuracy as run).
_GENERATION_RUN = ("config", "new_tokens", "kv_cache", "prompts", "teacher_forced")


@dataclass(frozen=True)
class GenerationRecord:
    """A decoder's part of the record (``Record.generation``; the report's ``llm`` block): its
    configuration, new tokens and how the runtime holds the cache; per prompt the golden's and this
    run's tokens and first-step logits figures; the teacher-forced figures over every prompt; and,
    when measured, the figures of its fresh processes (``measured``: TTFT, TPOT, tokens/s, load,
    memory, per-process figures, the runtime's own counters, written flat in the block), the
    context sweep (``context``) and why an emulator's timing was not judged (``timing_not_judged``).
    The keys of another version's block that this one does not know are kept (``unknown``) and
    written back after the others."""

    # backends.decoder_config.LlmConfig as the report keeps it: an older report's may lack keys.
    config: dict[str, Any] = field(default_factory=dict)
    new_tokens: int = 0
    kv_cache: str | None = None  # how the runtime keeps the cache, in words
    prompts: tuple[PromptResult, ...] = ()
    teacher_forced: TeacherForcedOverall | None = codec.json_field(default=None, omit=lambda v: v is None)
    measured: GenerationFigures | None = codec.json_field(default=None, skip=True)  # None: not measured
    context: ContextSweep | None = codec.json_field(default=None, omit=lambda v: v is None)
    timing_not_judged: TimingNotJudged | None = codec.json_field(
        default=None, omit=lambda v: v is None, encode=lambda policy: policy.reason, decode=TimingNotJudged.read)
    unknown: dict[str, Any] = codec.json_field(default_factory=dict, skip=True)

    def to_json(self) -> dict[str, Any]:
        """The block in the report's order: the run's keys, the measured figures, the sweep, the
        policy, then what another version wrote that this one does not know."""
        data = codec.to_json(self)
        if self.measured is not None:
            run = {key: data.pop(key) for key in _GENERATION_RUN if key in data}
            data = {**run, **codec.to_json(self.measured), **data}
        return {**data, **self.unknown}

    @classmethod
    def from_json(cls, data: Any, where: str = "a report's llm block") -> "GenerationRecord":
        """A block of a report (this version's or another's: what it lacks is empty or not
        measured, what this version does not know is kept); ValueError naming ``where`` and the
        field's path for anything that does not fit."""
        if not isinstance(data, Mapping):
            return codec.from_json(cls, data, where)  # says: expected an object
        measured = (codec.from_json(GenerationFigures, data, where)
                    if any(key in data for key in GENERATION_FIGURE_KEYS) else None)
        unknown = {k: v for k, v in data.items() if k not in _GENERATION_KEYS}
        return codec.from_json(cls, data, where, given={"measured": measured, "unknown": unknown})


_GENERATION_KEYS = {f.name for f in fields(GenerationRecord)} - {"measured", "unknown"} | GENERATION_FIGURE_KEYS


@dataclass(frozen=True)
class SpeechWindow:
    """One window of an audio file longer than the export reads at once (Whisper's 30 s), decoded
    on its own: where it starts, its new tokens, where they part from the golden's window, and its
    latency (audio in to last token out: the per-chunk latency)."""

    start_s: float
    audio_s: float
    tokens: int
    first_difference: int | None
    total_ms: float
    encoder_ms: float | None  # None: not timed apart from the decoder (sherpa-onnx)
    first_token_ms: float | None
    real_time_factor: float


@dataclass(frozen=True)
class SpeechFile:
    """One audio file of a speech check: the reference's (golden) and this run's tokens and
    transcripts, where they part, the error rates and this run's timings."""

    audio: str
    audio_s: float
    golden_tokens: list[int]
    tokens: list[int]
    golden_transcript: str
    transcript: str
    first_difference: int | None  # the first position whose token differs; None: equal
    wer: float
    cer: float
    real_time_factor: float
    features_ms: float
    encoder_ms: float | None  # None: the runtime runs encoder and decoder in one call (sherpa-onnx)
    first_token_ms: float | None  # None: the runtime generates in one call (CTranslate2, sherpa-onnx)
    decode_tokens_per_s: float | None
    # The runtime's own timers of the same run (whisper.cpp's whisper_print_timings), where it keeps them.
    runtime_timers: dict[str, float | str] | None = None
    # Audio longer than one window: each window's figures, in order (one window: empty).
    windows: list[SpeechWindow] = field(default_factory=list)
    # Peak resident memory over the worker's RSS before the recognizer opened (its open or a
    # transcription of this file, the higher); None where it cannot be measured.
    peak_memory_mb: float | None = None


# The block's worst figures over its files, written before them (read back from the files).
@codec.layout(order=("config", "new_tokens", "reference", "transcript_decoding", "wer", "cer", "real_time_factor",
                     "teacher_forced", "files"),
              computed={"wer": lambda s: s.wer, "cer": lambda s: s.cer, "real_time_factor": lambda s: s.real_time_factor})
@dataclass
class SpeechRecord:
    """A speech check's part of the record (``Record.speech``; the report's ``speech`` block): the
    export's decoding configuration, the new tokens, who made the golden, each audio file's
    figures, and the worst WER/CER and real-time factor over them (run.speech_check)."""

    config: dict[str, Any]  # codec.to_json(backends.speech.SpeechConfig), as the report keeps it
    new_tokens: int
    reference: str
    transcript_decoding: str  # how token ids became words (a tokenizer, or one word per id)
    files: list[SpeechFile] = field(default_factory=list)
    # Teacher-forced over the golden's tokens, every file's positions (top-1 agreement, KL divergence).
    teacher_forced: dict[str, Any] | None = None  # llm.metrics.TeacherForced.to_json(): a summary, not read back

    @property
    def wer(self) -> float | None:
        return max((f.wer for f in self.files), default=None)

    @property
    def cer(self) -> float | None:
        return max((f.cer for f in self.files), default=None)

    @property
    def real_time_factor(self) -> float | None:
        return max((f.real_time_factor for f in self.files), default=None)

    # Record.to_json and Record.from_json call these (Record is restructured apart): the codec's.
    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "a report's speech block") -> "SpeechRecord":
        return codec.from_json(cls, data, where)


@dataclass
class Record:
    test: str
    model: dict[str, Any]  # {"name", "artifact", "sha256"} (+ "files": model_json)
    backend: str
    verdict: Verdict = Verdict.PASSED
    violations: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    runtime: dict[str, Any] | None = None
    plugin: dict[str, Any] | None = None
    precision: str | None = None
    threads: int | None = None
    input: dict[str, Any] | None = None
    warmup_runs: int | None = None
    measured_runs: int | None = None
    coverage: dict[str, Any] | None = None
    load_ms: float | None = None
    first_inference_ms: float | None = None
    latency_ms: dict[str, float] | None = None
    latency_quantiles_ms: list[float] | None = None  # pooled runs' 0..100th percentiles
    peak_memory_mb: float | None = None
    steady_memory_mb: float | None = None
    # Resident memory's growth over the timed runs (the median process's): a leak's figure.
    memory_growth_kb_per_run: float | None = None
    memory_growth_mb_per_min: float | None = None
    drift: float | None = None
    timing_under_load: bool | None = None
    other_cores_busy: float | None = None
    processes: list[dict[str, Any]] | None = None
    process_spread: float | None = None
    accuracy: dict[str, Any] | None = None
    # What ships (docs/measurement.md, "Sizes"): the artifact with its external data, and the
    # runtime's installed package where the worker ran (None with the reason in runtime["package"]).
    artifact_bytes: int | None = None
    runtime_bytes: int | None = None
    throughput: float | None = None  # inferences/s over the timed runs: 1000 / mean latency in ms
    # {"tool", "initial", "steady", "reason"} around the timed runs; None when nothing was timed.
    power_and_temperature: dict[str, Any] | None = None
    baseline_check: dict[str, Any] | None = None
    # What the budget checks found (pytest_edge.checks.Finding), in the order of the violations.
    budget_findings: list[Finding] = field(default_factory=list)
    device: dict[str, Any] | None = None  # {"name", "machine"} of the device it ran on; None: this machine
    # Counted mode (--edge-count=instructions): instructions per inference, in the report's "counted"
    # block (written after the other fields, where counted mode's records have always had it).
    counted: CountedMeasurement | None = None
    # A compile-time target's compiler result (docs/npu.md): memory, the estimate, its operators; in
    # the report's "npu" block. Its coverage is the record's coverage.
    npu: Compilation | None = None
    # The tensor arena a microcontroller runtime allocated, as it reports it (backends/arena.py): the
    # report's "arena" block; None for runtimes that plan none.
    arena: TensorArena | None = None
    warnings: list[str] = field(default_factory=list)
    # Backend workers that died between requests during this test and were restarted (how, what was lost).
    restarts: list[str] = field(default_factory=list)
    # A decoder's spec, goldens' and run's figures and measurement (edge_llm): the report's "llm" block.
    generation: GenerationRecord | None = None
    # A speech check's files, tokens, transcripts, WER/CER and timings (edge_asr): the report's "speech" block.
    speech: SpeechRecord | None = None
    # Why timing and memory are not judged here (an emulated device, a compile-time target); None: judged.
    timing_not_judged: TimingNotJudged | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # A check ran and measured what it could: the record has every field (skipped, errored and
    # body-failed records say only who, what and why).
    checked: bool = field(default=False, repr=False)

    # ------------------------------------------------------------ constructors

    @classmethod
    def skipped(cls, test: str, model: dict[str, Any], backend: str, reason: str) -> "Record":
        return cls(test, model, backend, verdict=Verdict.SKIPPED, skip_reason=reason)

    @classmethod
    def not_converted(cls, test: str, model: dict[str, Any], backend: str, reason: str) -> "Record":
        """The backend's frontend cannot convert this (borrowed) artifact: its own outcome."""
        return cls(test, model, backend, verdict=Verdict.DOES_NOT_CONVERT, skip_reason=reason)

    @classmethod
    def errored(cls, test: str, model: dict[str, Any], backend: str, message: str) -> "Record":
        """The check could not run (bad artifact, missing golden): ``message`` says why."""
        return cls(test, model, backend, verdict=Verdict.ERROR, violations=[message])

    @classmethod
    def body_failed(cls, test: str, model: dict[str, Any], backend: str, exception: BaseException) -> "Record":
        """The test's own body failed before the check: its assertion is the failure."""
        return cls(test, model, backend, verdict=Verdict.FAILED,
                   violations=[f"the test body failed: {type(exception).__name__}"])

    def conclude(self, violations: list[str]) -> "Record":
        """The verdict of a check that ran: failed with its violations, else passed."""
        self.violations = list(violations)
        self.verdict = Verdict.FAILED if self.violations else Verdict.PASSED
        return self

    # ------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        # Typed blocks, written after the other fields: counted mode's, a compile-time target's.
        blocks = {"counted": codec.to_json(self.counted)} if self.counted is not None else {}
        generation = {"llm": self.generation.to_json()} if self.generation is not None else {}
        if self.timing_not_judged is not None:  # where the report has always had it: after the llm block
            generation["timing_not_judged"] = self.timing_not_judged.reason
        if self.npu is not None:
            blocks["npu"] = codec.to_json(self.npu)
        if self.arena is not None:
            blocks["arena"] = codec.to_json(self.arena)
        if self.speech is not None:
            blocks["speech"] = self.speech.to_json()
        if not self.checked:  # skipped, errored, or the body failed: what there is to say
            data: dict[str, Any] = {"test": self.test, "model": self.model, "backend": self.backend,
                                    "verdict": str(self.verdict), "violations": self.violations}
            if self.skip_reason is not None:
                data["skip_reason"] = self.skip_reason
            return {**data, **generation, **self.extra, **blocks}
        data = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("extra", "checked", "skip_reason", "counted", "npu", "arena", "generation",
                                  "timing_not_judged", "speech")}
        data["verdict"] = str(self.verdict)  # the report's string (a plain str for xdist's serializer)
        data["budget_findings"] = [finding.to_json() for finding in self.budget_findings]
        for empty in ("warnings", "restarts", "budget_findings"):
            if not data[empty]:
                data.pop(empty)
        for optional in ("baseline_check", "device"):
            if data[optional] is None:
                data.pop(optional)
        return {**data, **generation, **self.extra, **blocks}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a report's record") -> "Record":
        """A record of a report (this version's or another's); ValueError naming ``where`` for a
        verdict that is none of :class:`Verdict`'s."""
        known = {f.name for f in fields(cls)} - {"extra", "checked", "generation", "speech"}
        if not isinstance(data.get("counted"), Mapping):  # none, or not a counted block: kept as it was
            known.discard("counted")
        if not isinstance(data.get("npu"), Mapping):
            known.discard("npu")
        try:
            arena = codec.from_json(TensorArena, data["arena"], f"{where}: arena") \
                if isinstance(data.get("arena"), Mapping) else None
        except ValueError:  # a stored report's block (untrusted) that is no arena's
            arena = None
        if arena is None:  # none, or not an arena block: kept as it was
            known.discard("arena")
        record = cls(**{k: v for k, v in data.items()
                        if k in known and k not in ("budget_findings", "counted", "npu", "arena")})
        record.arena = arena
        record.verdict = Verdict.from_json(data.get("verdict", Verdict.PASSED), where)
        record.timing_not_judged = TimingNotJudged.from_json(data.get("timing_not_judged"), where)
        record.budget_findings = [Finding.from_json(f) for f in data.get("budget_findings") or [] if isinstance(f, Mapping)]
        if "counted" in known:
            record.counted = codec.from_json(CountedMeasurement, data["counted"], f"{where}: counted")
        if "npu" in known:
            record.npu = Compilation.of_record(data["npu"], data.get("coverage"))
        if isinstance(data.get("speech"), Mapping):
            record.speech = SpeechRecord.from_json(data["speech"])
            known.add("speech")
        if isinstance(data.get("llm"), Mapping):
            record.generation = GenerationRecord.from_json(data["llm"], f"{where}: llm")
            known.add("llm")
        record.extra = {k: v for k, v in data.items() if k not in known}
        record.checked = "accuracy" in data
        return record

    # ------------------------------------------------------------ views

    def junit_properties(self) -> list[tuple[str, Any]]:
        """Key figures as JUnit XML properties (``--junitxml``); unmeasured ones left out."""
        latency = self.latency_ms or {}
        coverage = self.coverage or {}
        figures = {"edge_backend": self.backend, "edge_verdict": str(self.verdict),  # a plain str: xdist sends it
                   "edge_max_abs_err": (self.accuracy or {}).get("max_abs_err"),
                   "edge_fallback": coverage.get("fallback"), "edge_partitions": coverage.get("partitions"),
                   "edge_p50_ms": latency.get("p50"), "edge_p99_ms": latency.get("p99"),
                   "edge_load_ms": self.load_ms, "edge_peak_memory_mb": self.peak_memory_mb,
                   "edge_artifact_bytes": self.artifact_bytes, "edge_runtime_bytes": self.runtime_bytes,
                   "edge_throughput": self.throughput}
        if self.generation is not None:  # a decoder's figures, as a tensor model's latency
            measured = self.generation.measured
            figures.update(edge_token_agreement=(self.accuracy or {}).get("token_agreement"))
            if measured is not None:
                figures.update(edge_ttft_p50_ms=measured.ttft_ms.p50 if measured.ttft_ms else None,
                               edge_tpot_p50_ms=measured.tpot_ms.p50 if measured.tpot_ms else None,
                               edge_decode_tokens_per_s=measured.decode_tokens_per_s)
        if self.speech is not None:  # a speech export's rates and its slowest file's real-time factor
            figures.update(edge_wer=self.speech.wer, edge_cer=self.speech.cer,
                           edge_real_time_factor=self.speech.real_time_factor)
        return [(k, v) for k, v in figures.items() if v is not None]
