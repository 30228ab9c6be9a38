"""Ethos-U compile-time targets (docs/npu.md): vela compiles the project's int8 .tflite fixtures here,
and every figure the tool records is checked against vela's own summary, read independently from
the stdout of the vela command line run by the test with the same configuration."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from edge_helpers import FIXTURES

from pytest_edge import codec
from pytest_edge.backends import compile_targets, get_backend, tensor_backends
from pytest_edge.backends.ethos_u.backend import DEFAULTS
from pytest_edge.core.record import COMPILE_ONLY, Record
from pytest_edge.errors import BackendError, DoesNotConvert
from pytest_edge.judging.figures import GateFigures
from pytest_edge.judging.regressions import placement_regressions

pytestmark = pytest.mark.skipif(get_backend("ethos-u55-128").unavailable_reason() is not None,
                                reason="ethos-u-vela is not installed (the [ethos-u] extra)")

TARGETS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")
# tiny_cnn_int8: a CUMSUM and float I/O Ethos-U keeps on the CPU; quant_probe_int8 (an MLP) and
# kws_dscnn_int8 (a keyword-spotting DS-CNN), int8 I/O: all on the NPU.
MODELS = ("tiny_cnn_int8", "quant_probe_int8", "kws_dscnn_int8")


def vela_summary(artifact: Path, target: str, tmp_path: Path, *flags: str) -> dict[str, str]:
    """vela's network summary as it prints it (no --verbose-performance), parsed from its stdout:
    what a user compiling ``artifact`` for ``target`` reads."""
    out = tmp_path / f"vela-{target}-{artifact.stem}"
    vela = Path(sys.executable).with_name("vela")
    done = subprocess.run([str(vela), str(artifact), "--accelerator-config", target, "--output-dir", str(out), *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    summary = {}
    for line in lines:
        for key, pattern in (("cpu", r"^CPU operators = (\d+) "), ("npu", r"^NPU operators = (\d+) "),
                             ("sram_kib", r"^Total SRAM used\s+([\d.]+) KiB"),
                             ("flash_kib", r"^Total Off-chip Flash used\s+([\d.]+) KiB"),
                             ("system", r"^System configuration\s+(\S+)"), ("memory_mode", r"^Memory mode\s+(\S+)"),
                             ("clock_mhz", r"^Accelerator clock\s+(\d+) MHz")):
            match = re.match(pattern, line)
            if match:
                summary[key] = match.group(1)
    summary["reasons"] = "\n".join(line for line in lines if line.startswith(("Warning (supported", "Reason:")))
    return summary


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("target", TARGETS)
def test_the_recorded_figures_equal_vela_s_own_summary(target: str, model: str, tmp_path: Path) -> None:
    artifact = next(path for path in (FIXTURES / f"{model}.tflite", FIXTURES / "npu" / f"{model}.tflite") if path.is_file())
    compiled = get_backend(target).compiler.compile(artifact, {}, 300)
    said = vela_summary(artifact, target, tmp_path)
    coverage = compiled.coverage
    assert (coverage.fallback_ops, coverage.delegated_ops) == (int(said["cpu"]), int(said["npu"]))
    assert coverage.total_ops == int(said["cpu"]) + int(said["npu"]) and coverage.method == "compiler"
    assert f"{compiled.sram_bytes / 1024:.2f}" == said["sram_kib"]
    # vela prints a memory only where it used some: none printed is none used.
    assert f"{(compiled.flash_bytes or 0) / 1024:.2f}" == said.get("flash_kib", "0.00")
    assert (compiled.settings["system_config"], compiled.settings["memory_mode"]) == (said["system"], said["memory_mode"])
    # vela's defaults for the family, as docs/npu.md says them.
    assert (said["system"], said["memory_mode"]) == DEFAULTS[target.rsplit("-", 1)[0]]
    assert compiled.clock_hz == int(said["clock_mhz"]) * 1e6
    assert compiled.estimated_ms == pytest.approx(compiled.estimated_cycles / compiled.clock_hz * 1000, rel=1e-3)
    # Each CPU operator is named, with the reason vela printed for it.
    assert len(coverage.fallback_reasons) == coverage.fallback_ops
    for op, reason in coverage.fallback_reasons.items():
        assert reason and reason.split(". ")[0] in said["reasons"], (op, reason)


def test_the_configuration_is_the_users_and_vela_agrees(tmp_path: Path) -> None:
    """edge_compile_options reaches vela: the figures for a named system config and memory mode
    equal vela's for the same flags, and differ from the defaults' where the memory does."""
    artifact = FIXTURES / "tiny_cnn_int8.tflite"
    options = {"system_config": "Ethos_U55_Deep_Embedded", "memory_mode": "Shared_Sram"}
    compiled = get_backend("ethos-u55-128").compiler.compile(artifact, options, 300)
    said = vela_summary(artifact, "ethos-u55-128", tmp_path, "--system-config", "Ethos_U55_Deep_Embedded",
                        "--memory-mode", "Shared_Sram")
    assert compiled.settings["system_config"] == said["system"] == "Ethos_U55_Deep_Embedded"
    assert f"{compiled.sram_bytes / 1024:.2f}" == said["sram_kib"]
    assert compiled.clock_hz == int(said["clock_mhz"]) * 1e6
    with pytest.raises(Exception, match="unknown option.*sram_size"):
        get_backend("ethos-u55-128").compiler.compile(artifact, {"sram_size": "1"}, 300)


def test_a_float_tflite_needs_an_int8_model() -> None:
    with pytest.raises(DoesNotConvert, match=r"tiny_cnn.tflite \(ethos-u55-128\): needs an int8 model"):
        get_backend("ethos-u55-128").compiler.compile(FIXTURES / "tiny_cnn.tflite", {}, 300)


def test_compile_targets_are_named_never_defaults() -> None:
    assert set(TARGETS) <= set(compile_targets()) and not set(TARGETS) & set(tensor_backends())
    assert get_backend("ethos-u85-512").compile_only  # vela's other configurations, by name


def _project(pytester: pytest.Pytester, *models: str) -> Path:
    folder = pytester.path / "models"
    folder.mkdir()
    for model in models:
        shutil.copy(FIXTURES / f"{model}.tflite", folder / f"{model}.tflite")
    pytester.makeini("[pytest]\nedge_model_dirs = models\n")
    return folder


def test_budgets_fail_naming_vela_s_reason_and_both_numbers(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """max_fallback=0 names the CPU operator with vela's reason; an SRAM budget under vela's figure
    names both; a latency budget is not judged (nothing ran) and the record says so."""
    _project(pytester, "tiny_cnn_int8")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="tiny_cnn_int8", backends=["ethos-u55-128"], max_fallback=0, max_sram_kb=32,
                          p50_ms=0.000001)
        def test_npu(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-report=report.json")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    said = vela_summary(FIXTURES / "tiny_cnn_int8.tflite", "ethos-u55-128", tmp_path)
    assert "CUMSUM Identity: Unsupported opType" in out and "Reason: Unsupported opType" in said["reasons"]
    assert f"fallback 30.0% (3 of 10 operators left on the CPU by the NPU compiler) > max_fallback 0.0%" in out
    assert f"SRAM used {said['sram_kib']} KiB (34656 bytes)" in out and "> max_sram_kb 32 KiB (32768 bytes)" in out
    assert "P50 latency" not in out
    (record,) = json.loads((pytester.path / "report.json").read_text())["records"]
    assert record["timing_not_judged"] == COMPILE_ONLY.reason and record["latency_ms"] is None
    assert record["accuracy"] is None and record["npu"]["executed"] is False
    assert record["coverage"]["fallback_reasons"]["CUMSUM Identity"] == "Unsupported opType"
    assert {f["check"] for f in record["budget_findings"]} == {"max_fallback", "max_sram_kb"}
    assert Record.from_json(record).npu.sram_bytes == 34656


def test_the_same_network_on_u55_and_u85_in_one_matrix(pytester: pytest.Pytester) -> None:
    """The same int8 model on three NPUs: each its own placement, memory and estimate; the fully
    delegated model passes max_fallback=0 on every one, the one with CUMSUM on none."""
    _project(pytester, "tiny_cnn_int8", "quant_probe_int8")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="quant_probe_int8", max_fallback=0, max_partitions=1, max_npu_estimated_ms=5)
        def test_full(edge_model):
            pass

        @pytest.mark.edge(model="tiny_cnn_int8", max_fallback=0)
        def test_cumsum(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-backends=ethos-u*", "--edge-report=report.json",
                                           "--edge-summary=summary.md", "--edge-html=page.html")
    result.assert_outcomes(passed=3, failed=3)
    summary = (pytester.path / "summary.md").read_text()
    page = (pytester.path / "page.html").read_text()
    assert "<h2>NPU compile-time targets</h2>" in page and "<th>DRAM KiB</th>" in page
    assert "<h3>Figures</h3>" not in page  # nothing timed: no table of dashes
    assert "<h3>Size, throughput, power and temperature" not in page
    assert "### NPU compile-time targets (nothing executed; the time is the compiler's estimate)" in summary
    assert "| tiny\\_cnn\\_int8 | ethos-u55-128 | vela 5.2.0 | Ethos\\_U55\\_High\\_End\\_Embedded |" in summary
    # The model x target matrix opens both pages: share on the NPU, SRAM, verdict per cell.
    assert page.index('<section id="targets">') < page.index('<section id="overview">')
    assert summary.index("### Model × accelerator target") < summary.index("### NPU compile-time targets")
    matrix = summary.split("### Model × accelerator target")[1].split("###")[0]
    assert "| model | ethos-u55-128 | ethos-u65-256 | ethos-u85-256 |" in matrix
    full = next(line for line in matrix.splitlines() if line.startswith("| quant\\_probe\\_int8 |"))
    assert full.count("100% on the NPU") == 3 and full.count("passed") == 3 and "SRAM " in full
    cumsum = next(line for line in matrix.splitlines() if line.startswith("| tiny\\_cnn\\_int8 |"))
    assert cumsum.count("failed") == 3 and "100% on the NPU" not in cumsum
    records = {(r["model"]["name"], r["backend"]): r
               for r in json.loads((pytester.path / "report.json").read_text())["records"]}
    u55, u85 = records[("tiny_cnn_int8", "ethos-u55-128")], records[("tiny_cnn_int8", "ethos-u85-256")]
    assert (u55["coverage"]["total_ops"], u85["coverage"]["total_ops"]) == (10, 8)
    assert u55["npu"]["settings"]["system_config"] != u85["npu"]["settings"]["system_config"]
    assert u55["npu"]["clock_hz"] == 500e6 and u85["npu"]["clock_hz"] == 1e9
    for target in TARGETS:
        assert records[("quant_probe_int8", target)]["coverage"]["fallback"] == 0.0
        assert records[("quant_probe_int8", target)]["verdict"] == "passed"
        assert "CUMSUM Identity" in records[("tiny_cnn_int8", target)]["coverage"]["fallback_reasons"]


def _gated_pair(pytester: pytest.Pytester, mode: str, baseline: Path, model: str, target: str) -> tuple[Path, list[str]]:
    """A project whose model ``model`` is ``baseline`` on ``target``, gated in ``mode`` against
    itself (a twin in base/, or a stored report of this run), which passes; the models folder, to
    put the candidate in, and the gate's options."""
    folder = _project(pytester)
    shutil.copy(baseline, folder / f"{model}.tflite")
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.edge(model="{model}", backends=["{target}"])
        def test_npu(edge_model):
            pass
    """)
    if mode == "ab":
        (pytester.path / "base").mkdir()
        shutil.copy(baseline, pytester.path / "base" / f"{model}.tflite")
        gate = ["--edge-baseline-models=base"]
    else:
        pytester.runpytest_inprocess("--edge-report=base.json").assert_outcomes(passed=1)
        gate = ["--edge-baseline=base.json"]
    pytester.runpytest_inprocess(*gate).assert_outcomes(passed=1)  # unchanged: passes
    return folder, gate


@pytest.mark.parametrize("mode", ["ab", "stored"])
def test_the_gate_fails_an_operator_that_left_the_npu_at_the_same_fraction(pytester: pytest.Pytester,
                                                                           mode: str) -> None:
    """npu_placement_b against npu_placement_a: 1 of 3 on the CPU in both, 'head' moved off the NPU
    and 'stem' onto it: the fraction did not grow, the gate fails naming head with vela's reason."""
    folder, gate = _gated_pair(pytester, mode, FIXTURES / "npu" / "npu_placement_a.tflite", "m", "ethos-u55-128")
    shutil.copy(FIXTURES / "npu" / "npu_placement_b.tflite", folder / "m.tflite")
    result = pytester.runpytest_inprocess(*gate, "--edge-report=report.json")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert ("1 operator(s) left the delegate against the baseline" in out
            and "FULLY_CONNECTED Identity (Unsupported dataType Int64" in out)
    assert "stem" not in out.split("left the delegate")[1].split("\n")[0]  # the one that joined is no failure
    (record,) = json.loads((pytester.path / "report.json").read_text())["records"]
    assert record["coverage"]["fallback"] == pytest.approx(1 / 3) and record["baseline_check"]["verdict"] == "failed"


