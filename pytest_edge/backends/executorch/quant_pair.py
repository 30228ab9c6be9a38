"""``pytest-edge triage quant`` for ExecuTorch: a float ``.pte`` against its int8 ``.pte`` (PT2E:
``quantize_per_tensor``/``dequantize_per_tensor`` around each op), both run with ETDump and a debug
buffer (etdump.py), which logs every KernelCall's output.

A ``.pte`` has no tensor names, so operators are matched by kind, in execution order: the float
program's kernel calls against the quantized program's, leaving out the quantized program's own
quantize/dequantize calls (difflib aligns the two sequences of operator names). Only operators that
read the model's input (directly or through others) are rows; those that only transform a weight
(the ``permute_copy`` of a linear's weight) are not. The quantized value of an operator's output is
the output of the dequantize that follows its quantize, where there is one. A layer's weights are
the inputs of a matched operator that do not come from the model's input: float, against the
quantized program's dequantized ones.

Delegated programs (XNNPACK partitions) log one call per partition, not per layer: refused, naming
the partitions.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import BackendError, EdgeUsageError
from ..base import TensorSpec
from ..intermediates import EtdumpEvent, EtdumpRecord
from ..quant_pair import Case, Matching, QuantPair, TensorPair, WeightPair

_QDQ = "quantized_decomposed::"
# Operator -> the index, among its logged inputs, of its weight, and that weight's output-channel axis.
_WEIGHT_AXIS = {"aten::addmm": 1, "aten::mm": 1, "aten::linear": 0, "aten::convolution": 0}


def _operator(label: str) -> str:
    return label.split(" at instruction", 1)[0].rsplit(".", 1)[0]


class PteProgram:
    """One non-delegated .pte and its ETDump record of one run."""

    def __init__(self, path: Path) -> None:
        try:
            import executorch.kernels.quantized  # noqa: F401 - registers quantize/dequantize kernels
            from .model import ExecuTorchModel
        except ImportError as exc:
            raise BackendError(f"triage quant of .pte models needs executorch ({exc})") from exc
        if not path.is_file():
            raise BackendError(f"{path}: no such .pte file")
        self.path, self.data = path, path.read_bytes()
        self.specs = ExecuTorchModel(self.data, path).inputs

    def events(self, case: Mapping[str, np.ndarray], where: str) -> list[EtdumpEvent]:
        from .etdump import etdump_intermediates

        names = list(case)
        if len(names) != len(self.specs):
            raise EdgeUsageError(f"{where} has {len(names)} inputs; {self.path} takes {len(self.specs)}")
        feeds = []
        for spec, name in zip(self.specs, names):
            value = np.asarray(case[spec.name] if spec.name in case else case[name])
            if tuple(value.shape) != tuple(spec.shape):
                raise EdgeUsageError(f"input {spec.name!r} of {self.path} has shape {list(spec.shape)}; "
                                     f"{where} gives {list(value.shape)} (not the same network?)")
            feeds.append(value.astype(spec.dtype, copy=False))
        found = etdump_intermediates(self.data, feeds)
        if found.unavailable:
            raise BackendError(f"{self.path}: ETDump could not record its operators: {found.unavailable}")
        events = found.details.events if isinstance(found.details, EtdumpRecord) else []
        delegated = [e.label for e in events if e.kind == "delegate"]
        if delegated:
            raise EdgeUsageError(f"{self.path} is delegated ({'; '.join(delegated)}): ETDump logs a partition's "
                                 "outputs per delegate call, not per layer; triage the program lowered without "
                                 "a partitioner (to_edge(...).to_executorch())")
        return events


@dataclass(frozen=True)
class _Row:
    """An operator call that reads the model's input: its event, its operator (overload left out) and
    the values computed from the input (one set, shared by every row of a run, complete once read)."""

    event: EtdumpEvent
    op: str
    derived: set[str]


def _rows(events: list[EtdumpEvent]) -> tuple[list[_Row], dict[str, str]]:
    """The operators that read the model's input, in order (quantize/dequantize left out), and each
    output's quantized view (the dequantize after its quantize). An event's logged inputs are the
    program's inputs and earlier outputs (constants are not logged), so an input no earlier event
    wrote is the model's."""
    produced: set[str] = set()
    derived: set[str] = set()  # the model's inputs and every value computed from them
    rows: list[_Row] = []
    quantize_of, dequantize_of = {}, {}
    for event in events:
        op = _operator(event.label)
        inputs, outputs = list(event.inputs), list(event.outputs)
        derived.update(v for v in inputs if v not in produced)
        reads_input = any(v in derived for v in inputs)
        if reads_input:
            derived.update(outputs)
        produced.update(outputs)
        if op.startswith(_QDQ + "quantize") and inputs and outputs:
            quantize_of[inputs[0]] = outputs[0]
        elif op.startswith(_QDQ + "dequantize") and inputs and outputs:
            dequantize_of[inputs[0]] = outputs[0]
        elif reads_input and outputs:
            rows.append(_Row(event, op, derived))
    view = {vid: dequantize_of[quantize_of[vid]] for vid in quantize_of if quantize_of[vid] in dequantize_of}
    return rows, view


