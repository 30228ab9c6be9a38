"""vela, Arm's compiler for the Ethos-U microNPUs, run as users run it and read from its own files.

vela 5.2.0 has no Python API for a whole compilation (``ethosu.vela.api`` encodes register
commands; ``ethosu.regor.compile`` needs the configuration text ``vela.main`` assembles), so it runs
as its command line in a child process (``python -m ethosu.vela``) into a temporary folder, with
``--verbose-performance``, and its results are read from:

- the summary CSV (``<stem>_summary_<system config>.csv``): memory used per memory (KiB), the
  clock, the estimated cycles and inference time, MACs, the configuration it resolved;
- the per-layer CSV (``<stem>_per-layer.csv``): each operator of vela's graph with its target
  (NPU or CPU), its original operator and name, its estimated cycles;
- its standard output: the operator counts of the network summary (``CPU operators = 3``; the
  per-layer rows also list operators fused into another, which the counts do not) and, for each
  operator left on the CPU, the supported-operators check's reason (``Warning (supported operators)
  operator: CUMSUM, ofm: 'Identity'`` then ``Reason: Unsupported opType``);
- the optimised ``<stem>_vela.tflite``: one ``ethos-u`` custom operator per NPU partition.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Mapping

from ...errors import BackendError, DoesNotConvert
from ..base import Coverage
from ..compiled import Compilation, CompiledOperator

# The options a user may set per target (edge_compile_options), as vela's flags.
OPTIONS = {"system_config": "--system-config", "memory_mode": "--memory-mode", "config": "--config",
           "arena_cache_size": "--arena-cache-size", "optimise": "--optimise"}
# What each memory of the summary CSV is called in the record.
_MEMORIES = {"sram_memory_used": "sram", "dram_memory_used": "dram", "on_chip_flash_memory_used": "on_chip_flash",
             "off_chip_flash_memory_used": "off_chip_flash"}
_COUNT = re.compile(r"^(CPU|NPU) operators = (\d+) \(")
_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '(.*)'\s*$")
_QUANTIZED_TYPES = ("INT8", "UINT8", "INT16")
ESTIMATE_NOTE = ("vela's estimate of the NPU's cycles per inference at the configured clock, from its model "
                 "of the hardware (not a measurement; Arm says to run the compiled network on an FVP model or "
                 "an FPGA for performance numbers); the operators it leaves on the CPU are not in it")


def vela_command(artifact: Path, accelerator: str, options: Mapping[str, str], output_dir: Path) -> list[str]:
    """The vela command line for ``artifact`` on ``accelerator`` with the user's ``options``."""
    command = [sys.executable, "-m", "ethosu.vela", str(artifact), "--accelerator-config", accelerator,
               "--output-dir", str(output_dir), "--verbose-performance"]
    for key, value in options.items():
        command += [OPTIONS[key], str(value)]
    return command


def quantized(artifact: Path) -> bool:
    """Whether ``artifact`` holds any quantized (int8, uint8, int16) tensor: a float model has none,
    and vela would keep every operator on the CPU."""
    from ethosu.vela.tflite.Model import Model
    from ethosu.vela.tflite.TensorType import TensorType

    wanted = {getattr(TensorType, name) for name in _QUANTIZED_TYPES}
    model = Model.GetRootAsModel(artifact.read_bytes(), 0)
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        if any(graph.Tensors(t).Type() in wanted for t in range(graph.TensorsLength())):
            return True
    return False


def npu_partitions(optimised: Path) -> int:
    """The ``ethos-u`` custom operators of vela's output: one per command stream (NPU partition)."""
    from ethosu.vela.tflite.Model import Model

    model = Model.GetRootAsModel(optimised.read_bytes(), 0)
    codes = {i for i in range(model.OperatorCodesLength()) if model.OperatorCodes(i).CustomCode() == b"ethos-u"}
    return sum(1 for s in range(model.SubgraphsLength()) for o in range(model.Subgraphs(s).OperatorsLength())
               if model.Subgraphs(s).Operators(o).OpcodeIndex() in codes)


def cpu_reasons(stdout: str) -> dict[str, tuple[str, str]]:
    """vela's supported-operators warnings: output tensor name -> (operator type, reason). A reason
    is the ``Reason:`` line and the lines that follow it up to a blank line."""
    found: dict[str, tuple[str, str]] = {}
    lines = stdout.splitlines()
    for index, line in enumerate(lines):
        match = _WARNING.match(line)
        if not match:
            continue
        reason: list[str] = []
        for follow in lines[index + 1:]:
            if not follow.strip() or _WARNING.match(follow) or (reason and follow.startswith("#")):
                break
            reason.append(follow.strip().removeprefix("Reason:").strip())
        found.setdefault(match.group(2), (match.group(1), ". ".join(r.rstrip(".") for r in reason if r)))
    return found


def reason_of(name: str, reasons: Mapping[str, tuple[str, str]]) -> str:
    """vela's reason for the CPU operator ``name`` of its per-layer report: the warning about that
    output tensor, else the one about the part of it vela split off before checking it (a fused
    activation becomes ``<name>_act``); "" where it printed none."""
    if name in reasons:
        return reasons[name][1]
    split = [reason for ofm, (_, reason) in reasons.items() if ofm.startswith(name + "_")]
    return split[0] if len(split) == 1 else ""