@pytest.mark.parametrize("mode", ["ab", "stored"])
def test_the_gate_names_an_operator_new_on_the_cpu_with_vela_s_reason(pytester: pytest.Pytester, mode: str) -> None:
    """The newcomer's change, end to end with vela: their keyword model (kws_dscnn_int8, all on the
    U85's NPU) made streaming (wake_word_int8: resource variables, a CALL_ONCE the U85 keeps on its
    CPU). The gate fails naming the operator new on the CPU with vela's reason, in both modes; the
    unchanged model passes its own baseline first."""
    folder, gate = _gated_pair(pytester, mode, FIXTURES / "npu" / "kws_dscnn_int8.tflite", "wake", "ethos-u85-256")
    shutil.copy(WAKE_WORD, folder / "wake.tflite")
    result = pytester.runpytest_inprocess(*gate, "--edge-report=report.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ethos-u85-256: operator(s) newly on the CPU against the baseline*: "
                                 "CALL_ONCE x1 (new): CALL_ONCE*(Unsupported opType)*"])
    (record,) = json.loads((pytester.path / "report.json").read_text())["records"]
    assert record["baseline_check"]["verdict"] == "failed"
    assert record["coverage"]["fallback_reasons"] == {"CALL_ONCE": "Unsupported opType"}


