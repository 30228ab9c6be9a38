"""The check of one plan as named steps, each returning what it found: delegate coverage (what the
loaded model says, before any run), the golden, the comparison of every golden case (with the
obtained files and the triage of a mismatch), the budgets, the merge gate, and the record that
collects every violation. The session runs them in this order and owns none of their logic."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import codec
from ..golden.alignment import aligned
from ..backends import Coverage, get_backend, split_device
from ..checks import (Finding, check_arena, check_compiled, check_coverage, check_drift, check_latency, check_load,
                      check_memory, check_memory_growth, check_sizes)
from ..accuracy.compare import OutputComparison, compare_output, summarize
from ..golden import DEFAULT_SET, Golden, GoldenCase
from ..golden.sets import GoldenSets
from ..measurement.combined import TimedMeasurement
from ..core.plan import Plan
from ..core.record import COMPILE_ONLY, Record
from ..core.record_accuracy import TensorAccuracy
from ..core.record_blocks import DeviceRun, InputTensor, ModelIdentity, PluginIdentity, RuntimeIdentity
from ..core.settings import Settings
from ..core.sizes import artifact_size
from ..files import relative_path
from ..worker.pool import ModelInfo

if TYPE_CHECKING:  # the gate and the triage are imported where they run (a baseline, a mismatch)
    from ..judging.figures import GateFigures
    from ..judging.gate import GateResult
    from ..triage.ladder import Runner
    # A compile-time target's and counted mode's blocks, imported by the checks of those kinds.
    from ..backends.compiled import Compilation
    from ..measurement.counts import CountedMeasurement


@dataclass
class Compared:
    """The compare step: every output of every golden case, the violations (obtained files and
    triage included), and the first case's feeds (what measurement runs)."""

    comparisons: list[OutputComparison] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    first_feeds: list[Any] = field(default_factory=list)
    # The golden's tensor names -> this artifact's, where they differ (matched by position).
    renamed: dict[str, dict[str, str]] = field(default_factory=dict)

    def renaming_note(self, backend: str) -> str | None:
        pairs = [f"{golden} -> {own}" for kind in ("inputs", "outputs") for golden, own in self.renamed.get(kind, {}).items()]
        return f"{backend}: tensors matched by position, the golden's names -> this artifact's: {', '.join(pairs)}" if pairs else None


@dataclass
class Covered:
    """The coverage step: the figures the record shows (a prediction for marker ``target=``, else
    the backend's own) and what the max_fallback / max_partitions budgets found."""

    coverage: Coverage | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return [finding.message for finding in self.findings]


def coverage(plan: Plan, info: ModelInfo, predicted: Coverage | None) -> Covered:
    """Delegate coverage against max_fallback / max_partitions, where the backend delegates or a
    target's coverage was predicted (backends that cannot predict a target keep their own figures)."""
    marker = plan.marker
    # Backends that cannot predict a target keep their own figures; one that predicts it but cannot
    # here (OpenVINO without that device's plugin) has none: said unreadable.
    predicts = predicted is not None or marker.target in get_backend(plan.backend).predicts_targets
    found = Covered(predicted if predicts else info.coverage)
    if get_backend(plan.backend).has_delegate or predicted is not None:
        found.findings = check_coverage(found.coverage, marker.budgets(check_coverage), plan.backend)
    return found


def golden(sets: GoldenSets, plan: Plan) -> Golden:
    """The golden the test is checked against; recorded first with ``--edge-update-golden``."""
    sets.ensure(plan)
    return sets.golden_for(plan)


