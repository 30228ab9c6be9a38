"""``Record``: what one test found on one backend, the unit of the JSON report.

The core builds records; the plugin only tells it pytest's outcome. A record's verdict is decided
here, in :meth:`Record.conclude`, and nowhere else. ``to_json``/``from_json`` keep the report's
field names (docs/reports.md); fields a report has that this version does not know are kept
in ``extra`` and written back unchanged. The blocks the package builds are typed
(core/record_blocks.py, generation_record.py, speech_record.py); the verdicts are verdicts.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .. import codec
from ..backends.tensors import Coverage
from ..checks import Finding
from ..measurement.combined import MeasuredProcess
from ..measurement.sensors import SensorWindow
from .record_accuracy import Accuracy, DecoderAccuracy, SpeechAccuracy, TensorAccuracy, read_accuracy
from .record_blocks import (AudioInput, DeviceRun, InputTensor, ModelIdentity, PluginIdentity, RecordCoverage,
                            RecordInput, RuntimeIdentity, read_block, read_input)

if TYPE_CHECKING:
    from ..backends.arena import TensorArena
    from ..backends.compiled import Compilation
    from ..measurement.counts import CountedMeasurement
    from .baseline_check import BaselineCheck
    from .generation_record import GenerationRecord
    from .speech_record import SpeechFile, SpeechRecord, SpeechWindow  # noqa: F401 - re-exported below
from .verdicts import (COMPILE_ONLY, NOT_JUDGED, NOT_MEASURED, GateVerdict, TimingNotJudged, Verdict,
                       timing_not_judged)

# The backend of a record whose test errored before any backend was chosen (its marker unresolved).
UNRESOLVED_BACKEND = "(unresolved)"


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
    """A record's ``model`` as JSON (:meth:`ModelIdentity.of`), for callers that write it as it is."""
    return ModelIdentity.of(name, artifact, rootdir).to_json()


def artifact_identity(model: ModelIdentity | Mapping[str, Any] | None) -> tuple[str, ...]:
    """The sha256 of every file of a record's ``model``: what an acceptance must list to hold for
    it; () where the record names no artifact (:meth:`ModelIdentity.identity`)."""
    return (read_block(ModelIdentity, model) or ModelIdentity()).identity()