def test_placement_regressions_name_what_left_for_any_runtime() -> None:
    """The rule on records as any runtime writes them (here LiteRT's XNNPACK ids): an operator the
    baseline's delegate took that fell back now fails, with the reason where one is given; one
    that joined, or one the change removed, does not."""
    def record(delegated: list[str], fallback: dict[str, str]) -> GateFigures:
        total = len(delegated) + len(fallback)
        return GateFigures.from_json({"backend": "litert", "coverage": {
            "delegated_op_ids": delegated, "fallback_reasons": fallback, "fallback": len(fallback) / total}})

    old = record(["CONV_2D a", "MEAN b"], {"CUMSUM c": ""})
    swapped = record(["CUMSUM c", "CONV_2D a"], {"MEAN b": ""})
    (found,) = placement_regressions(swapped, old)
    assert "1 operator(s) left the delegate" in found.message and "MEAN b" in found.message
    assert "CUMSUM" not in found.message and found.new == found.old
    assert placement_regressions(old, old) == []
    assert placement_regressions(record(["CONV_2D a"], {"CUMSUM c": ""}), old) == []  # MEAN b removed: not "left"
    fraction_only = GateFigures.from_json({"backend": "x", "coverage": {"fallback": 0.5}})
    assert placement_regressions(fraction_only, old) == []  # no ids: fraction only


def test_inspect_names_compile_targets_beside_the_runtimes() -> None:
    from edge_helpers import run_cli

    done = run_cli("inspect", str(FIXTURES / "tiny_cnn_int8.tflite"), "--backends", "ethos-u*", cwd=FIXTURES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("ethos-u")}
    assert set(rows) == set(TARGETS)
    assert "7/10 delegated" in rows["ethos-u55-128"] and "5/8 delegated" in rows["ethos-u85-256"]
    assert "SRAM 33.84 KiB" in rows["ethos-u55-128"] and "(an estimate)" in rows["ethos-u55-128"]


def test_inspect_of_a_pte_lists_the_targets_a_pattern_selects(tmp_path: Path) -> None:
    """`inspect --backends 'ethos-u*' m.pte` (an ExecuTorch program with Ethos-U delegates): a row per
    configuration the pattern selects, the .pte's own compiled, the others refused naming why (the
    table was empty: the .pte's backends were picked by the .tflite suffix alone)."""
    from pytest_edge.cli.inspect import inspect_rows
    from pytest_edge.core.settings import Settings

    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, backends=["ethos-u*"])
    rows = {row[0]: row for row in inspect_rows(str(PTE_MLP), settings)}
    assert set(rows) == set(TARGETS), rows
    assert rows["ethos-u55-128"][1] == "2/4 delegated" and "compiled by vela" in rows["ethos-u55-128"][5]
    assert "its Ethos-U delegate was compiled for ethos-u55-128" in rows["ethos-u85-256"][5]