class EtdumpPair(QuantPair):
    """A float and an int8 ``.pte``, not delegated, through ETDump (see the module's docstring)."""

    def __init__(self, float_model: Path, quant_model: Path) -> None:
        self.float_model, self.quant_model = float_model, quant_model
        self.fprogram, self.qprogram = PteProgram(float_model), PteProgram(quant_model)

    @property
    def float_inputs(self) -> list[TensorSpec]:
        return list(self.fprogram.specs)

    def match(self, first: Case, where: str) -> Matching:
        fevents, qevents = self.fprogram.events(first, where), self.qprogram.events(first, where)
        frows, _ = _rows(fevents)
        qrows, view = _rows(qevents)
        matcher = difflib.SequenceMatcher(a=[r.op for r in frows], b=[r.op for r in qrows], autojunk=False)
        pairs, matched_f, last_pair = [], set(), None
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                frow, qrow = frows[block.a + k], qrows[block.b + k]
                fout, qout = next(iter(frow.event.outputs)), next(iter(qrow.event.outputs))
                qkey = view.get(qout, qout)
                matched_f.add(block.a + k)
                last_pair = len(pairs) if block.a + k == len(frows) - 1 else last_pair
                pairs.append(TensorPair(f"{fout} (instruction {frow.event.instruction})", frow.op,
                                        f"{qkey} (instruction {qrow.event.instruction})",
                                        "int8" if qkey != qout else "float32", fout, qkey, -1,
                                        _weight(frow, qrow, qevents), False))
        if not pairs:
            raise EdgeUsageError(f"{self.float_model} and {self.quant_model} share no operator: two different networks")
        if last_pair is not None:  # the float program's last operator writes the output (unmatched: no end-to-end SNR)
            pairs[last_pair] = dataclasses.replace(pairs[last_pair], is_output=True)
        unmatched = [f"{r.op} at instruction {r.event.instruction}" for i, r in enumerate(frows) if i not in matched_f]
        return Matching(pairs, unmatched, [], "by operator, in execution order (a .pte has no tensor names)")

    def run(self, case: Case, where: str) -> tuple[dict, dict]:
        return _values(self.fprogram.events(case, where)), _values(self.qprogram.events(case, where))


def _values(events: list[EtdumpEvent]) -> dict[str, np.ndarray]:
    return {vid: value for event in events for vid, value in event.outputs.items()}


def _weight(frow: _Row, qrow: _Row, qevents: list[EtdumpEvent]) -> WeightPair | None:
    axis = _WEIGHT_AXIS.get(frow.op)
    if axis is None:
        return None
    fweights = [(vid, v) for vid, v in frow.event.inputs.items() if vid not in frow.derived]
    qweights = [(vid, v) for vid, v in qrow.event.inputs.items() if vid not in qrow.derived]
    if len(fweights) != 1 or len(qweights) != 1 or fweights[0][1].shape != qweights[0][1].shape:
        return None
    per_channel = _made_by(qweights[0][0], qevents, "dequantize_per_channel")
    scales = int(qweights[0][1].shape[axis]) if per_channel else 1
    return WeightPair(f"{qweights[0][0]} (weight of {qrow.op} at instruction {qrow.event.instruction})",
                      fweights[0][1], qweights[0][1], axis, scales)


def _made_by(vid: str, events: list[EtdumpEvent], operator: str) -> bool:
    """Whether ``vid`` comes from ``operator`` through single-input operators (a permute, a view)."""
    producer = {out: e for e in events for out in e.outputs}
    for _ in range(8):
        event = producer.get(vid)
        if event is None:
            return False
        if operator in event.label:
            return True
        if len(event.inputs) != 1:
            return False
        vid = next(iter(event.inputs))
    return False
