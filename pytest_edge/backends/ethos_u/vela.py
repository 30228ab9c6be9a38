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
- the optimised ``<stem>_vela.tflite``, every subgraph of it (a streaming model's initialisation
  subgraph too): one ``ethos-u`` custom operator per NPU partition, and every other operator is one
  vela left on the CPU, named by its builtin opcode (``CALL_ONCE``, which vela's own reports print as
  ``None``) and its tensor (tflite_model.py). vela's per-layer CSV covers the last subgraph only.

vela runs bounded and confined (toolprocess.py): a memory limit set in its process, the timeout, its
own last error line as the message.
"""

from __future__ import annotations

import csv
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ...errors import BackendError, DoesNotConvert
from ..base import Coverage
from ..compiled import Compilation, CompiledOperator
from ..toolprocess import checked_file, error_line, run_tool
from .tflite_model import Operator, TfliteModel, read_model

# The options a user may set per target (edge_compile_options), as vela's flags.
OPTIONS = {"system_config": "--system-config", "memory_mode": "--memory-mode", "config": "--config",
           "arena_cache_size": "--arena-cache-size", "optimise": "--optimise"}
# What each memory of the summary CSV is called in the record.
_MEMORIES = {"sram_memory_used": "sram", "dram_memory_used": "dram", "on_chip_flash_memory_used": "on_chip_flash",
             "off_chip_flash_memory_used": "off_chip_flash"}
_COUNT = re.compile(r"^(CPU|NPU) operators = (\d+) \(")
_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '(.*)'\s*$")
# The largest vela configuration file read (vela's own Arm/vela.ini is 13 KB).
MAX_CONFIG_BYTES = 2**20
NPU_OPERATOR = "ethos-u"  # the custom operator of a command stream in vela's output
# The largest tensor of a model for a microNPU (its SRAM is kilobytes to a few megabytes): a model
# that declares a larger one (a 5.5 KB .tflite with a [1, 2**31 - 1] intermediate) is refused before
# vela, which would spend its memory limit and the timeout on it (docs/npu.md).
MAX_TENSOR_BYTES = 2**30
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
    and vela would keep every operator on the CPU. A file that is no consistent .tflite is a
    BackendError naming it (tflite_model.py)."""
    return read_model(artifact).quantized


def operator_id(operator: Operator, graph: int, graph_name: str) -> str:
    """An operator as the record names it: its type and tensor (``CUMSUM Identity``), with its
    subgraph where that is not the first (``VAR_HANDLE Variable_22 [NoOp]``)."""
    return f"{operator.opcode} {operator.label}".rstrip() + (f" [{graph_name}]" if graph else "")


def _unique(ids: list[str]) -> list[str]:
    seen: Counter[str] = Counter()
    made = []
    for name in ids:
        seen[name] += 1
        made.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return made


def cpu_warnings(stdout: str) -> list[tuple[str, str, str]]:
    """vela's supported-operators warnings, each (operator type as vela prints it, output tensor
    name, reason), in order. An operator without an output is named ``placeholder-for-N-OFM`` (N: its
    index in its subgraph of the model vela read); CALL_ONCE's type is printed ``None``."""
    found: list[tuple[str, str, str]] = []
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
        found.append((match.group(1), match.group(2), ". ".join(r.rstrip(".") for r in reason if r)))
    return found


def cpu_reasons(stdout: str) -> dict[str, tuple[str, str]]:
    """vela's supported-operators warnings: output tensor name -> (operator type, reason), the first
    warning of each name (cpu_warnings). A reason is the ``Reason:`` line and the lines that follow it
    up to a blank line."""
    found: dict[str, tuple[str, str]] = {}
    for op, name, reason in cpu_warnings(stdout):
        found.setdefault(name, (op, reason))
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