def test_a_project_s_own_vela_config_names_its_board(pytester: pytest.Pytester) -> None:
    """edge_compile_options with config= (a vela .ini of the project's own system, from the project's
    root): the record is that board's, at its clock, as vela computes it."""
    folder = _project(pytester)
    shutil.copy(FIXTURES / "npu" / "kws_dscnn_int8.tflite", folder / "kws.tflite")
    import ethosu.vela

    text = (Path(ethosu.vela.__file__).parent.parent / "config_files/Arm/vela.ini").read_text()  # vela's own
    board = text[text.index("[System_Config.Ethos_U55_High_End_Embedded]"):text.index("; Ethos-U65 Embedded")]
    memory = text[text.index("[Memory_Mode.Shared_Sram]"):text.index("; Dedicated SRAM")]
    (pytester.path / "boards").mkdir()
    (pytester.path / "boards/vela.ini").write_text(
        board.replace("Ethos_U55_High_End_Embedded", "My_Board").replace("core_clock=500e6", "core_clock=250e6")
        + "\n" + memory)
    pytester.makeini("[pytest]\nedge_model_dirs = models\nedge_compile_options =\n"
                     "    ethos-u55-128 = config=boards/vela.ini system_config=My_Board memory_mode=Shared_Sram\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="kws", backends=["ethos-u55-128"], max_fallback=0)
        def test_npu(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-report=report.json").assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "report.json").read_text())["records"]
    assert record["npu"]["settings"]["system_config"] == "My_Board" and record["npu"]["clock_hz"] == 250e6
    default = get_backend("ethos-u55-128").compiler.compile(FIXTURES / "npu" / "kws_dscnn_int8.tflite", {}, 300)
    # Half the clock, the same cycles' worth of compute: a longer estimate.
    assert record["npu"]["estimated_ms"] > default.estimated_ms


# ExecuTorch programs with Ethos-U55 delegates (fixtures/make_ethos_u_pte.py): tiny_mlp whole on the
# NPU (with its delegate's TOSA graph beside it), select_mlp with gt/where on the CPU between two.
PTE_MLP, PTE_SELECT = FIXTURES / "npu" / "tiny_mlp_ethos_u55.pte", FIXTURES / "npu" / "select_mlp_ethos_u55.pte"
DELEGATE_FLAGS = ("--system-config", "Ethos_U55_High_End_Embedded", "--memory-mode", "Shared_Sram")


def test_an_executorch_program_s_ethos_u_delegates_are_placed_and_sized_from_the_file(tmp_path: Path) -> None:
    """The .pte's placement is its kernel calls (the CPU) and its Ethos-U delegates; SRAM and flash are
    vela's blocks in the delegate, equal to vela's own summary of the delegate's TOSA graph; vela's
    operators come from that graph, checked to be the delegate's source."""
    from pytest_edge.backends.ethos_u.pte import read_program

    compiled = get_backend("ethos-u55-128").compiler.compile(PTE_MLP, {}, 300)
    said = vela_summary(PTE_MLP.with_suffix(".tosa"), "ethos-u55-128", tmp_path, *DELEGATE_FLAGS)
    coverage = compiled.coverage
    assert coverage.fallback_op_names == {"quantized_decomposed::quantize_per_tensor": 1,
                                          "quantized_decomposed::dequantize_per_tensor": 1}
    assert (coverage.delegated_ops, coverage.partitions, coverage.approximate) == (int(said["npu"]), 1, False)
    assert f"{compiled.sram_bytes / 1024:.2f}" == said["sram_kib"] and compiled.memories["scratch"] == compiled.sram_bytes
    assert f"{compiled.flash_bytes / 1024:.2f}" == said["flash_kib"] and compiled.memories["weights"] == compiled.flash_bytes
    assert compiled.estimated_cycles and compiled.settings["tosa"] == "tiny_mlp_ethos_u55.tosa"

    select = get_backend("ethos-u55-128").compiler.compile(PTE_SELECT, {}, 300)  # no .tosa beside: no estimate
    program = read_program(PTE_SELECT)
    assert select.coverage.partitions == len(program.delegates) == 2 and select.coverage.approximate
    assert {"aten::gt", "aten::where"} <= set(select.coverage.fallback_op_names)
    assert select.sram_bytes == sum(d.scratch_bytes for d in program.delegates) and select.estimated_ms is None
    assert "select_mlp_ethos_u55.tosa" in select.estimate_note
    with pytest.raises(DoesNotConvert, match=r"\(ethos-u85-256\): its Ethos-U delegate was compiled for ethos-u55-128"):
        get_backend("ethos-u85-256").compiler.compile(PTE_MLP, {}, 300)
    with pytest.raises(DoesNotConvert, match=r"no Ethos-U delegate in this program \(its delegates: XnnpackBackend\)"):
        get_backend("ethos-u55-128").compiler.compile(FIXTURES / "tiny_mlp.pte", {}, 300)


def test_a_tosa_graph_that_is_not_the_delegate_s_is_refused(tmp_path: Path) -> None:
    """A .tosa beside the .pte is read as the delegate's only where vela makes the delegate's command
    stream and weights from it: one weight changed (byte 2500 of the fixture's graph lies in the first
    layer's int8 weights) is another graph, refused naming it."""
    shutil.copy(PTE_MLP, tmp_path / "m.pte")
    graph = bytearray(PTE_MLP.with_suffix(".tosa").read_bytes())
    graph[2500] ^= 0x11
    (tmp_path / "m.tosa").write_bytes(graph)
    with pytest.raises(BackendError, match=r"m.pte \(ethos-u55-128\): m.tosa beside it is not its delegate's TOSA graph"):
        get_backend("ethos-u55-128").compiler.compile(tmp_path / "m.pte", {}, 300)


def test_inspect_of_an_ethos_u_pte_on_executorch_names_the_delegate_it_lacks(tmp_path: Path) -> None:
    """The ExecuTorch CPU runtime has no Ethos-U backend, so the program's method does not load
    (Error::NotFound): the row says so, naming the file, the backend and the delegate (it said the
    program needed a .ptd)."""
    from pytest_edge.cli.inspect import inspect_rows
    from pytest_edge.core.settings import Settings

    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, backends=["executorch"])
    (row,) = inspect_rows(str(PTE_MLP), settings)
    note = row[5]
    assert row[0] == "executorch" and str(PTE_MLP) in note, row
    assert "it is lowered to the EthosUBackend delegate, which this ExecuTorch runtime does not have" in note, note
    assert ".ptd" not in note, note


def test_the_pte_s_cpu_kernels_fail_max_fallback_and_its_delegates_max_partitions(pytester: pytest.Pytester) -> None:
    folder = _project(pytester)
    shutil.copy(PTE_SELECT, folder / "select.pte")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="select", backends=["ethos-u55-128"], max_fallback=0.5, max_partitions=1)
        def test_npu(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-report=report.json")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "aten::gt" in out and "aten::where" in out and "max_partitions 1" in out
    (record,) = json.loads((pytester.path / "report.json").read_text())["records"]
    assert record["coverage"]["partitions"] == 2 and record["npu"]["settings"]["memory_mode"] == "Shared_Sram"
    assert {f["check"] for f in record["budget_findings"]} == {"max_fallback", "max_partitions"}


def test_tosa_ref_is_skipped_with_the_reason_where_its_environment_is_not_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_edge.backends.ethos_u.tosa_reference import PYTHON_VARIABLE

    monkeypatch.delenv(PYTHON_VARIABLE, raising=False)
    assert "set PYTEST_EDGE_TOSA_PYTHON to its Python" in get_backend("tosa-ref").unavailable_reason()
    # Unregistered, no model's .tosa is searched for: the skip says why, not "no .tosa artifact".
    assert "set PYTEST_EDGE_TOSA_PYTHON" in get_backend("tosa-ref").missing_artifact("tiny_mlp")
    monkeypatch.setenv(PYTHON_VARIABLE, sys.executable)  # the main environment: no tosa-tools
    assert "tosa-tools is not installed there" in get_backend("tosa-ref").unavailable_reason()


@pytest.mark.skipif(not __import__("os").environ.get("PYTEST_EDGE_TOSA_PYTHON"),
                    reason="PYTEST_EDGE_TOSA_PYTHON names no environment with tosa-tools (tox -e tosa; docs/npu.md)")
def test_the_npu_path_s_numerics_on_the_tosa_reference_model_against_the_golden(pytester: pytest.Pytester) -> None:
    """tiny_mlp's golden (ONNX Runtime on the float .onnx) judges the Ethos-U delegate's TOSA graph on
    the reference model: within int8's rounding by the statistics, not within the float tolerance."""
    folder = _project(pytester)
    shutil.copy(FIXTURES / "tiny_mlp.onnx", folder / "tiny_mlp.onnx")
    shutil.copy(PTE_MLP, folder / "tiny_mlp.pte")
    shutil.copy(PTE_MLP.with_suffix(".tosa"), folder / "tiny_mlp.tosa")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="tiny_mlp", backends=["onnxruntime-cpu", "tosa-ref"], min_cosine=0.999, min_snr_db=30)
        def test_int8_close(edge_model):
            pass

        @pytest.mark.edge(model="tiny_mlp", backends=["tosa-ref"], atol=1e-4, rtol=0)
        def test_float_tolerance(edge_model):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "int8_close").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--edge-report=report.json")
    result.assert_outcomes(passed=2, failed=1)
    assert "tosa-ref: output 'y': 4 of 4 elements differ beyond atol=0.0001" in result.stdout.str()  # int8 rounding
    records = {(r["test"].split("::")[-1].split("[")[0], r["backend"]): r
               for r in json.loads((pytester.path / "report.json").read_text())["records"]}
    close = records[("test_int8_close", "tosa-ref")]
    assert close["verdict"] == "passed" and "2026.8.0" in json.dumps(close["runtime"])
    assert records[("test_float_tolerance", "tosa-ref")]["verdict"] == "failed"