def _counts(stdout: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in map(_COUNT.match, stdout.splitlines()) if m}


def _number(row: Mapping[str, str], key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def read_results(output_dir: Path, stdout: str, artifact: Path, target: str, version: str,
                 partitions: int | None = None) -> Compilation:
    """The :class:`Compilation` from vela's files in ``output_dir`` and what it printed (``stdout``,
    with its standard error: the compiler core prints its warnings apart from the Python summary).
    ``partitions``: None to count them in the optimised ``.tflite`` (a raw output has none)."""
    stem = artifact.stem
    summaries = sorted(output_dir.glob(f"{stem}_summary_*.csv"))
    per_layer, optimised = output_dir / f"{stem}_per-layer.csv", output_dir / f"{stem}_vela.tflite"
    counts = _counts(stdout)
    if not summaries or not per_layer.is_file() or (partitions is None and not optimised.is_file()) \
            or set(counts) != {"CPU", "NPU"}:
        raise BackendError(f"{artifact} ({target}): vela wrote no summary, per-layer report or optimised model "
                           f"(or printed no operator counts); its output ended: {stdout[-600:]}")
    with open(summaries[0], newline="") as handle:
        summary = next(csv.DictReader(handle))
    with open(per_layer, newline="") as handle:
        layers = list(csv.DictReader(handle))
    operators = [CompiledOperator(row["Original Operator"], row["Name"], row["Target"],
                                  int(float(row["Op Cycles"])) if _number(row, "Op Cycles") is not None else None)
                 for row in layers]
    reasons = cpu_reasons(stdout)
    cpu_ops = [op for op in operators if op.placed_on == "CPU"]
    fallback_reasons = {f"{op.op} {op.name}": reason_of(op.name, reasons) for op in cpu_ops}
    delegated = list(dict.fromkeys(f"{op.op} {op.name}" for op in operators if op.placed_on == "NPU"))
    npu, cpu = counts["NPU"], counts["CPU"]
    coverage = Coverage(total_ops=npu + cpu, delegated_ops=npu, fallback_ops=cpu,
                        partitions=npu_partitions(optimised) if partitions is None else partitions,
                        fallback_op_names=dict(Counter(op.op for op in cpu_ops)),
                        delegates=["Ethos-U"] if npu else [], method="compiler",
                        delegated_op_ids=delegated, fallback_reasons=fallback_reasons)
    memories = {name: round(_number(summary, key) * 1024) for key, name in _MEMORIES.items()  # type: ignore[operator]
                if _number(summary, key) is not None}
    clock, seconds = _number(summary, "core_clock"), _number(summary, "inference_time")
    cycles, macs = _number(summary, "cycles_total"), _number(summary, "nn_macs")
    return Compilation(
        target=target, compiler=f"vela {version}",
        settings={"accelerator_config": summary.get("accelerator_configuration", ""),
                  "system_config": summary.get("system_config", ""), "memory_mode": summary.get("memory_mode", ""),
                  "weights_storage_area": summary.get("weights_storage_area", ""),
                  "feature_map_storage_area": summary.get("feature_map_storage_area", "")},
        coverage=coverage, sram_bytes=memories.get("sram"), flash_bytes=memories.get("off_chip_flash"),
        memories=memories, clock_hz=clock, estimated_cycles=int(cycles) if cycles is not None else None,
        estimated_ms=seconds * 1000 if seconds is not None else None, macs=int(macs) if macs is not None else None,
        operators=operators, estimate_note=ESTIMATE_NOTE)


def compile_with_vela(artifact: Path, target: str, options: Mapping[str, str], timeout_s: float,
                      version: str) -> Compilation:
    """Run vela on ``artifact`` for ``target`` (its accelerator configuration) and read its results."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise BackendError(f"{target}: edge_compile_options: unknown option(s) {', '.join(unknown)}; "
                           f"vela's are {', '.join(OPTIONS)}")
    if not quantized(artifact):
        raise DoesNotConvert(f"{artifact} ({target}): needs an int8 model: this .tflite has no quantized tensor, "
                             "and Ethos-U runs int8 (and int16) operators only (vela would keep every operator "
                             "on the CPU); convert it with full-integer quantization (docs/npu.md)")
    with tempfile.TemporaryDirectory(prefix="pytest-edge-vela-") as folder:
        output_dir = Path(folder)
        said = run_vela(vela_command(artifact, target, options, output_dir), artifact, target, timeout_s)
        return read_results(output_dir, said, artifact, target, version)


def run_vela(command: list[str], artifact: Path, target: str, timeout_s: float) -> str:
    """Run vela's ``command``; what it printed (standard output then error), or a BackendError."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise BackendError(f"{artifact} ({target}): vela did not finish in {timeout_s:g} s") from None
    said = done.stdout + done.stderr
    if done.returncode != 0:
        raise BackendError(f"{artifact} ({target}): vela failed (exit status {done.returncode}): {said.strip()[-800:]}")
    return said