def _reason(operator: Operator, original: Operator | None, warnings: list[tuple[str, str, str]]) -> str:
    """vela's reason for the CPU ``operator`` (``original``: the same operator in the model vela read):
    the warning about its output tensor, else (an operator without an output) about its placeholder,
    else the one reason vela gave every operator of its type; "" where it printed none."""
    types = {operator.opcode, "None"}  # vela prints CALL_ONCE's type as None
    names = list(operator.outputs) or ([f"placeholder-for-{original.index}-OFM"] if original is not None else [])
    for name in names:
        said = {reason for kind, ofm, reason in warnings if ofm == name and kind in types}
        if len(said) == 1:
            return said.pop()
    for name in names:  # a fused activation split off before the check: <name>_act
        said = {reason for kind, ofm, reason in warnings if ofm.startswith(name + "_") and kind in types}
        if len(said) == 1:
            return said.pop()
    said = {reason for kind, _, reason in warnings if kind == operator.opcode}
    return said.pop() if len(said) == 1 else ""


@dataclass
class Placement:
    """Where vela put the operators, read from its optimised model (every subgraph): the CPU's named
    with vela's reasons, the NPU's named as in the model it read, and its command streams."""

    cpu: dict[str, str]  # operator id -> vela's reason ("" where it gave none)
    cpu_types: dict[str, int]  # operator type -> how many stayed on the CPU
    delegated: list[str]  # the source model's operators vela took, by the same ids
    partitions: int
    subgraphs: int
    operators: list[CompiledOperator]


def placement(source: TfliteModel, optimised: TfliteModel, stdout: str) -> Placement:
    """The placement of ``source`` from vela's ``optimised`` model of it and what vela printed."""
    warnings = cpu_warnings(stdout)
    cpu_ids, reasons, kinds, taken, operators, partitions = [], [], [], [], [], 0
    for number, graph in enumerate(optimised.subgraphs):
        given = source.subgraphs[number] if number < len(source.subgraphs) else None
        originals = {op.signature: op for op in given.operators} if given is not None else {}
        for op in graph.operators:
            if op.opcode == NPU_OPERATOR:
                partitions += 1
                operators.append(CompiledOperator(NPU_OPERATOR, f"command stream #{partitions}"
                                                  + (f" [{graph.name}]" if number else ""), "NPU"))
                continue
            cpu_ids.append(operator_id(op, number, graph.name))
            reasons.append(_reason(op, originals.get(op.signature), warnings))
            kinds.append(op.opcode)
    cpu_ids = _unique(cpu_ids)
    operators += [CompiledOperator(kind, name, "CPU") for kind, name in zip(kinds, cpu_ids)]
    on_cpu = {(number, op.signature) for number, graph in enumerate(optimised.subgraphs) for op in graph.operators}
    for number, graph in enumerate(source.subgraphs):
        ids = _unique([operator_id(op, number, graph.name) for op in graph.operators])
        taken += [name for name, op in zip(ids, graph.operators) if (number, op.signature) not in on_cpu]
    return Placement(dict(zip(cpu_ids, reasons)), dict(Counter(kinds)), taken, partitions, len(optimised.subgraphs),
                     operators)