def test_max_dram_kb_judges_the_dram_vela_reports(tmp_path: Path) -> None:
    """U65's default memory mode puts the weights in DRAM: vela's "Total DRAM used" is the figure,
    and a budget under it fails naming both numbers."""
    from pytest_edge.checks import check_compiled
    from pytest_edge.core.marker import parse_marker

    artifact = FIXTURES / "tiny_cnn_int8.tflite"
    compiled = get_backend("ethos-u65-256").compiler.compile(artifact, {}, 300)
    out = tmp_path / "vela-dram"
    done = subprocess.run([str(Path(sys.executable).with_name("vela")), str(artifact), "--accelerator-config",
                           "ethos-u65-256", "--output-dir", str(out)], capture_output=True, text=True, timeout=300)
    said = re.search(r"^Total DRAM used\s+([\d.]+) KiB", done.stdout, re.M)
    assert said and f"{compiled.dram_kib:.2f}" == said.group(1)
    under = float(said.group(1)) - 1
    (finding,) = check_compiled(compiled, parse_marker((), {"max_dram_kb": under}).budgets(check_compiled),
                                "ethos-u65-256")
    assert f"DRAM used {said.group(1)} KiB ({compiled.memories['dram']} bytes)" in finding.message
    assert f"> max_dram_kb {under:g} KiB" in finding.message
    assert check_compiled(compiled, parse_marker((), {"max_dram_kb": under + 2}).budgets(check_compiled),
                          "ethos-u65-256") == []