def compare(runner: Runner, plan: Plan, info: ModelInfo, golden: Golden, rootdir: Path) -> Compared:
    """Every golden case on this backend, against the golden's outputs."""
    in_order = aligned(golden.inputs_spec, info.inputs, info, golden, "input", plan)
    out_order = aligned(golden.outputs_spec, info.outputs, info, golden, "output", plan)
    # Failure messages of a reference= test say whose golden the outputs missed.
    against = f"against reference {plan.reference.name}: " if plan.reference is not None else ""
    found = Compared(renamed={kind: names for kind, names in (
        ("inputs", _renamed(golden.inputs_spec, info.inputs, in_order)),
        ("outputs", _renamed(golden.outputs_spec, info.outputs, out_order))) if names})
    failing: tuple[list[Any], GoldenCase] | None = None
    for index, case in enumerate(golden.cases):
        feeds: list[Any] = [None] * len(info.inputs)
        for ref, position in zip(golden.inputs_spec, in_order):
            feeds[position] = case.inputs[ref.name]
        found.first_feeds = found.first_feeds or feeds
        outputs = runner.run(info, feeds)
        for ref, position in zip(golden.outputs_spec, out_order):
            comparison = compare_output(ref.name, case.outputs[ref.name], outputs[position], plan.tolerance(ref.name))
            found.comparisons.append(comparison)
            prefix = f"{plan.backend}: {against}" + (f"case {index}: " if len(golden.cases) > 1 else "")
            found.violations += [prefix + p for p in comparison.problems]
            if comparison.problems and failing is None:
                failing = (feeds, case)
                failing_outputs = (outputs, out_order)
        if any(c.problems for c in found.comparisons[-len(out_order):]):
            found.violations.append(_obtained(rootdir, plan, index, golden, outputs, out_order))
    if not found.comparisons:  # nothing silent: a check that compared no output judged nothing
        found.violations.append(f"{plan.backend}: {against}no output was compared: the golden of {plan.model.name} "
                                f"holds {len(golden.cases)} case(s) of {len(golden.outputs_spec)} output(s)")
    if failing is not None:
        from ..triage.cross_isa import cross_isa_note
        from ..triage.ladder import as_seen_by_triage, sibling_triage

        note = found.renaming_note(plan.backend)  # said once, before the triage
        found.violations += [note] if note else []
        found.violations += cross_isa_note(runner, plan, info, golden, runner.arch, failing[1], *failing_outputs)
        found.violations += sibling_triage(runner, plan, as_seen_by_triage(plan, golden), *failing)
    return found


def _renamed(reference: Sequence[Any], actual: Sequence[Any], order: Sequence[int]) -> dict[str, str]:
    """The golden's tensor name -> this artifact's, where the matching (``order``) paired two names."""
    return {ref.name: actual[position].name for ref, position in zip(reference, order)
            if ref.name != actual[position].name}


def _obtained(rootdir: Path, plan: Plan, index: int, golden: Golden, outputs: Sequence[np.ndarray],
              out_order: Sequence[int]) -> str:
    from ..golden.obtained import write_obtained

    path = write_obtained(rootdir, plan, index, golden, outputs, out_order)
    which = "" if golden.key == DEFAULT_SET else f" --set {golden.key}"
    return (f"{plan.backend}: obtained outputs of case {index} written to {path} "
            f"(compare: pytest-edge golden diff {golden.model}{which})")


def budgets(plan: Plan, timed: TimedMeasurement | None, load_ms: float | None) -> list[Finding]:
    """Latency, memory and drift budgets of a measured plan (``timed``), and the load-time budget of
    any (``load_ms``: the timed processes' median, else the load of the shared worker)."""
    marker = plan.marker
    found: list[Finding] = []
    if timed is not None:
        found += check_latency(timed.latency_ms, timed.measured_runs, marker.budgets(check_latency), plan.backend)
        found += check_memory(timed.peak_memory_mb, marker.budgets(check_memory), plan.backend)
        found += check_memory_growth(timed.memory_growth_kb_per_run, timed.memory_growth_mb_per_min,
                                     marker.budgets(check_memory_growth), plan.backend)
        found += check_drift(timed.drift, marker.budgets(check_drift), timed.per_process_drift, plan.backend,
                             timed.probe_drift)
    found += check_load(load_ms, marker.budgets(check_load), plan.backend)
    return found


