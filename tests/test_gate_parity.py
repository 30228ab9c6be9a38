"""One gate for every kind of check and both modes (SPEC section 6): every figure the merge gate
judges (judging.regressions.GATE_FIGURES) has a staged regression here for each kind that records
it and for each mode, A/B (--edge-baseline-models) and stored (--edge-baseline). Each cell goes
through the one baseline rule (judging.baseline.choose_baseline) and the gate entry point of its
kind, exactly as a session calls it, and must fail naming the figure; the same figures unchanged
pass. A figure added to GATE_FIGURES without its cells fails this file, and so does a figure the
gate starts to compare on one kind's records (what it compared on the unchanged pair of each kind
must be that kind's cells, exactly).

The regressions are staged as the compiler or the measurement would report them: recorded figures
(a compiler's result, per-process P50s), never a clock of this machine. The end-to-end runs of the
same rule with the real compiler are in tests/test_ethos_u.py and below (the newcomer's pair)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest
from edge_helpers import FIXTURES

from pytest_edge import codec
from pytest_edge.backends import Coverage, get_backend
from pytest_edge.backends.arena import TensorArena
from pytest_edge.backends.compiled import Compilation
from pytest_edge.core.generation_figures import GenerationProcessFigures
from pytest_edge.core.marker import MarkerSpec
from pytest_edge.core.models import Model
from pytest_edge.core.plan import Plan
from pytest_edge.core.record import GateVerdict, Record, model_json
from pytest_edge.core.settings import Settings
from pytest_edge.judging import generation
from pytest_edge.judging.baseline import BaselineKind, choose_baseline
from pytest_edge.judging.gate import GateResult
from pytest_edge.judging.measurer import Measurer
from pytest_edge.measurement.combined import TimedMeasurement
from pytest_edge.report.json_report import load_report
from pytest_edge.judging.regressions import (ARENA, ARTIFACT_SIZE, DELEGATE_COVERAGE, GATE_FIGURES, INSTRUCTIONS,
                                             NPU_ESTIMATE, NPU_MEMORY, PARTITIONS, PEAK_MEMORY)
from pytest_edge.run import pipeline
from pytest_edge.run.compiled_check import CompiledChecker

MODES = ("ab", "stored")
TARGET = "ethos-u55-128"
SMALL, BIG = FIXTURES / "npu" / "npu_placement_a.tflite", FIXTURES / "npu" / "kws_dscnn_int8.tflite"

# Figures a mode does not gate, by design, with the reason (docs/gate.md): not a missing cell.
NOT_GATED = {
    ("P99 latency", "stored"): "a tail is never gated against stored numbers (another moment of the machine)",
    (PEAK_MEMORY, "stored"): "peak memory is reported, not gated, against stored numbers (another run's processes "
                             "peak differently: docs/gate.md)",
    (INSTRUCTIONS, "ab"): "counted mode: tests/test_counted.py stages it under Valgrind in both modes",
    (INSTRUCTIONS, "stored"): "counted mode: tests/test_counted.py stages it under Valgrind in both modes",
}


def _project(tmp_path: Path, mode: str, artifact: Path, twin: Path, suffix: str) -> tuple[Settings, Model, Path]:
    """A project with the candidate at models/m<suffix> and, in A/B mode, the twin at base/m<suffix>."""
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    candidate = models / f"m{suffix}"
    shutil.copy(artifact, candidate)
    model = Model("m", {suffix: candidate}, key="m", base=models, place=models / "m")
    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, max_regression=0.10, p99_regression=0.25)
    if mode == "ab":
        (tmp_path / "base").mkdir(exist_ok=True)
        shutil.copy(twin, tmp_path / "base" / f"m{suffix}")
        settings = replace(settings, baseline_models=tmp_path / "base")
    return settings, model, candidate


def _stored(settings: Settings, tmp_path: Path, record: dict[str, Any]) -> Settings:
    """A stored report holding ``record``'s JSON, read as the plugin reads --edge-baseline."""
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"schema": "pytest-edge/report/1", "records": [record]}))
    return replace(settings, baseline=load_report(path), baseline_path=path)


# ------------------------------------------------------------ compile-time targets