def test_the_gate_fails_npu_memory_grown_against_the_baseline() -> None:
    """SRAM, flash and DRAM are exact (the compiler's plan): grown beyond the threshold against the
    baseline's record, each fails naming both figures, as the artifact's size does; unchanged passes."""
    from pytest_edge.judging.regressions import NPU_MEMORY, resource_regressions

    def record(model: str, target: str) -> dict:
        compiled = get_backend(target).compiler.compile(next(p for p in (FIXTURES / f"{model}.tflite",
                                                                FIXTURES / "npu" / f"{model}.tflite") if p.is_file()),
                                               {}, 300)
        return {"backend": target, "coverage": codec.to_json(compiled.coverage), "npu": codec.to_json(compiled)}

    small, big = record("quant_probe_int8", "ethos-u55-128"), record("kws_dscnn_int8", "ethos-u55-128")
    small_figures, big_figures = GateFigures.from_json(small), GateFigures.from_json(big)
    found = [r for r in resource_regressions(big_figures, small_figures, 0.1) if r.figure == NPU_MEMORY]
    assert {r.message.split(" used ")[0] for r in found} == {"ethos-u55-128: SRAM", "ethos-u55-128: off-chip flash"}
    sram = next(r for r in found if "SRAM" in r.message)
    assert (sram.old, sram.new) == (small["npu"]["sram_bytes"], big["npu"]["sram_bytes"])
    assert f"({big['npu']['sram_bytes']} bytes)" in sram.message and f"({small['npu']['sram_bytes']} bytes)" in sram.message
    assert [r for r in resource_regressions(small_figures, small_figures, 0.1) if r.figure == NPU_MEMORY] == []
    assert [r for r in resource_regressions(small_figures, big_figures, 0.1)
            if r.figure == NPU_MEMORY] == []  # shrunk: no failure
    u65_small, u65_big = record("quant_probe_int8", "ethos-u65-256"), record("kws_dscnn_int8", "ethos-u65-256")
    assert any(r.message.startswith("ethos-u65-256: DRAM used")
               for r in resource_regressions(GateFigures.from_json(u65_big), GateFigures.from_json(u65_small), 0.1))


# ------------------------------------------------------------ a streaming model: two subgraphs

WAKE_WORD = FIXTURES / "npu" / "wake_word_int8.tflite"  # fixtures/make_wake_word.py (TensorFlow's converter)


def _cpu_operators_vela_wrote(folder: Path) -> Counter:
    """The operators of vela's optimised model that are no command stream, by type, every subgraph:
    read here with vela's flatbuffer classes from the output of the test's own vela run."""
    from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
    from ethosu.vela.tflite.Model import Model

    names = {value: name for name, value in vars(BuiltinOperator).items() if not name.startswith("_")}
    (optimised,) = folder.glob("*_vela.tflite")
    model = Model.GetRootAsModel(optimised.read_bytes(), 0)
    found: Counter = Counter()
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for o in range(graph.OperatorsLength()):
            code = model.OperatorCodes(graph.Operators(o).OpcodeIndex())
            if code.CustomCode() != b"ethos-u":
                found[names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]] += 1
    return found


@pytest.mark.parametrize("target", ["ethos-u55-128", "ethos-u85-256"])
def test_every_cpu_operator_of_every_subgraph_is_named_with_vela_s_reason(target: str, tmp_path: Path) -> None:
    """The newcomer's case: a streaming model whose resource variables make two subgraphs. Each CPU
    operator of both is named by its builtin type (CALL_ONCE, never vela's `None`) with vela's reason,
    counted as vela counts them, the names and the count from one source; the NPU's operators of both
    subgraphs are the delegated ids."""
    compiled = get_backend(target).compiler.compile(WAKE_WORD, {}, 300)
    said = vela_summary(WAKE_WORD, target, tmp_path)
    coverage = compiled.coverage
    written = _cpu_operators_vela_wrote(tmp_path / f"vela-{target}-{WAKE_WORD.stem}")
    assert coverage.fallback_ops == int(said["cpu"]) == sum(written.values()) == len(coverage.fallback_reasons)
    assert coverage.fallback_op_names == dict(written)
    assert sum(coverage.fallback_op_names.values()) == coverage.fallback_ops
    assert not [op for op in coverage.fallback_reasons if op.startswith("None")]
    assert all(reason == "Unsupported opType" for reason in coverage.fallback_reasons.values()), coverage.fallback_reasons
    assert not set(coverage.delegated_op_ids) & set(coverage.fallback_reasons)
    if target == "ethos-u85-256":  # all but the CALL_ONCE on the NPU, the initialisation subgraph's too
        assert coverage.fallback_reasons == {"CALL_ONCE": "Unsupported opType"}
        assert {"READ_VARIABLE concat/ReadVariableOp", "ASSIGN_VARIABLE Variable_22 [NoOp]"} <= set(coverage.delegated_op_ids)
        assert coverage.partitions == 2  # a command stream per subgraph
    else:  # every resource-variable operator of both subgraphs on the CPU; the network on the NPU
        assert coverage.fallback_op_names == {"CALL_ONCE": 1, "VAR_HANDLE": 6, "READ_VARIABLE": 3, "ASSIGN_VARIABLE": 6}
        assert {"READ_VARIABLE concat/ReadVariableOp", "VAR_HANDLE Variable_22 [NoOp]", "CALL_ONCE"} <= \
            set(coverage.fallback_reasons)
        assert {"CONV_2D Relu;Conv2D", "SOFTMAX StatefulPartitionedCall:0"} <= set(coverage.delegated_op_ids)
    # The per-layer report is the last subgraph's: every subgraph's operators are listed instead.
    assert sum(op.placed_on == "CPU" for op in compiled.operators) == coverage.fallback_ops