def size_budgets(plan: Plan, info: ModelInfo, rootdir: Path) -> list[Finding]:
    """max_artifact_mb and max_runtime_mb: sizes, judged on every machine (an emulated device too); and
    max_arena_kb, the tensor arena a microcontroller runtime reported at load (a size too: planned, not timed)."""
    arena = check_arena(info.arena, plan.marker.budgets(check_arena), plan.backend)
    budgets = plan.marker.budgets(check_sizes)
    if all(value is None for value in budgets.values()):
        return arena
    runtime = info.runtime
    reason = runtime.package.reason if runtime.package is not None else None
    artifact = relative_path(info.artifact, rootdir) if info.artifact else None
    size, unreadable = artifact_size(info.artifact, info.backend)
    return [*check_sizes(artifact, size, runtime.label, runtime.package_bytes, budgets, plan.backend,
                         reason, unreadable), *arena]


def throughput(latency_ms: dict[str, float] | None) -> float | None:
    """Inferences per second over the timed runs, one at a time at the configured threads, each on
    the recorded input shapes (its batch): runs / their total time = 1000 / mean latency in ms."""
    mean = (latency_ms or {}).get("mean")
    return 1000.0 / mean if isinstance(mean, (int, float)) and mean > 0 else None


def gate_into(record: Record, gate: GateResult, settings: Settings | None = None) -> list[str]:
    """The gate's verdict kept on the record (its summary and inconclusive warnings), after the
    changes ``settings`` accepts for this model's artifact (edge-accept.toml); its failures."""
    if settings is not None and settings.acceptances:
        where = settings.accept_file.name if settings.accept_file is not None else "the acceptance file"
        gate.accept(settings.acceptances, record.model.name, record.model.identity(), where)
    if gate.summary is not None:
        record.baseline_check = replace(gate.summary, inconclusive=gate.inconclusive, notes=gate.notes,
                                        findings=gate.findings)
    record.warnings = gate.inconclusive
    return gate.failures


def record(test_id: str, plan: Plan, info: ModelInfo, golden: Golden, covered: Covered, compared: Compared,
           timed: TimedMeasurement | None, load_ms: float | None, rootdir: Path,
           counted: CountedMeasurement | None = None) -> Record:
    """The record of a check that ran: every figure found (``timed``, or in counted mode ``counted``:
    then no timing or memory, null in the record); its verdict comes from the violations."""
    feeds = compared.first_feeds
    measured = timed or TimedMeasurement()
    size, unreadable = artifact_size(info.artifact, info.backend)
    runtime = info.runtime
    made = Record(
        test=test_id, model=ModelIdentity.of(plan.model.key, info.artifact, rootdir), backend=info.backend,
        runtime=runtime, plugin=PluginIdentity.this(),
        precision=info.precision, threads=info.threads,
        input={s.name: InputTensor(list(np.shape(x)), s.dtype, info.shape_sources.get(s.name))
               for s, x in zip(info.inputs, feeds)},
        warmup_runs=measured.warmup_runs, measured_runs=measured.measured_runs,
        coverage=codec.to_json(covered.coverage),
        load_ms=load_ms, first_inference_ms=measured.first_inference_ms,
        latency_ms=measured.latency_ms, latency_quantiles_ms=measured.latency_quantiles_ms,
        peak_memory_mb=measured.peak_memory_mb,
        steady_memory_mb=measured.steady_memory_mb, drift=measured.drift,
        memory_growth_kb_per_run=measured.memory_growth_kb_per_run,
        memory_growth_mb_per_min=measured.memory_growth_mb_per_min,
        timing_under_load=measured.under_load, other_cores_busy=measured.other_cores_busy,
        processes=measured.processes, process_spread=measured.process_spread,
        artifact_bytes=size,
        runtime_bytes=runtime.package_bytes,
        throughput=throughput(measured.latency_ms),
        power_and_temperature=measured.power_and_temperature, counted=counted, arena=info.arena,
        device=DeviceRun(split_device(info.backend)[1], info.device) if info.device else None,
        accuracy=TensorAccuracy(golden.reference_backend, len(golden.cases), **summarize(compared.comparisons),
                                renamed=compared.renamed or None,
                                # Only for reference= tests: the model whose golden was used (else the test's own).
                                reference_model=golden.model if plan.reference is not None else None),
        checked=True,
    )
    if unreadable:  # null with the reason, as runtime.package says why runtime_bytes is null
        made.extra["artifact_bytes_reason"] = unreadable
    return made


