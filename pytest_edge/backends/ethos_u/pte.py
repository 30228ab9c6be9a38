"""An ExecuTorch ``.pte`` with Arm Ethos-U delegates, read from the file (docs/npu.md).

ExecuTorch's Arm backend (``EthosUPartitioner``) lowers each partition to TOSA and vela compiles it at
export; the program keeps, per delegate, the compile specs (the target and vela's flags) and vela's
output as a "vela_bin_stream": named blocks (``cmd_data``: the command stream, ``weight_data``,
``scratch_size``: the tensor arena, ``inputs``/``outputs``), each a 32-byte header (16-byte name,
uint32 length, a flag, 11 reserved bytes) then the data padded to 16 bytes
(executorch/backends/arm/arm_vela.py). The CPU's part is the plan's kernel calls (portable kernels).
vela's report (its operators, their estimate) is not in the file: vela run again on the TOSA graph
beside the ``.pte`` gives it (vela.py), checked to be that delegate's source by its command stream.
"""

from __future__ import annotations

import shlex
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import BackendError

if TYPE_CHECKING:
    from ..compiled import Compilation

ETHOS_U_DELEGATE = "EthosUBackend"
_BLOCK_HEADER = struct.Struct("<16sIB11s")
_EXTERNAL = 1


@dataclass(frozen=True)
class EthosUDelegate:
    """One Ethos-U delegate of the program: what it was compiled for, and vela's blocks' sizes."""

    target: str  # the accelerator configuration, "ethos-u55-128"
    flags: dict[str, str]  # vela's flags at export: accelerator-config, system-config, memory-mode, ...
    command_stream: bytes
    weights: bytes
    weight_bytes: int
    scratch_bytes: int  # the tensor arena vela planned (its "SRAM used" in the Shared_Sram memory mode)


@dataclass
class EthosUProgram:
    """The method ``forward`` of a ``.pte``: its Ethos-U delegates in call order and the operators
    the CPU runs (every kernel call, by operator name, in call order)."""

    delegates: list[EthosUDelegate] = field(default_factory=list)
    cpu_operators: list[str] = field(default_factory=list)
    other_delegates: list[str] = field(default_factory=list)  # another backend's (XNNPACK...)

    @property
    def cpu_counts(self) -> dict[str, int]:
        return dict(Counter(self.cpu_operators))


def vela_blocks(payload: bytes) -> dict[str, bytes]:
    """The named blocks of a vela_bin_stream; a ValueError for anything else."""
    found: dict[str, bytes] = {}
    offset = 0
    while offset + _BLOCK_HEADER.size <= len(payload):
        raw_name, length, flags, _ = _BLOCK_HEADER.unpack_from(payload, offset)
        offset += _BLOCK_HEADER.size
        if offset + length > len(payload):
            raise ValueError(f"block {raw_name!r} runs past the payload")
        name = raw_name.rstrip(b"\0").decode("ascii", "replace")
        if flags & _EXTERNAL:
            raise ValueError(f"block {name} is kept outside the .pte (VelaExternalBlockPlacements)")
        found[name] = payload[offset:offset + length]
        offset += (length + 15) // 16 * 16
    if "vela_bin_stream" not in found or "vela_end_stream" not in found:
        raise ValueError("not a vela_bin_stream")
    return found


def _flags(text: str) -> dict[str, str]:
    return {key.lstrip("-"): value for key, _, value in (word.partition("=") for word in shlex.split(text))}