def _compilation(**changed: Any) -> Compilation:
    coverage = Coverage(4, 4, 0, 1, method="compiler", delegated_op_ids=["a", "b", "c", "d"])
    made = Compilation(TARGET, "vela 5.0.0", {"system_config": "s"}, coverage, memories={"sram": 4896,
                       "off_chip_flash": 20000}, clock_hz=5e8, estimated_cycles=50000, estimated_ms=0.1)
    for key, value in changed.items():
        if key.startswith("coverage_"):
            setattr(made.coverage, key.removeprefix("coverage_"), value)
        else:
            setattr(made, key, value)
    return made


COMPILED: dict[str, tuple[dict[str, Any], Path]] = {
    NPU_MEMORY: ({"memories": {"sram": 6288, "off_chip_flash": 20000}}, SMALL),  # the newcomer's +28 %
    NPU_ESTIMATE: ({"estimated_ms": 0.2, "estimated_cycles": 100000}, SMALL),
    PARTITIONS: ({"coverage_partitions": 2}, SMALL),
    # a new operator the NPU cannot run, at the same fraction's count of ids (4 of 5: one on the CPU)
    DELEGATE_COVERAGE: ({"coverage_total_ops": 5, "coverage_fallback_ops": 1, "coverage_delegated_ops": 4,
                         "coverage_fallback_op_names": {"CALL_ONCE": 1},
                         "coverage_fallback_reasons": {"CALL_ONCE 0": "CPU only operator"}}, SMALL),
    ARTIFACT_SIZE: ({}, BIG),
}


def compiled_gate(tmp_path: Path, mode: str, changes: dict[str, Any], artifact: Path) -> GateResult:
    """The compile-time target's gate, as CompiledChecker.check calls it, on recorded compiler results."""
    settings, model, candidate = _project(tmp_path, mode, artifact, SMALL, ".tflite")
    plan = Plan(model, TARGET, tmp_path, MarkerSpec())
    checker = CompiledChecker(settings)
    checker._compiled[(str(candidate.resolve()), TARGET)] = _compilation(**changes)
    base_compilation = _compilation()
    if mode == "ab":
        checker._compiled[(str((tmp_path / "base" / "m.tflite").resolve()), TARGET)] = base_compilation
    record = pipeline.compiled_record("t.py::test_npu", plan, checker.compiled(TARGET, candidate),
                                      get_backend(TARGET).distribution, tmp_path)
    if mode == "stored":
        baseline_plan = replace(plan, model=replace(model, artifacts={".tflite": tmp_path / "base.tflite"}))
        shutil.copy(SMALL, tmp_path / "base.tflite")
        stored = pipeline.compiled_record("t.py::test_npu", baseline_plan, base_compilation,
                                          get_backend(TARGET).distribution, tmp_path).to_json()
        checker.settings = _stored(settings, tmp_path, json.loads(json.dumps(stored)))
    return checker.gate(plan, record)


# ------------------------------------------------------------ tensor models, timed

def _processes(p50: float, p99: float, count: int = 6) -> list[dict[str, Any]]:
    # Per-process figures as combine_processes keeps them; a little spread, as fresh processes have.
    return [{"p50": p50 * (1 + 0.01 * (i % 3)), "p99": p99 * (1 + 0.01 * (i % 2)), "runs": 2000, "min": p50 * 0.9,
             "load_ms": 4.0 + 0.1 * i} for i in range(count)]


def _measured(p50: float = 1.0, p99: float = 1.5, peak: float = 50.0, coverage: dict[str, Any] | None = None,
              count: int = 6, arena: int = 24208) -> dict[str, Any]:
    return {"processes": _processes(p50, p99, count), "latency_ms": {"p50": p50, "p99": p99}, "measured_runs": 2000 * count,
            "peak_memory_mb": peak, "steady_memory_mb": peak * 0.9, "load_ms": 4.0, "first_inference_ms": 0.4,
            "coverage": coverage,
            "arena": {"total_bytes": arena, "head_bytes": arena - 8208, "tail_bytes": 8208, "reported_by": "tflite-micro"}}


TENSOR_COVERAGE = {"total_ops": 4, "delegated_ops": 4, "fallback_ops": 0, "partitions": 1, "fallback": 0.0,
                   "fallback_op_names": {}, "delegated_op_ids": ["CONV#0", "RELU#1", "MEAN#2", "FC#3"],
                   "fallback_reasons": {}}