@dataclass
class Record:
    test: str
    model: ModelIdentity
    backend: str
    verdict: Verdict = Verdict.PASSED
    violations: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    runtime: RuntimeIdentity | None = None
    plugin: PluginIdentity | None = None
    precision: str | None = None
    threads: int | None = None
    input: RecordInput | None = None
    warmup_runs: int | None = None
    measured_runs: int | None = None
    coverage: RecordCoverage | None = None  # a Coverage given is kept as its JSON reads (RecordCoverage.of)
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
    processes: list[MeasuredProcess] | None = None  # each fresh process's own figures
    process_spread: float | None = None
    accuracy: Accuracy | None = None  # the type of the record's kind (accuracy_kind)
    # What ships (docs/measurement.md, "Sizes"): the artifact with its external data, and the
    # runtime's installed package where the worker ran (None with the reason in runtime.package).
    artifact_bytes: int | None = None
    runtime_bytes: int | None = None
    throughput: float | None = None  # inferences/s over the timed runs: 1000 / mean latency in ms
    # The sensors' readings around the timed runs; None when nothing was timed.
    power_and_temperature: SensorWindow | None = None
    baseline_check: BaselineCheck | None = None  # the merge gate's summary; None: no gate ran
    # What the budget checks found (pytest_edge.checks.Finding), in the order of the violations.
    budget_findings: list[Finding] = field(default_factory=list)
    device: DeviceRun | None = None  # the device it ran on; None: this machine
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

    def __post_init__(self) -> None:
        # A block given as its JSON (a stored record read back, a test's literal) is read as its type,
        # leniently: what the record holds is typed whoever built it.
        self.model = read_block(ModelIdentity, self.model)
        self.runtime = read_block(RuntimeIdentity, self.runtime)
        self.plugin = read_block(PluginIdentity, self.plugin)
        self.device = read_block(DeviceRun, self.device)
        if self.baseline_check is not None:  # the gate's block (imported where a gate ran or is read)
            from .baseline_check import BaselineCheck

            self.baseline_check = read_block(BaselineCheck, self.baseline_check)
        self.power_and_temperature = read_block(SensorWindow, self.power_and_temperature)
        if self.processes is not None:  # not a list (a stored report's garbage): none
            self.processes = [p if isinstance(p, MeasuredProcess) else codec.from_json(MeasuredProcess, p, "a process")
                              for p in self.processes] if isinstance(self.processes, list) else None
        self.coverage = RecordCoverage.of(self.coverage) if isinstance(self.coverage, Coverage) \
            else read_block(RecordCoverage, self.coverage)
        if not _typed_input(self.input):
            self.input = read_input(self.input)
        self.accuracy = read_accuracy(self.accuracy, self.accuracy_kind)

    @property
    def accuracy_kind(self) -> type[Accuracy]:
        """The type of this record's ``accuracy``: a decoder's, a speech export's, else a tensor model's."""
        return DecoderAccuracy if self.generation is not None else SpeechAccuracy if self.speech is not None \
            else TensorAccuracy

    # ------------------------------------------------------------ constructors

    @classmethod
    def skipped(cls, test: str, model: ModelIdentity, backend: str, reason: str) -> "Record":
        return cls(test, model, backend, verdict=Verdict.SKIPPED, skip_reason=reason)

    @classmethod
    def not_converted(cls, test: str, model: ModelIdentity, backend: str, reason: str) -> "Record":
        """The backend's frontend cannot convert this (borrowed) artifact: its own outcome."""
        return cls(test, model, backend, verdict=Verdict.DOES_NOT_CONVERT, skip_reason=reason)

    @classmethod
    def errored(cls, test: str, model: ModelIdentity, backend: str, message: str) -> "Record":
        """The check could not run (bad artifact, missing golden): ``message`` says why."""
        return cls(test, model, backend, verdict=Verdict.ERROR, violations=[message])

    @classmethod
    def body_failed(cls, test: str, model: ModelIdentity, backend: str, exception: BaseException) -> "Record":
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
            blocks["speech"] = codec.to_json(self.speech)
        if not self.checked:  # skipped, errored, or the body failed: what there is to say
            data: dict[str, Any] = {"test": self.test, "model": self.model.to_json(), "backend": self.backend,
                                    "verdict": str(self.verdict), "violations": self.violations}
            if self.skip_reason is not None:
                data["skip_reason"] = self.skip_reason
            return {**data, **generation, **self.extra, **blocks}
        data = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("extra", "checked", "skip_reason", "counted", "npu", "arena", "generation",
                                  "timing_not_judged", "speech")}
        data["verdict"] = str(self.verdict)  # the report's string (a plain str for xdist's serializer)
        for block in _TYPED_BLOCKS:
            data[block] = codec.to_json(data[block])
        data["budget_findings"] = codec.to_json(self.budget_findings)
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
        # Each kind's blocks, imported where a report has them (a tensor check's session never does).
        from ..backends.arena import TensorArena
        from ..backends.compiled import Compilation
        from ..measurement.counts import CountedMeasurement
        from .generation_record import GenerationRecord
        from .speech_record import SpeechRecord

        try:
            arena = codec.from_json(TensorArena, data["arena"], f"{where}: arena") \
                if isinstance(data.get("arena"), Mapping) else None
        except ValueError:  # a stored report's block (untrusted) that is no arena's
            arena = None
        if arena is None:  # none, or not an arena block: kept as it was
            known.discard("arena")
        record = cls(**{k: v for k, v in data.items()
                        if k in known and k not in ("budget_findings", "counted", "npu", "arena", "accuracy")})
        record.arena = arena
        record.verdict = Verdict.from_json(data.get("verdict", Verdict.PASSED), where)
        record.timing_not_judged = TimingNotJudged.from_json(data.get("timing_not_judged"), where)
        record.budget_findings = [codec.from_json(Finding, f, f"{where}: a budget finding")
                                  for f in data.get("budget_findings") or [] if isinstance(f, Mapping)]
        if "counted" in known:
            record.counted = codec.from_json(CountedMeasurement, data["counted"], f"{where}: counted")
        if "npu" in known:
            record.npu = Compilation.of_record(data["npu"], data.get("coverage"))
        if isinstance(data.get("speech"), Mapping):
            record.speech = codec.from_json(SpeechRecord, data["speech"], "a report's speech block")
            known.add("speech")
        if isinstance(data.get("llm"), Mapping):
            record.generation = GenerationRecord.from_json(data["llm"], f"{where}: llm")
            known.add("llm")
        record.accuracy = read_accuracy(data.get("accuracy"), record.accuracy_kind)  # its kind known now
        record.extra = {k: v for k, v in data.items() if k not in known}
        record.checked = "accuracy" in data
        return record

    # ------------------------------------------------------------ views

    def junit_properties(self) -> list[tuple[str, Any]]:
        """Key figures as JUnit XML properties (``--junitxml``); unmeasured ones left out."""
        latency = self.latency_ms or {}
        coverage = self.coverage or RecordCoverage()
        figures = {"edge_backend": self.backend, "edge_verdict": str(self.verdict),  # a plain str: xdist sends it
                   "edge_max_abs_err": getattr(self.accuracy, "max_abs_err", None),  # a speech export has none
                   "edge_fallback": coverage.fallback, "edge_partitions": coverage.partitions,
                   "edge_p50_ms": latency.get("p50"), "edge_p99_ms": latency.get("p99"),
                   "edge_load_ms": self.load_ms, "edge_peak_memory_mb": self.peak_memory_mb,
                   "edge_artifact_bytes": self.artifact_bytes, "edge_runtime_bytes": self.runtime_bytes,
                   "edge_throughput": self.throughput}
        if self.generation is not None:  # a decoder's figures, as a tensor model's latency
            measured = self.generation.measured
            figures.update(edge_token_agreement=getattr(self.accuracy, "token_agreement", None))
            if measured is not None:
                figures.update(edge_ttft_p50_ms=measured.ttft_ms.p50 if measured.ttft_ms else None,
                               edge_tpot_p50_ms=measured.tpot_ms.p50 if measured.tpot_ms else None,
                               edge_decode_tokens_per_s=measured.decode_tokens_per_s)
        if self.speech is not None:  # a speech export's rates and its slowest file's real-time factor
            figures.update(edge_wer=self.speech.wer, edge_cer=self.speech.cer,
                           edge_real_time_factor=self.speech.real_time_factor)
        return [(k, v) for k, v in figures.items() if v is not None]