def read_program(path: Path) -> EthosUProgram:
    """The Ethos-U delegates and CPU kernels of ``path``'s ``forward``; a BackendError naming the file
    where it is no program or a delegate's payload is unreadable. Read by the executorch backend's
    own flatbuffer reader (exir's deserializer imports the exporter: ~4 s a process)."""
    from ..executorch.program import UNREADABLE, delegate_payload, forward_plan, read_plans

    try:
        data = path.read_bytes()
        plans = read_plans(data)
    except OSError as error:
        raise BackendError(f"{path}: cannot read it ({error})") from None
    except UNREADABLE as error:
        raise BackendError(f"{path}: not an ExecuTorch program ({type(error).__name__}: {error})") from None
    plan = forward_plan(plans)
    if plan is None:
        raise BackendError(f"{path}: not an ExecuTorch program (no execution plan)")
    found = EthosUProgram()
    found.cpu_operators.extend(operator for operator, _ in plan.kernel_calls)
    for index in plan.delegate_calls:
        if not 0 <= index < len(plan.delegates):
            raise BackendError(f"{path}: not an ExecuTorch program (a call to delegate {index} of "
                               f"{len(plan.delegates)})")
        if plan.delegates[index] != ETHOS_U_DELEGATE:
            found.other_delegates.append(plan.delegates[index])
            continue
        specs = {key: value.decode("utf-8", "replace") for key, value in plan.delegate_specs[index].items()}
        try:
            flags = _flags(specs.get("compile_flags", ""))  # shlex: an unbalanced quote is a ValueError
            blocks = vela_blocks(delegate_payload(data, plan.delegate_data[index]))
            scratch = struct.unpack("<I", blocks["scratch_size"])[0]
            found.delegates.append(EthosUDelegate(
                specs.get("target") or flags.get("accelerator-config", "?"), flags, blocks["cmd_data"],
                blocks["weight_data"], len(blocks["weight_data"]), scratch))
        except (ValueError, KeyError, IndexError, TypeError, struct.error) as error:
            raise BackendError(f"{path}: its Ethos-U delegate #{len(found.delegates)} is unreadable "
                               f"({error})") from None
    return found


# Memory modes where vela puts the scratch (the tensor arena) in SRAM and the weights in off-chip
# flash (Shared_Sram) or SRAM (Sram_Only): there the blob's sizes are vela's "SRAM used" and "Off-chip
# Flash used"; in a Dedicated_Sram mode the scratch lives in DRAM (the SRAM is a cache of it).
_SCRATCH_IN_SRAM = ("Shared_Sram", "Sram_Only")
NO_ESTIMATE = ("no estimate: vela's report is not in the .pte; the TOSA graph the delegate was compiled from "
               "(ExecuTorch's EthosUCompileSpec(...).dump_intermediate_artifacts_to(DIR) writes it), saved "
               "beside the .pte as {tosa}, gives vela's operators and estimate")