TENSOR: dict[str, tuple[dict[str, Any], Path]] = {
    "P50 latency": ({"p50": 2.0}, SMALL),
    "P99 latency": ({"p99": 3.0}, SMALL),
    PEAK_MEMORY: ({"peak": 80.0}, SMALL),
    ARTIFACT_SIZE: ({}, BIG),
    PARTITIONS: ({"coverage": {**TENSOR_COVERAGE, "partitions": 2}}, SMALL),
    ARENA: ({"arena": 30000}, SMALL),  # a microcontroller runtime's arena grown by a quarter
    DELEGATE_COVERAGE: ({"coverage": {**TENSOR_COVERAGE, "total_ops": 5, "fallback_ops": 1, "fallback": 0.2,
                                      "fallback_op_names": {"CUMSUM": 1}, "fallback_reasons": {"CUMSUM#4": ""}}},
                        SMALL),
}


class _Info:
    """What the session's load returns (worker.pool.ModelInfo), for a model the gate reads only."""

    def __init__(self, artifact: Path) -> None:
        self.backend, self.key, self.artifact = "litert", "m|litert", artifact

    @staticmethod
    def feeds(feeds: Any) -> Any:
        return feeds


def tensor_gate(tmp_path: Path, mode: str, changes: dict[str, Any], artifact: Path) -> GateResult:
    """Measurer.gate as the session calls it after a measurement, on recorded per-process figures:
    the twin's measured in the same job (A/B) or the stored record's. Re-measuring returns the same
    recorded figures (the suspect is measured again; here it stays where it was)."""
    settings, model, candidate = _project(tmp_path, mode, artifact, SMALL, ".tflite")
    plan = Plan(model, "litert", tmp_path, MarkerSpec(), runs=2000)
    coverage = changes.pop("coverage", TENSOR_COVERAGE)
    mine, theirs = _measured(coverage=coverage, **changes), _measured(coverage=TENSOR_COVERAGE)
    live = Record.from_json({"test": "t.py::test_m", "backend": "litert", "model": model_json("m", candidate, tmp_path),
                             "verdict": "passed", "accuracy": {}, "artifact_bytes": candidate.stat().st_size, **mine})
    if mode == "stored":
        base = {**theirs, "test": "t.py::test_m", "backend": "litert", "verdict": "passed",
                "model": {"name": "m", "artifact": "base.tflite"}, "artifact_bytes": SMALL.stat().st_size}
        settings = _stored(settings, tmp_path, base)
    measurer = Measurer(settings, pool=None)  # type: ignore[arg-type]  # no worker: figures recorded
    info = _Info(candidate)
    key = (info.backend, info.key, plan.warmup, plan.runs, plan.min_time_s)
    # The measurer's types, read from the figures as the worker's replies would be.
    timed = [codec.from_json(TimedMeasurement, figures, "figures") for figures in (mine, theirs)]
    measurer.twin_results[key] = timed[1]
    twin = (info.backend, str(tmp_path / "base" / "m.tflite"))
    measurer.twin_coverages[twin] = codec.from_json(Coverage, TENSOR_COVERAGE, "coverage")
    measurer.twin_arenas[twin] = codec.from_json(TensorArena, theirs["arena"], "arena")  # the twin's load
    measurer.rounds = lambda info, artifacts, feeds, plan, processes=None: (  # type: ignore[method-assign]
        timed[:len(artifacts)])
    return measurer.gate(info, [], plan, live)  # type: ignore[arg-type]


# ------------------------------------------------------------ decoders

DECODER: dict[str, tuple[dict[str, Any], Path]] = {
    "TTFT P50": ({"ttft_p50_ms": 20.0}, SMALL),
    "TPOT P50": ({"tpot_p50_ms": 8.0}, SMALL),
    PEAK_MEMORY: ({"peak_memory_mb": 200.0}, SMALL),
    ARTIFACT_SIZE: ({}, BIG),
}


def _generation(ttft_p50_ms: float = 10.0, tpot_p50_ms: float = 4.0,
                peak_memory_mb: float = 100.0) -> generation.GenerationMeasurement:
    return generation.GenerationMeasurement(
        processes=tuple(GenerationProcessFigures(ttft_p50_ms * (1 + 0.01 * (i % 3)), tpot_p50_ms * (1 + 0.01 * (i % 2)))
                        for i in range(6)), peak_memory_mb=peak_memory_mb, steady_memory_mb=peak_memory_mb * 0.9,
        load_ms=40.0, runs=[10] * 6)