def test_allowed_cpu_ops_leaves_call_once_out_and_everything_else_must_be_on_the_npu(
        pytester: pytest.Pytester) -> None:
    """allowed_cpu_ops=["CALL_ONCE"] with max_fallback=0: the U85 passes (only CALL_ONCE on its CPU);
    the U55 fails naming every other CPU operator of both subgraphs and the allowed one as allowed.
    Without it the U85 fails naming CALL_ONCE."""
    folder = _project(pytester)
    shutil.copy(WAKE_WORD, folder / "wake.tflite")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.edge(model="wake", backends=["ethos-u55-128", "ethos-u85-256"], max_fallback=0,
                          allowed_cpu_ops=["CALL_ONCE"])
        def test_allowed(edge_model):
            pass

        @pytest.mark.edge(model="wake", backends=["ethos-u85-256"], max_fallback=0)
        def test_strict(edge_model):
            pass
    """)
    result = pytester.runpytest_inprocess("--edge-report=report.json")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    u55 = next(line for line in out.splitlines() if "ethos-u55-128: fallback" in line)
    assert "(15 of 54 operators left on the CPU by the NPU compiler besides those allowed)" in u55
    assert "fell back: ASSIGN_VARIABLE x6, VAR_HANDLE x6, READ_VARIABLE x3;" in u55
    assert "VAR_HANDLE Variable_22 [NoOp]: Unsupported opType" in u55
    assert "allowed on the CPU (allowed_cpu_ops, not counted): CALL_ONCE x1" in u55
    assert "; CALL_ONCE: " not in u55
    strict = next(line for line in out.splitlines() if "ethos-u85-256: fallback" in line)
    assert "(1 of 33 operators left on the CPU by the NPU compiler)" in strict
    assert "fell back: CALL_ONCE x1; CALL_ONCE: Unsupported opType" in strict and "None" not in strict
    verdicts = {(r["test"].split("::")[-1].split("[")[0], r["backend"]): r["verdict"]
                for r in json.loads((pytester.path / "report.json").read_text())["records"]}
    assert verdicts[("test_allowed", "ethos-u85-256")] == "passed"
    assert verdicts[("test_allowed", "ethos-u55-128")] == "failed"


def test_allowed_cpu_ops_is_checked_where_the_marker_is_parsed() -> None:
    from pytest_edge.core.marker import parse_marker
    from pytest_edge.errors import EdgeUsageError

    assert parse_marker((), {"max_fallback": 0, "allowed_cpu_ops": "CALL_ONCE, QUANTIZE"}).budget("allowed_cpu_ops") == \
        ("CALL_ONCE", "QUANTIZE")
    with pytest.raises(EdgeUsageError, match="allowed_cpu_ops qualifies max_fallback, which this marker does not set"):
        parse_marker((), {"allowed_cpu_ops": ["CALL_ONCE"]})
    for bad in ([], [""], 3, ["CALL_ONCE", 1]):
        with pytest.raises(EdgeUsageError, match="allowed_cpu_ops: expected operator names"):
            parse_marker((), {"max_fallback": 0, "allowed_cpu_ops": bad})


# ------------------------------------------------------------ bad input, at the causes (issue 49)

@pytest.mark.parametrize("build, why", [
    ("truncated", r"its flatbuffer is cut short or damaged \(error: unpack_from"),
    ("short_buffer", r"tensor 'stem/MatMul' of shape \[32, 16\] needs 512 bytes, and its buffer 7 holds 3"),
    ("no_operators", r"it has no operator"),
    ("tensor_out_of_range", r"operator 0 \(FULLY_CONNECTED\) has the input tensor 999 of 10"),
    ("opcode_out_of_range", r"operator 1 has the operator code 77 of 7"),
    ("huge_intermediate", r"tensor 'stem/MatMul;stem/Relu;stem/add' of shape \[1, 2147483647\] needs 2147483647 "
                          r"bytes, more than the 1073741824"),
])
def test_a_model_is_checked_before_vela_sees_it(tmp_path: Path, build: str, why: str) -> None:
    """Each hostile model (tests/hostile_models.py) is "not a valid model: <file>: <why>" before vela
    runs: no struct.error from the product's own read, no corrupt model compiled into a green, no 0 of
    0 operators shown as full coverage, no 4.8 GB vela for a 5.5 KB file."""
    import hostile_models

    path = hostile_models.write(tmp_path, f"{build}.tflite", getattr(hostile_models, build)())
    with pytest.raises(BackendError, match=rf"^not a valid model: {re.escape(str(path))}: .*{why}"):
        get_backend("ethos-u55-128").compiler.compile(path, {}, 300)


def test_inspect_of_a_truncated_tflite_is_a_row_naming_the_file(tmp_path: Path) -> None:
    import hostile_models
    from pytest_edge.cli.inspect import inspect_rows
    from pytest_edge.core.settings import Settings

    path = hostile_models.write(tmp_path, "cut.tflite", hostile_models.truncated())
    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, backends=["ethos-u55-128"])
    (row,) = inspect_rows(str(path), settings)
    assert row[5].startswith(f"error: not a valid model: {path}: its flatbuffer is cut short"), row


def test_vela_s_own_error_line_is_the_message_whole(tmp_path: Path) -> None:
    """vela's failure reads as vela's last error line, whole (its traceback is the error's cause, for
    --fulltrace), naming the file and the target."""
    from pytest_edge.backends.toolprocess import ToolFailed, ToolOutput

    artifact = FIXTURES / "quant_probe_int8.tflite"
    with pytest.raises(ToolFailed) as failed:
        get_backend("ethos-u55-128").compiler.compile(artifact, {"optimise": "Fastest"}, 300)
    assert str(failed.value) == f"{artifact} (ethos-u55-128): vela failed (exit status 1): KeyError: 'Fastest'"
    assert isinstance(failed.value.__cause__, ToolOutput) and "Traceback" in str(failed.value.__cause__)
    with pytest.raises(ToolFailed, match=r"vela failed \(exit status 1\): ethosu.vela.errors.CliOptionError: 'Error: "
                                         r"Incorrect argument to CLI option --system-config=Nowhere: Section "
                                         r"System_Config.Nowhere not found in Vela config file'$"):
        get_backend("ethos-u55-128").compiler.compile(artifact, {"system_config": "Nowhere"}, 300)


def test_vela_runs_under_a_memory_limit_set_in_its_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is vela's address space, set in the child: too small a limit fails vela itself,
    named as running out of memory under it, with the variable that sets it."""
    monkeypatch.setenv("PYTEST_EDGE_TOOL_MEMORY", "100MB")
    with pytest.raises(BackendError, match=r"quant_probe_int8.tflite \(ethos-u55-128\): vela ran out of memory under "
                                           r"its limit of 100 MiB \(PYTEST_EDGE_TOOL_MEMORY sets it\): MemoryError"):
        get_backend("ethos-u55-128").compiler.compile(FIXTURES / "quant_probe_int8.tflite", {}, 300)
    monkeypatch.setenv("PYTEST_EDGE_TOOL_MEMORY", "0")  # no limit
    from pytest_edge.backends.toolprocess import memory_limit

    assert memory_limit() is None
    monkeypatch.delenv("PYTEST_EDGE_TOOL_MEMORY")
    assert memory_limit() == 2 * 2**30