def compiled_budgets(plan: Plan, compiled: Compilation, rootdir: Path) -> list[Finding]:
    """A compile-time target's budgets: the compiler's placement (check_coverage's), the memory it
    planned and its estimate (check_compiled's), the artifact's size. Timed budgets are not judged: nothing executed (the record says so)."""
    marker = plan.marker
    artifact = relative_path(plan.artifact, rootdir) if plan.artifact else None
    size, unreadable = artifact_size(plan.artifact, plan.backend) if plan.artifact else (None, "no artifact")
    sizes = marker.budgets(check_sizes)
    return [*check_coverage(compiled.coverage, marker.budgets(check_coverage), plan.backend),
            *check_compiled(compiled, marker.budgets(check_compiled), plan.backend),
            *check_sizes(artifact, size, compiled.compiler, None, {"max_artifact_mb": sizes.get("max_artifact_mb")},
                         plan.backend, None, unreadable)]


def compiled_record(test_id: str, plan: Plan, compiled: Compilation, distribution: str, rootdir: Path) -> Record:
    """The record of a compile-time target: the compiler's placement as the coverage, its result as
    the ``npu`` block; accuracy, latency, load and memory null (nothing executed: timing_not_judged)."""
    size, unreadable = artifact_size(plan.artifact, plan.backend) if plan.artifact else (None, "no artifact")
    made = Record(test=test_id, model=ModelIdentity.of(plan.model.key, plan.artifact, rootdir), backend=plan.backend,
                  runtime=RuntimeIdentity(distribution, compiled.compiler.rpartition(" ")[2],
                                          list(compiled.coverage.delegates)),
                  plugin=PluginIdentity.this(),
                  coverage=codec.to_json(compiled.coverage), artifact_bytes=size, npu=compiled, checked=True)
    made.timing_not_judged = COMPILE_ONLY
    if unreadable:
        made.extra["artifact_bytes_reason"] = unreadable
    return made


def compiled_gate(record: Record, theirs: GateFigures | None, source: str, paired: bool,
                  max_regression: float) -> GateResult:
    """A compile-time target against its baseline's figures (the twin compiled and recorded alike,
    or the stored record; ``source`` names it), by the gate's resource rules as every kind: the
    compiler's placement (the fraction, each operator that left the NPU or is newly on the CPU, the
    partitions), its memories and estimate, and the artifact's size; nothing was timed, so nothing
    is re-measured."""
    from ..core.baseline_check import BaselineCheck
    from ..judging.figures import GateFigures
    from ..judging.gate import GateResult, rule_of
    from ..judging.regressions import compared_figures, resource_regressions, uncompared_note

    gate = GateResult()
    if theirs is None:
        return gate
    what = "the baseline twin" if paired else "the baseline"
    mine = GateFigures.of_record(record)
    for regression in resource_regressions(mine, theirs, max_regression, what):
        gate.fail(regression, rule_of(regression.figure, paired))
    gate.notes += uncompared_note(mine, theirs, what)
    gate.summary = BaselineCheck(mode="ab" if paired else "stored", baseline=source, remeasured=False,
                                 compared=compared_figures(mine, theirs, ()), verdict=gate.verdict())
    return gate