def decoder_gate(tmp_path: Path, mode: str, changes: dict[str, Any], artifact: Path) -> GateResult:
    """generation.gate_generation as the decoder check calls it, on recorded generation figures."""
    settings, model, candidate = _project(tmp_path, mode, artifact, SMALL, ".tflite")
    mine, theirs = _generation(**changes), _generation()
    twin = tmp_path / "base" / "m.tflite" if mode == "ab" else None
    if mode == "stored":
        settings = _stored(settings, tmp_path, {"test": "t.py::test_llm", "backend": "litert", "verdict": "passed",
                                                "model": {"name": "m", "artifact": "base.tflite"},
                                                "artifact_bytes": SMALL.stat().st_size,
                                                "peak_memory_mb": theirs.peak_memory_mb, "load_ms": theirs.load_ms,
                                                "llm": {"processes": codec.to_json(theirs.processes)}})
    result = generation.gate_generation(settings, "t.py::test_llm", "litert", model, candidate, twin, mine,
                                        theirs if twin else None, lambda count: [mine, theirs][:2 if twin else 1])
    assert result is not None
    return result


KINDS: dict[str, tuple[dict[str, tuple[dict[str, Any], Path]], Callable[..., GateResult]]] = {
    "compiled": (COMPILED, compiled_gate), "tensor": (TENSOR, tensor_gate), "decoder": (DECODER, decoder_gate)}
CELLS = [(kind, figure, mode) for kind, (staged, _) in KINDS.items() for figure in staged for mode in MODES
         if (figure, mode) not in NOT_GATED]


def test_every_figure_the_gate_judges_has_a_staged_regression_in_both_modes() -> None:
    """The table cannot drift: each of GATE_FIGURES is staged for some kind in each mode, or named
    in NOT_GATED with the reason."""
    for figure in GATE_FIGURES:
        for mode in MODES:
            staged = [kind for kind, (cells, _) in KINDS.items() if figure in cells]
            assert staged or (figure, mode) in NOT_GATED, f"{figure} ({mode}) has no staged regression"


@pytest.mark.parametrize(("kind", "figure", "mode"), CELLS, ids=[f"{k}-{f}-{m}" for k, f, m in CELLS])
def test_a_staged_regression_fails_naming_its_figure_in_both_modes(tmp_path: Path, kind: str, figure: str,
                                                                   mode: str) -> None:
    staged, gate = KINDS[kind]
    changes, artifact = staged[figure]
    result = gate(tmp_path, mode, dict(changes), artifact)
    failed = {finding.figure for finding in result.findings if finding.verdict == GateVerdict.FAILED}
    assert figure in failed, (result.failures, result.notes)
    assert result.summary.mode == mode and result.verdict() == GateVerdict.FAILED


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("mode", MODES)
def test_the_same_figures_pass_in_both_modes(tmp_path: Path, kind: str, mode: str) -> None:
    """Unchanged, they pass; and what the gate compared on this kind's records is exactly this kind's
    staged cells: a figure the gate starts to compare on a kind (its records carry every figure a
    session writes, load time and first inference among them) fails here until it has its cells."""
    staged, gate = KINDS[kind]
    result = gate(tmp_path, mode, {}, SMALL)
    assert result.failures == [] and result.summary.mode == mode and not result.summary.new
    assert sorted(result.summary.compared) == sorted(staged)


def test_a_new_cpu_operator_is_named_with_the_compiler_s_reason(tmp_path: Path) -> None:
    changes, artifact = COMPILED[DELEGATE_COVERAGE]
    for mode in MODES:
        (tmp_path / mode).mkdir()
        result = compiled_gate(tmp_path / mode, mode, dict(changes), artifact)
        (message,) = [f.message for f in result.findings if "newly on the CPU" in f.message]
        assert "CALL_ONCE x1 (new): CALL_ONCE 0 (CPU only operator)" in message, message