def read_results(output_dir: Path, stdout: str, artifact: Path, target: str, version: str,
                 partitions: int | None = None, source: TfliteModel | None = None) -> Compilation:
    """The :class:`Compilation` from vela's files in ``output_dir`` and what it printed (``stdout``,
    with its standard error: the compiler core prints its warnings apart from the Python summary).
    ``partitions``: None to read the placement from the optimised ``.tflite`` (``source``: the model
    vela read, checked); a number for a raw output (a TOSA graph's), placed by the per-layer CSV."""
    stem = artifact.stem
    summaries = sorted(output_dir.glob(f"{stem}_summary_*.csv"))
    per_layer, optimised = output_dir / f"{stem}_per-layer.csv", output_dir / f"{stem}_vela.tflite"
    counts = _counts(stdout)
    if not summaries or not per_layer.is_file() or (partitions is None and not optimised.is_file()) \
            or set(counts) != {"CPU", "NPU"}:
        raise BackendError(f"{artifact} ({target}): vela wrote no summary, per-layer report or optimised model "
                           f"(or printed no operator counts); its last line: {error_line(stdout)}")
    with open(summaries[0], newline="") as handle:
        summary = next(csv.DictReader(handle), {})
    with open(per_layer, newline="") as handle:
        layers = list(csv.DictReader(handle))
    operators = [CompiledOperator(row.get("Original Operator") or "?", row.get("Name") or "?", row.get("Target") or "?",
                                  int(float(row["Op Cycles"])) if _number(row, "Op Cycles") is not None else None)
                 for row in layers]
    npu = counts["NPU"]
    if partitions is None:
        placed = placement(source or read_model(artifact), read_model(optimised, "vela wrote an unreadable model"),
                           stdout)
        if placed.subgraphs > 1:  # the per-layer report is the last subgraph's: every subgraph's operators instead
            operators = placed.operators
        coverage = Coverage(total_ops=npu + len(placed.cpu), delegated_ops=npu, fallback_ops=len(placed.cpu),
                            partitions=placed.partitions, fallback_op_names=placed.cpu_types,
                            delegates=["Ethos-U"] if npu else [], method="compiler",
                            delegated_op_ids=placed.delegated, fallback_reasons=placed.cpu)
    else:
        reasons = cpu_reasons(stdout)
        cpu_ops = [op for op in operators if op.placed_on == "CPU"]
        cpu = len(cpu_ops)
        coverage = Coverage(total_ops=npu + cpu, delegated_ops=npu, fallback_ops=cpu, partitions=partitions,
                            fallback_op_names=dict(Counter(op.op for op in cpu_ops)),
                            delegates=["Ethos-U"] if npu else [], method="compiler",
                            delegated_op_ids=list(dict.fromkeys(f"{op.op} {op.name}" for op in operators
                                                                if op.placed_on == "NPU")),
                            fallback_reasons={f"{op.op} {op.name}": reason_of(op.name, reasons) for op in cpu_ops})
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
    """Run vela on ``artifact`` for ``target`` (its accelerator configuration) and read its results.
    The model is checked before vela sees it (tflite_model.py), and a ``config`` file is a regular file
    of at most MAX_CONFIG_BYTES (a FIFO would block vela, a huge one take its memory)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise BackendError(f"{target}: edge_compile_options: unknown option(s) {', '.join(unknown)}; "
                           f"vela's are {', '.join(OPTIONS)}")
    if "config" in options:
        checked_file(Path(options["config"]), f"{target}: edge_compile_options config=", MAX_CONFIG_BYTES)
    source = read_model(artifact, max_tensor_bytes=MAX_TENSOR_BYTES)
    if not source.quantized:
        raise DoesNotConvert(f"{artifact} ({target}): needs an int8 model: this .tflite has no quantized tensor, "
                             "and Ethos-U runs int8 (and int16) operators only (vela would keep every operator "
                             "on the CPU); convert it with full-integer quantization (docs/npu.md)")
    with tempfile.TemporaryDirectory(prefix="pytest-edge-vela-") as folder:
        output_dir = Path(folder)
        said = run_vela(vela_command(artifact, target, options, output_dir), artifact, target, timeout_s)
        return read_results(output_dir, said, artifact, target, version, source=source)


def run_vela(command: list[str], artifact: Path, target: str, timeout_s: float) -> str:
    """Run vela's ``command`` bounded and confined (toolprocess.py); what it printed (standard output
    then error), or a BackendError naming the file, the target and vela's own error line."""
    return run_tool(command, tool="vela", subject=f"{artifact} ({target})", timeout_s=timeout_s,
                    env=_ONE_THREAD).output


# vela needs one thread: NumPy's BLAS would otherwise reserve address space per core under the limit.
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
