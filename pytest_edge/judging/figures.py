"""What the merge gate judges, as a type: :class:`GateFigures`, parsed once at the boundary from a
record's JSON (a stored report's record, an A/B twin's measurement made into one, a decoder's
generation view), and the timed figures it reads per process (:class:`TimedFigure`).

The parser keeps today's treatment of bad or missing values, figure by figure: a value that is not a
number (a string, null, a list) is absent, as is a per-process timing figure that is not positive
(NaN and negatives included); a figure is never guessed. The gate (:mod:`.regressions`,
:mod:`.gate`, :mod:`.counted`) then reads attributes, never a dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

from .. import codec
from ..core.record import dig, is_finite_number
from ..measurement.counts import CountedMeasurement
from ..measurement.timing import MIN_RUNS

if TYPE_CHECKING:
    from ..core.record import Record
    from ..measurement.combined import TimedMeasurement


@dataclass(frozen=True)
class TimedFigure:
    """A per-process timing figure the gate judges: ``key`` in each process's figures (and in the
    record's pooled ``latency_ms``), its name in messages, the fewest runs per process from which it
    is gated, and whether it is a tail (gated in A/B mode only, with its own threshold)."""

    key: str
    name: str  # "P50 latency", "TTFT P50"
    per_process: str  # "P50", "TTFT P50": what one process contributes, in "geometric mean of 3 process P50s"
    min_runs: int = 1
    tail: bool = False


# A P99 of a few hundred runs rests on a handful of slow runs (an interrupt, a page fault): gated
# from 1000 runs, ten runs beyond it in every process.
LATENCY_FIGURES = (TimedFigure("p50", "P50 latency", "P50", MIN_RUNS["p50"]),
                   TimedFigure("p99", "P99 latency", "P99", 1000, tail=True))
# A decoder's figures (docs/llm.md): per fresh process, the median time to first token and the
# median time per output token.
GENERATION_FIGURES = (TimedFigure("ttft_p50_ms", "TTFT P50", "TTFT P50"),
                      TimedFigure("tpot_p50_ms", "TPOT P50", "TPOT P50"))
# The per-process keys the parser keeps (every timed figure's).
TIMED_KEYS = tuple(f.key for f in (*LATENCY_FIGURES, *GENERATION_FIGURES))
# A compile-time target's memories as its compiler planned them (the record's npu.memories).
NPU_MEMORY_KEYS = ("sram", "off_chip_flash", "dram")


def is_number(value: Any) -> bool:
    """An int or float, not a bool (JSON's true is no figure)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    # The per-process filter as the gate always applied it (NaN and negatives fail ``> 0``).
    return isinstance(value, (int, float)) and value > 0


@dataclass(frozen=True)
class ProcessFigures:
    """One fresh process's figures: its timed figures (TimedFigure keys, positive values only), its
    timed runs, the CPU probe's median and its fastest run (``min``), each None where absent. A
    process written as something other than an object keeps its place (A/B pairs stay aligned) and
    has no figure."""

    timed: Mapping[str, float] = field(default_factory=dict)
    runs: int | None = None
    probe_us: float | None = None
    fastest_ms: float | None = None
    peak_memory_mb: float | None = None  # this process's peak over its load's base
    start: str | None = None  # how the process started: "forked" (from a zygote) or "spawned"

    @classmethod
    def from_json(cls, process: Any) -> "ProcessFigures":
        if not isinstance(process, Mapping):
            return cls()
        runs, probe, fastest = process.get("runs"), process.get("probe_us"), process.get("min")
        return cls(timed={k: float(process[k]) for k in TIMED_KEYS if _positive(process.get(k))},
                   runs=runs if isinstance(runs, int) else None,
                   probe_us=probe if _positive(probe) else None,
                   fastest_ms=fastest if _positive(fastest) else None,
                   peak_memory_mb=peak if _positive(peak := process.get("peak_memory_mb")) else None,
                   start=start if isinstance(start := process.get("start"), str) else None)


@dataclass(frozen=True)
class GateFigures:
    """Exactly what the merge gate reads of one side (the candidate, or its baseline): the backend,
    the per-process figures, the pooled latency and run count (the fallback of a report without
    per-process figures), peak memory, the artifact's size and path, delegate coverage (the
    fallback fraction, the operators delegated, the runtime's reasons for those that fell back),
    the compiler's NPU memories, the counted instructions, and whether the timing was judged and
    taken under load. ``source`` says where the figures were read (for a reader; the gate's
    messages name the baseline themselves)."""

    backend: str
    source: str = ""
    processes: tuple[ProcessFigures, ...] = ()
    pooled_ms: Mapping[str, float] = field(default_factory=dict)  # latency_ms, numbers only
    measured_runs: int | None = None
    peak_memory_mb: float | None = None
    artifact_bytes: float | None = None  # as written (an int stays an int in messages)
    artifact: str | None = None
    fallback: float | None = None  # delegate coverage: the fraction of work outside the delegate
    delegated_op_ids: tuple[Any, ...] | None = None
    fallback_reasons: Mapping[Any, Any] | None = None
    # the operators on the CPU by the runtime's type name and count (CUMSUM: 1), and the partitions
    fallback_op_names: Mapping[str, int] | None = None
    partitions: int | None = None
    npu_memories: Mapping[str, float] = field(default_factory=dict)  # bytes, as written
    npu_estimated_ms: float | None = None  # the compiler's estimate at its clock: exact for one compiler
    arena_bytes: float | None = None  # a microcontroller runtime's tensor arena (its report: exact)
    counted: CountedMeasurement | None = None
    timing_not_judged: bool = False
    under_load: bool = False
    other_cores_busy: float | None = None

    @classmethod
    def from_json(cls, record: Mapping[str, Any], source: str = "") -> "GateFigures":
        """The figures of a record's JSON (or a measurement made into one). Nothing raises: a
        figure that is not a number is absent, as is a per-process timing figure that is not
        positive; ``processes`` that is not a list holds none."""
        processes = record.get("processes")
        pooled = record.get("latency_ms")
        coverage = record.get("coverage")
        delegated = dig(coverage, "delegated_op_ids")
        reasons = dig(coverage, "fallback_reasons")
        runs, busy = record.get("measured_runs"), record.get("other_cores_busy")
        numbers = {k: dig(record, *path) for k, path in (("peak", ("peak_memory_mb",)), ("bytes", ("artifact_bytes",)),
                                                            ("fallback", ("coverage", "fallback")))}
        numbers = {k: v if is_finite_number(v) else None for k, v in numbers.items()}
        return cls(
            backend=str(record.get("backend")), source=source,
            processes=tuple(map(ProcessFigures.from_json, processes)) if isinstance(processes, (list, tuple)) else (),
            # any int or float: the fallback takes a positive one, the messages any but a bool (as always)
            pooled_ms={k: v for k, v in pooled.items() if isinstance(v, (int, float))}
            if isinstance(pooled, Mapping) else {},
            measured_runs=runs if isinstance(runs, int) else None,
            peak_memory_mb=numbers["peak"], artifact_bytes=numbers["bytes"],
            artifact=str(artifact) if (artifact := dig(record, "model", "artifact")) else None,
            fallback=numbers["fallback"],
            delegated_op_ids=tuple(delegated) if isinstance(delegated, list) else None,
            fallback_reasons=dict(reasons) if isinstance(reasons, Mapping) else None,
            fallback_op_names={str(k): int(v) for k, v in names.items()}
            if isinstance(names := dig(coverage, "fallback_op_names"), Mapping)
            and all(is_number(v) and v >= 0 for v in names.values()) else None,
            partitions=int(parts) if is_number(parts := dig(coverage, "partitions")) and parts >= 0 else None,
            npu_estimated_ms=float(est) if is_finite_number(est := dig(record, "npu", "estimated_ms")) and est > 0
            else None,
            arena_bytes=arena if is_finite_number(arena := dig(record, "arena", "total_bytes")) and arena >= 0 else None,
            npu_memories={k: v for k in NPU_MEMORY_KEYS if is_finite_number(v := dig(record, "npu", "memories", k))},
            counted=CountedMeasurement.of(record),
            timing_not_judged=bool(record.get("timing_not_judged")),
            under_load=bool(record.get("under_load", record.get("timing_under_load"))),
            other_cores_busy=busy if isinstance(busy, (int, float)) else None)

    @classmethod
    def of_record(cls, record: "Record") -> "GateFigures":
        """A live record's figures. Read from its JSON, not its fields: the gate judges this run's
        record exactly as it judges the same record once written to a report (one parser, one
        treatment of an absent figure), so ``pytest-edge report compare`` agrees with the gate."""
        return cls.from_json(record.to_json(), source=record.test)

    @classmethod
    def of_measurement(cls, backend: str, measured: "TimedMeasurement", source: str = "") -> "GateFigures":
        """A measurement's figures (one measured again, an A/B twin's), read as a record holding them is."""
        return cls.from_json({"backend": backend, **codec.to_json(measured)}, source=source)

    def pooled_with(self, other: "GateFigures") -> "GateFigures":
        """Both measurements as one: their processes together (in order, so A/B pairs stay aligned);
        the rest is this one's."""
        return replace(self, processes=(*self.processes, *other.processes))


def invalid_gate_field(record: Mapping[str, Any]) -> str | None:
    """What is wrong with the coverage and compiler figures the gate reads of a stored record, or
    None: the parser above drops a figure that is not a number, so a baseline holding one would turn
    its comparison off in silence; the report's reader refuses it instead, naming the field.
    ``coverage`` and ``npu`` are null or objects; fractions, counts, memories and estimates finite
    numbers >= 0 (not bools, not strings); operator ids a list of strings, reasons and names objects."""
    coverage = record.get("coverage")
    if coverage is not None:
        if not isinstance(coverage, Mapping):
            return f"'coverage' must be an object or null, got {_shown(coverage)}"
        for key in ("fallback", "total_ops", "delegated_ops", "fallback_ops", "partitions"):
            if coverage.get(key) is not None and not _non_negative(coverage[key]):
                return f"'coverage.{key}' must be a finite number >= 0 or null, got {_shown(coverage[key])}"
        ids = coverage.get("delegated_op_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(op, str) for op in ids)):
            return f"'coverage.delegated_op_ids' must be a list of strings or null, got {_shown(ids)}"
        for key in ("fallback_reasons", "fallback_op_names"):
            if coverage.get(key) is not None and not isinstance(coverage[key], Mapping):
                return f"'coverage.{key}' must be an object or null, got {_shown(coverage[key])}"
        names = coverage.get("fallback_op_names") or {}
        for op, count in names.items():
            if not _non_negative(count):
                return f"'coverage.fallback_op_names.{op}' must be a count >= 0, got {_shown(count)}"
    # The timed and memory figures the gate compares: the report's reader takes any float for a figure
    # (an accuracy figure may be infinite), and the parser above drops a NaN: the comparison was off.
    for where, block in (("", record), ("latency_ms.", record.get("latency_ms")),
                         *((f"processes[{i}].", p) for i, p in enumerate(record.get("processes") or ()))):
        for key in ("peak_memory_mb", "p50", "p99", *TIMED_KEYS):
            value = block.get(key) if isinstance(block, Mapping) else None
            if value is not None and not is_finite_number(value):
                return f"'{where}{key}' must be a finite number or null, got {_shown(value)}"
    for key in ("memory_growth_kb_per_run", "memory_growth_mb_per_min"):  # a slope: negative when memory shrank
        if record.get(key) is not None and not is_finite_number(record[key]):
            return f"{key!r} must be a finite number or null, got {_shown(record[key])}"
    arena = record.get("arena")
    if arena is not None and not isinstance(arena, Mapping):
        return f"'arena' must be an object of byte counts >= 0 or null, got {_shown(arena)}"
    for key in ("total_bytes", "head_bytes", "tail_bytes"):  # each named: the whole block's repr was cut at 60
        if (arena or {}).get(key) is not None and not _non_negative(arena[key]):
            return f"'arena.{key}' must be a number of bytes >= 0 or null, got {_shown(arena[key])}"
    npu = record.get("npu")
    if npu is None:
        return None
    if not isinstance(npu, Mapping):
        return f"'npu' must be an object or null, got {_shown(npu)}"
    memories = npu.get("memories")
    if memories is not None and not isinstance(memories, Mapping):
        return f"'npu.memories' must be an object or null, got {_shown(memories)}"
    for key, value in (memories or {}).items():
        if value is not None and not _non_negative(value):
            return f"'npu.memories.{key}' must be a number of bytes >= 0 or null, got {_shown(value)}"
    for key in ("sram_bytes", "flash_bytes", "estimated_cycles", "estimated_ms", "clock_hz"):
        if npu.get(key) is not None and not _non_negative(npu[key]):
            return f"'npu.{key}' must be a finite number >= 0 or null, got {_shown(npu[key])}"
    # The gate divides by the baseline's estimate: one of 0 was dropped, and the comparison with it.
    if npu.get("estimated_ms") == 0:
        return "'npu.estimated_ms' must be above 0 or null (no compiler estimates an inference at 0 ms), got 0"
    return None


def _non_negative(value: Any) -> bool:
    return is_finite_number(value) and value >= 0


def _shown(value: Any) -> str:
    return repr(value)[:60]