def test_the_one_rule_chooses_twin_then_stored_then_new(tmp_path: Path) -> None:
    """Twin where the A/B folder has one, else the stored record, else new; none without a gate.
    A twin that is the artifact itself is no twin."""
    settings, model, candidate = _project(tmp_path, "ab", SMALL, SMALL, ".tflite")
    assert choose_baseline(settings, model, candidate, "t", "litert").kind is BaselineKind.TWIN
    stored = _stored(replace(settings, baseline_models=tmp_path / "empty"), tmp_path,
                     {"test": "t", "backend": "litert", "verdict": "passed", "model": {"name": "m"}})
    (tmp_path / "empty").mkdir()
    assert choose_baseline(stored, model, candidate, "t", "litert").kind is BaselineKind.STORED
    assert choose_baseline(stored, model, candidate, "other", "litert-ref").kind is BaselineKind.NEW
    itself = replace(settings, baseline_models=tmp_path / "models")
    assert choose_baseline(itself, model, candidate, "t", "litert").kind is BaselineKind.NEW
    assert choose_baseline(replace(settings, baseline_models=None), model, candidate, "t",
                           "litert").kind is BaselineKind.NONE


# ------------------------------------------------------------ end to end, with the real compiler

@pytest.mark.skipif(get_backend(TARGET).unavailable_reason() is not None,
                    reason="ethos-u-vela is not installed (the [ethos-u] extra)")
@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_needing_more_npu_memory_fails_in_both_modes_and_both_pages_say_so(
        pytester: pytest.Pytester, mode: str) -> None:
    """An embedded team's pair (issue #48): the candidate compiles to more SRAM and flash on
    Ethos-U55 than its baseline. A/B and stored mode fail it alike, naming SRAM with both figures;
    the HTML page and the Markdown summary show the same baseline section in both modes; the
    unchanged model passes its own baseline."""
    models = pytester.path / "models"
    models.mkdir()
    shutil.copy(SMALL, models / "m.tflite")
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    pytester.makepyfile(test_npu="""
        import pytest

        @pytest.mark.edge(model="m", backends=["ethos-u55-128"])
        def test_npu(edge_model):
            pass
    """)
    if mode == "ab":
        (pytester.path / "base").mkdir()
        shutil.copy(SMALL, pytester.path / "base" / "m.tflite")
        gate = ["--edge-baseline-models=base"]
    else:
        pytester.runpytest_inprocess("--edge-report=base.json").assert_outcomes(passed=1)
        gate = ["--edge-baseline=base.json"]
    pytester.runpytest_inprocess(*gate).assert_outcomes(passed=1)  # unchanged: passes
    shutil.copy(BIG, models / "m.tflite")
    result = pytester.runpytest_inprocess(*gate, "--edge-report=r.json", "--edge-html=r.html", "--edge-summary=r.md")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ethos-u55-128: SRAM used * KiB (* bytes), +*% against the baseline* KiB (* bytes)*"])
    (record,) = json.loads((pytester.path / "r.json").read_text())["records"]
    check = record["baseline_check"]
    assert check["mode"] == mode and check["verdict"] == "failed"
    assert {NPU_MEMORY, ARTIFACT_SIZE} <= {f["figure"] for f in check["findings"]}
    assert "Against the baseline" in (pytester.path / "r.html").read_text()
    assert "Regressions against the baseline" in (pytester.path / "r.md").read_text()


def test_a_baseline_record_with_no_figure_in_common_compared_nothing(tmp_path: Path) -> None:
    """A stored record that holds none of the candidate's figures (no coverage, no npu block, no
    size) is not counted as compared: the gate's line says so, and a run where no record compared a
    figure fails as a gate that compared nothing."""
    from pytest_edge.report.table import gate_compared_nothing, gate_summary

    settings, model, candidate = _project(tmp_path, "stored", SMALL, SMALL, ".tflite")
    plan = Plan(model, TARGET, tmp_path, MarkerSpec())
    checker = CompiledChecker(_stored(settings, tmp_path, {"test": "t.py::test_npu", "backend": TARGET,
                                                           "model": {"name": "m"}, "verdict": "passed"}))
    checker._compiled[(str(candidate.resolve()), TARGET)] = _compilation()
    record = pipeline.compiled_record("t.py::test_npu", plan, checker.compiled(TARGET, candidate),
                                      get_backend(TARGET).distribution, tmp_path)
    pipeline.gate_into(record, checker.gate(plan, record))
    assert record.baseline_check is not None and record.baseline_check.compared == []
    line = gate_summary([record])
    assert line is not None and "0 compared" in line and "1 with no figure in common with the baseline" in line
    assert "compared nothing" in (gate_compared_nothing([record]) or "")