def test_a_tool_killed_by_a_signal_or_the_timeout_is_named_so() -> None:
    """The wrapper on real processes: a signal is named as a signal, the timeout as the timeout."""
    from pytest_edge.backends.toolprocess import ToolFailed, run_tool

    crash = [sys.executable, "-c", "import os, signal; print('working'); os.kill(os.getpid(), signal.SIGSEGV)"]
    with pytest.raises(ToolFailed, match=r"^m.tflite \(x\): vela was killed by SIGSEGV; it printed: working$") as failed:
        run_tool(crash, tool="vela", subject="m.tflite (x)", timeout_s=60)
    assert failed.value.ended == "signal SIGSEGV"
    with pytest.raises(ToolFailed, match=r"^m.tflite \(x\): vela did not finish in 0.5 s") as failed:
        run_tool([sys.executable, "-c", "import time; time.sleep(60)"], tool="vela", subject="m.tflite (x)",
                 timeout_s=0.5)
    assert failed.value.ended == "timeout"
    hungry = [sys.executable, "-c", "x = bytearray(3 * 2**30)"]
    with pytest.raises(ToolFailed, match=r"ran out of memory under its limit of 2 GiB .*: MemoryError$"):
        run_tool(hungry, tool="vela", subject="m.tflite (x)", timeout_s=60)


def test_config_is_confined_to_the_project_and_read_only_as_a_small_regular_file(tmp_path: Path) -> None:
    """edge_compile_options' config= is confined as model= is (absolute, ../, a link leading outside:
    refused), and vela is handed only a regular file of at most 1 MiB (a FIFO would block it, a
    1.5 GB .ini take 84 s and 2.9 GB)."""
    import os

    from pytest_edge.errors import EdgeUsageError
    from pytest_edge.run.compiled_check import confined_config

    root, outside = tmp_path / "project", tmp_path / "elsewhere.ini"
    root.mkdir()
    outside.write_text("[System_Config.X]\n")
    with pytest.raises(EdgeUsageError, match=r"edge_compile_options ethos-u55-128 config='/.*': an absolute path"):
        confined_config(str(outside), root, "ethos-u55-128")
    with pytest.raises(EdgeUsageError, match=r"config='../elsewhere.ini' is .*, outside the folders"):
        confined_config("../elsewhere.ini", root, "ethos-u55-128")
    (root / "link.ini").symlink_to(outside)
    with pytest.raises(EdgeUsageError, match=r"config='link.ini' leads to .*elsewhere.ini, outside the project's root"):
        confined_config("link.ini", root, "ethos-u55-128")
    (root / "boards").mkdir()
    assert confined_config("boards/vela.ini", root, "ethos-u55-128") == root / "boards/vela.ini"
    os.mkfifo(root / "fifo.ini")
    with pytest.raises(BackendError, match=r"config= .*fifo.ini: not a regular file"):
        get_backend("ethos-u55-128").compiler.compile(FIXTURES / "quant_probe_int8.tflite", {"config": str(root / "fifo.ini")}, 300)
    with open(root / "huge.ini", "wb") as handle:  # sparse: 1.5 GB that take no disk
        handle.truncate(1500 * 2**20)
    with pytest.raises(BackendError, match=r"huge.ini: 1572864000 bytes, more than the 1048576 bytes allowed"):
        get_backend("ethos-u55-128").compiler.compile(FIXTURES / "quant_probe_int8.tflite", {"config": str(root / "huge.ini")}, 300)


def test_compile_options_name_a_duplicate_key_and_an_unknown_target_with_the_option(tmp_path: Path) -> None:
    from pytest_edge.core.settings import Settings, parse_compile_options
    from pytest_edge.errors import EdgeUsageError
    from pytest_edge.run.compiled_check import CompiledChecker

    with pytest.raises(ValueError, match="edge_compile_options: ethos-u55-128 sets memory_mode twice "
                                         r"\('Shared_Sram', then 'Sram_Only'\)"):
        parse_compile_options(["ethos-u55-128 = memory_mode=Shared_Sram", "ethos-u55-128 = memory_mode=Sram_Only"])
    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path,
                        compile_options=parse_compile_options(["ethos-u99-1 = optimise=Size"]))
    with pytest.raises(EdgeUsageError, match=r"^edge_compile_options: unknown backend 'ethos-u99-1'"):
        CompiledChecker(settings).compiled("ethos-u55-128", FIXTURES / "quant_probe_int8.tflite")


def test_optional_estimates_are_written_as_optional(tmp_path: Path) -> None:
    """The project's own Ethos-U .pte without its delegate's graph has no estimate: inspect and the
    terminal note say so (they raised TypeError and printed `None cycles`); DRAM is in both."""
    from pytest_edge.cli.inspect import inspect_rows
    from pytest_edge.core.settings import Settings
    from pytest_edge.core.record import Record
    from pytest_edge.report.npu_targets import compiled_lines

    settings = Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path, backends=["ethos-u55-128"])
    (row,) = inspect_rows(str(PTE_SELECT), settings)
    assert row[5].endswith("DRAM none, no estimate"), row
    (row,) = inspect_rows(str(WAKE_WORD), Settings(golden_dir=tmp_path / "golden", rootdir=tmp_path,
                                                   backends=["ethos-u85-256"]))
    compiled = get_backend("ethos-u85-256").compiler.compile(WAKE_WORD, {}, 300)
    assert f"DRAM {compiled.dram_kib:.2f} KiB" in row[5] and compiled.dram_kib > 0
    select = get_backend("ethos-u55-128").compiler.compile(PTE_SELECT, {}, 300)
    record = Record.from_json({"test": "t.py::test_select", "backend": "ethos-u55-128", "model": {"name": "select"},
                               "verdict": "passed", "timing_not_judged": COMPILE_ONLY.reason,
                               "npu": codec.to_json(select)})
    lines = compiled_lines([record])
    assert lines[1].endswith("no estimate") and "None" not in lines[1], lines