# The record's typed blocks (core/record_blocks.py, record_accuracy.py, baseline_check.py, measurement/), written as
# their JSON.
_TYPED_BLOCKS = ("model", "runtime", "plugin", "input", "coverage", "processes", "accuracy", "power_and_temperature",
                 "baseline_check", "device")


def _typed_input(value: Any) -> bool:
    if value is None or isinstance(value, AudioInput):
        return True
    return isinstance(value, dict) and all(isinstance(spec, InputTensor) for spec in value.values())


def __getattr__(name: str) -> Any:
    # The kinds' blocks are still this module's names (core.record.GenerationRecord), imported on
    # first use: a tensor check's session does not pay for a decoder's or a speech export's types.
    if name == "GenerationRecord":
        from .generation_record import GenerationRecord

        return GenerationRecord
    if name in ("SpeechFile", "SpeechRecord", "SpeechWindow"):
        from . import speech_record

        return getattr(speech_record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMPILE_ONLY", "NOT_JUDGED", "NOT_MEASURED", "UNRESOLVED_BACKEND", "AudioInput", "DeviceRun",
           "GateVerdict", "GenerationRecord", "InputTensor", "ModelIdentity", "PluginIdentity", "Record",
           "RuntimeIdentity", "SpeechFile", "SpeechRecord", "SpeechWindow", "TimingNotJudged", "Verdict",
           "artifact_identity", "dig", "is_finite_number", "model_json", "timing_not_judged"]