def compile_pte(artifact: Path, target: str, timeout_s: float, version: str) -> "Compilation":
    """The placement, memory and (with the delegate's TOSA graph beside it) estimate of an ExecuTorch
    program's Ethos-U delegates for ``target``; a DoesNotConvert where the program has none, or they
    were compiled for another configuration (a command stream runs on the one it was compiled for)."""
    from ...errors import DoesNotConvert
    from ..base import Coverage
    from ..compiled import Compilation

    program = read_program(artifact)
    if not program.delegates:
        raise DoesNotConvert(f"{artifact} ({target}): no Ethos-U delegate in this program"
                             + (f" (its delegates: {', '.join(program.other_delegates)})" if program.other_delegates
                                else "") + "; lower it with ExecuTorch's EthosUPartitioner (docs/npu.md)")
    elsewhere = sorted({d.target for d in program.delegates} - {target})
    if elsewhere:
        raise DoesNotConvert(f"{artifact} ({target}): its Ethos-U delegate was compiled for {', '.join(elsewhere)}; "
                             "a command stream runs on the configuration it was compiled for: export one for "
                             f"{target} (EthosUCompileSpec(\"{target}\"))")
    flags = program.delegates[0].flags
    memory_mode = flags.get("memory-mode", "")
    scratch = sum(d.scratch_bytes for d in program.delegates)
    weights = sum(d.weight_bytes for d in program.delegates)
    memories = {"scratch": scratch, "weights": weights,
                "command_stream": sum(len(d.command_stream) for d in program.delegates)}
    settings = {"accelerator_config": target, "system_config": flags.get("system-config", ""),
                "memory_mode": memory_mode, "compiled": "at export, by ExecuTorch's Arm backend (the .pte's delegate)"}
    cpu = [f"{op} #{index}" for index, op in enumerate(program.cpu_operators)]
    tosa = artifact.with_suffix(".tosa")
    if len(program.delegates) == 1 and tosa.is_file():
        made = _vela_on_tosa(tosa, program.delegates[0], artifact, target, timeout_s, version)
        npu = made.coverage.delegated_ops
        coverage = Coverage(total_ops=npu + len(cpu), delegated_ops=npu, fallback_ops=len(cpu), partitions=1,
                            fallback_op_names=program.cpu_counts, delegates=["Ethos-U"], method="compiler",
                            delegated_op_ids=made.coverage.delegated_op_ids, fallback_reasons=dict.fromkeys(cpu, ""))
        settings["tosa"] = tosa.name
        return Compilation(target=target, compiler=made.compiler, settings=settings, coverage=coverage,
                           sram_bytes=scratch if memory_mode in _SCRATCH_IN_SRAM else None,
                           flash_bytes=weights if memory_mode == "Shared_Sram" else None,
                           memories={**made.memories, **memories}, clock_hz=made.clock_hz,
                           estimated_cycles=made.estimated_cycles, estimated_ms=made.estimated_ms, macs=made.macs,
                           operators=made.operators, estimate_note=made.estimate_note + "; the program's CPU "
                           "kernels are not in it either")
    # Without vela's report, each delegate counts as one operator: an approximate fraction.
    coverage = Coverage(total_ops=len(program.delegates) + len(cpu), delegated_ops=len(program.delegates),
                        fallback_ops=len(cpu), partitions=len(program.delegates), fallback_op_names=program.cpu_counts,
                        delegates=["Ethos-U"], method="compiler", approximate=True,
                        delegated_op_ids=[f"Ethos-U delegate #{i}" for i in range(len(program.delegates))],
                        fallback_reasons=dict.fromkeys(cpu, ""))
    return Compilation(target=target, compiler="vela (at export, by ExecuTorch's Arm backend)", settings=settings,
                       coverage=coverage, sram_bytes=scratch if memory_mode in _SCRATCH_IN_SRAM else None,
                       flash_bytes=weights if memory_mode == "Shared_Sram" else None, memories=memories,
                       estimate_note=NO_ESTIMATE.format(tosa=tosa.name))


def _vela_on_tosa(tosa: Path, delegate: EthosUDelegate, artifact: Path, target: str, timeout_s: float,
                  version: str) -> "Compilation":
    """vela run on the delegate's TOSA graph with the delegate's own flags: its report, once its
    command stream is the delegate's byte for byte (else the graph is another's: an error)."""
    import sys
    import tempfile

    import numpy as np

    from .vela import read_results, run_vela

    with tempfile.TemporaryDirectory(prefix="pytest-edge-vela-") as folder:
        output_dir = Path(folder)
        command = [sys.executable, "-m", "ethosu.vela", str(tosa), "--output-dir", str(output_dir),
                   "--verbose-performance", *(f"--{key}={value}" for key, value in delegate.flags.items()
                                              if key != "output-dir")]
        said = run_vela(command, tosa, target, timeout_s)
        raw = output_dir / f"{tosa.stem}_vela.npz"
        with np.load(raw, allow_pickle=False) as data:
            same = (data["cmd_data"].tobytes() == delegate.command_stream
                    and data["weight_data"].tobytes() == delegate.weights)
        if not same:
            raise BackendError(f"{artifact} ({target}): {tosa.name} beside it is not its delegate's TOSA graph: vela's "
                               "command stream or weights from it differ from the program's")
        return read_results(output_dir, said, tosa, target, version, partitions=1)
