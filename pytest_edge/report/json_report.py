"""The JSON report (SPEC §6): build, write and read it back, merge reports from several machines,
and compare a report with a baseline report. A report is a :class:`Report` of typed
:class:`~pytest_edge.core.record.Record` s; its JSON is read (:func:`read_report`, validated) and
written (:func:`write_report`) here only."""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import codec
from ..backends import split_device
from ..files import atomic_write
from ..judging.baseline import find_baseline  # the report's name for it too (report/__init__)
from ..judging.figures import GateFigures
from ..measurement.machine import ABSENT, Machine
from ..judging.regressions import GENERATION_FIGURES, check_baseline
from ..core.record import GateVerdict, Record, TimingNotJudged, Verdict, is_finite_number
from .deployment import invalid_field
from ..judging.figures import invalid_gate_field
from .generation import decoder_gate_figures
from .table import Matrix, matrix_cell

SCHEMA = "pytest-edge/report/1"
# The report's own keys, in the order written; a report's other keys (another version's) follow.
_KEYS = ("schema", "created", "machine", "machines", "records", "matrix")
# A record's keys beyond what every record says (who, what, why): a check's figures.
_MEASURED = frozenset(f.name for f in fields(Record)) - {"test", "model", "backend", "verdict", "violations",
                                                        "skip_reason", "extra", "checked", "timing_not_judged"}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Report:
    """A JSON report: its records, when it was made, and the machine that ran them; a merged report
    (:func:`merge_reports`) has each report's machine (``machines``, each with its ``label``, which
    its records name under ``machine``) and the device x backend matrix instead."""

    records: list[Record]
    # The machine that ran them (measurement.machine.machine_info(), a history's name), and a merged
    # report's per machine: written back as they were read.
    machine: Machine | None = None
    created: str = field(default_factory=_now)
    schema: str = SCHEMA
    machines: list[Machine] | None = None
    matrix: Matrix | None = None
    unknown: dict[str, Any] = field(default_factory=dict)  # another version's keys, written back

    def to_json(self) -> dict[str, Any]:
        """The report's JSON, its keys in the order written (:data:`_KEYS`; one that is None left out)."""
        machine = {"machine": codec.to_json(self.machine)} if self.machine is not None else {}
        machines = {"machines": codec.to_json(self.machines)} if self.machines is not None else {}
        matrix = {"matrix": codec.to_json(self.matrix)} if self.matrix is not None else {}
        records = [record.to_json() for record in self.records]
        for data, record in zip(records, self.records):
            if "machine" in record.extra:  # a merged record's label: its last key, as merge_reports has written it
                data["machine"] = data.pop("machine")
        return {"schema": self.schema, "created": self.created, **machine, **machines, "records": records, **matrix,
                **self.unknown}

    def baseline_of(self, record: Record) -> Record | None:
        """The record of this (baseline) report that ``record`` is compared against: the same test,
        else the same model (its key) on the same backend (judging.baseline.find_baseline, the gate's rule)."""
        return find_baseline(self.records, test=record.test, model=record.model.name, backend=record.backend)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "a report") -> "Report":
        """A report as :func:`read_report` validated it; ValueError naming ``where`` and the record
        for a record :class:`Record` cannot read."""
        records = []
        for index, record in enumerate(data.get("records") or []):
            test = f" ({record['test']})" if isinstance(record.get("test"), str) else ""
            try:
                typed = Record.from_json(record, f"{where}: record {index}{test}")
            except (TypeError, KeyError, AttributeError) as exc:  # a block no reader here checks the shape of
                raise ValueError(f"{where}: record {index}{test}: {type(exc).__name__}: {exc}") from None
            # A record written by hand or by another tool may hold figures and no accuracy key (what
            # Record.from_json tells a check that ran by): its figures are kept, not dropped when written.
            typed.checked = typed.checked or any(key in record for key in _MEASURED)
            records.append(typed)
        try:  # a merged report's matrix: merge_reports makes its own, so one that does not read is none
            matrix = codec.from_json(Matrix, data["matrix"], f"{where}: matrix") if isinstance(data.get("matrix"), Mapping) \
                else None
        except ValueError:
            matrix = None
        machine = data.get("machine")
        machines = data.get("machines")
        return cls(records, Machine.from_json(machine) if isinstance(machine, Mapping) else None,
                   str(data.get("created", "")), str(data.get("schema", SCHEMA)),
                   [Machine.from_json(m) for m in machines if isinstance(m, Mapping)] if isinstance(machines, list)
                   else None,
                   matrix, {k: v for k, v in data.items() if k not in _KEYS})


def build_report(records: Sequence[Record], machine: Machine) -> Report:
    return Report(sorted(records, key=lambda r: r.test), machine)


def write_report(path: Path, report: Report) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps(report.to_json(), indent=2) + "\n").encode())


def write_page(path: Path, text: str) -> None:
    """The HTML page or Markdown summary, written as the JSON report is (readers see the old file or
    the new one, never a page cut short by a full disk). A stream (a pipe, ``/dev/stdout``,
    ``$GITHUB_STEP_SUMMARY`` where a runner made it one) is written in place; a link to a file is
    replaced as the JSON report replaces it, so a committed link never writes where it points
    (outside the project, perhaps)."""
    path = Path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):  # stat follows a link to its target
        path.write_text(text, encoding="utf-8")
        return
    atomic_write(path, text.encode("utf-8"))


def load_report(path: Path) -> Report:
    """Read a report written by ``write_report`` or ``merge_reports`` (:func:`read_report`) as a
    :class:`Report`; ValueError naming the file and the offending record."""
    return Report.from_json(read_report(path), f"{path} is not a valid pytest-edge report")


def read_report(path: Path) -> dict[str, Any]:
    """The JSON of a report written by ``write_report`` or ``merge_reports``; anything else (not
    JSON, not an object, another schema, records of the wrong shape, non-numeric figures) is a
    ValueError naming the file and the offending record, which callers report instead of a
    traceback. Unknown fields are accepted, and every figure may be ``null`` (not measured)."""
    try:
        report = json.loads(Path(path).read_text())
    except RecursionError as exc:  # nested deeper than the interpreter's stack
        raise ValueError(f"cannot read report {path}: JSON nested too deeply") from exc
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8
        raise ValueError(f"cannot read report {path}: {exc}") from exc
    if not isinstance(report, dict):
        raise ValueError(f"{path} is not a pytest-edge report: expected a JSON object, got {type(report).__name__}")
    if report.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a pytest-edge report (schema {report.get('schema')!r}, expected {SCHEMA!r})")

    def number(value: Any) -> bool:
        """None or a number a float can hold: an accuracy figure may be infinite (an output that
        overflowed), an int of 400 digits is no figure (it would overflow every page's formatting)."""
        if value is None or isinstance(value, float):
            return True
        return is_finite_number(value)

    def shown(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."

    def bad(where: str, detail: str) -> ValueError:
        return ValueError(f"{path} is not a valid pytest-edge report: {where}: {detail}")

    for key, kind in (("machine", dict), ("machines", list), ("matrix", dict)):
        if key in report and not isinstance(report[key], kind):
            raise bad(repr(key), f"expected {'an object' if kind is dict else 'a list'}, "
                                 f"got {type(report[key]).__name__}")
    records = report.get("records")
    if not isinstance(records, list):
        raise bad("'records'", f"expected a list, got {type(records).__name__}")
    # The figures the table, merge and baseline comparison format or do arithmetic on.
    figures = ("load_ms", "first_inference_ms", "peak_memory_mb", "steady_memory_mb", "measured_runs",
               "warmup_runs", "drift", "process_spread", "other_cores_busy")
    per_process = ("p50", "p99", "min", "runs", "load_ms", "peak_memory_mb", "other_cores_busy", "probe_us",
                   "drift", "probe_drift")
    nested = {"latency_ms": ("p50", "p90", "p99", "mean", "min"),
              "coverage": ("fallback", "partitions", "total_ops", "delegated_ops", "fallback_ops"),
              "accuracy": ("max_abs_err", "max_rel_err", "cosine", "snr_db")}
    for index, record in enumerate(records):
        where = f"record {index}"
        if not isinstance(record, dict):
            raise bad(where, f"expected an object, got {type(record).__name__}")
        if isinstance(record.get("test"), str):
            where = f"record {index} ({record['test']})"
        for key in ("test", "backend", "verdict"):
            if not isinstance(record.get(key), str):
                raise bad(where, f"{key!r} must be a string, got {shown(record.get(key))}")
        try:  # verdicts and timing policies, as the pages and the gate read them: the enums' only
            Verdict.from_json(record["verdict"], "'verdict'")
            check = record["baseline_check"] if isinstance(record.get("baseline_check"), dict) else {}
            if check.get("verdict") is not None:
                GateVerdict.from_json(check["verdict"], "'baseline_check.verdict'")
            findings = check.get("findings")
            for finding in findings if isinstance(findings, list) else []:
                if isinstance(finding, dict):
                    GateVerdict.from_json(finding.get("verdict"), "a finding of 'baseline_check'")
            TimingNotJudged.from_json(record.get("timing_not_judged"), "'timing_not_judged'")
            llm = record.get("llm")
            if isinstance(llm, dict):
                TimingNotJudged.from_json(llm.get("timing_not_judged"), "'llm.timing_not_judged'")
        except ValueError as exc:
            raise bad(where, str(exc)) from None
        model = record.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("name"), str):
            raise bad(where, f"'model' must be an object with a 'name', got {shown(model)}")
        for key in figures:
            if not number(record.get(key)):
                raise bad(where, f"{key!r} must be a number or null, got {shown(record[key])}")
        for key, inner in nested.items():
            block = record.get(key)
            if block is None:
                continue
            if not isinstance(block, dict):
                raise bad(where, f"{key!r} must be an object or null, got {shown(block)}")
            if key == "coverage" and block and "fallback" not in block:
                raise bad(where, "'coverage' has no 'fallback' figure")
            for figure in inner:
                if not number(block.get(figure)):
                    raise bad(where, f"'{key}.{figure}' must be a number or null, got {shown(block[figure])}")
        if record.get("processes") is not None and not (
                isinstance(record["processes"], list) and all(isinstance(p, dict) for p in record["processes"])):
            raise bad(where, f"'processes' must be a list of objects, got {shown(record['processes'])}")
        for number_index, process in enumerate(record.get("processes") or []):
            for figure in per_process:
                if not number(process.get(figure)):
                    raise bad(where, f"'processes[{number_index}].{figure}' must be a number or null, "
                                     f"got {shown(process[figure])}")
        quantiles = record.get("latency_quantiles_ms")
        if quantiles is not None and not (isinstance(quantiles, list) and all(is_finite_number(q) for q in quantiles)):
            raise bad(where, f"'latency_quantiles_ms' must be a list of finite numbers or null, got {shown(quantiles)}")
        counted = record.get("counted")  # a counted gate's baseline: a NaN or negative count would pass it
        if counted is not None and not isinstance(counted, dict):
            raise bad(where, f"'counted' must be an object or null, got {shown(counted)}")
        for figure in ("instructions", "spread"):
            value = (counted or {}).get(figure)
            if value is not None and not (is_finite_number(value) and (value > 0 if figure == "instructions" else value >= 0)):
                raise bad(where, f"'counted.{figure}' must be a {'positive' if figure == 'instructions' else 'finite'} "
                                 f"number or null, got {shown(value)}")
        deployment = invalid_field(record) or invalid_gate_field(record)  # sizes, ...; coverage, NPU figures
        if deployment is not None:
            raise bad(where, deployment)
    return report


def merge_reports(reports: Sequence[Report]) -> Report:
    """Join reports from several machines: all records, each tagged with its machine, and a
    device x backend matrix of verdicts and P50s per model."""
    records: list[Record] = []
    machines = []
    matrix: Matrix = {}
    for index, report in enumerate(reports):
        machine = report.machine or Machine()
        label = machine.name or f"{'?' if machine.cpu is ABSENT else machine.cpu} [{index}]"
        machines.append(machine.labelled(label))
        for record in report.records:
            # A record of a device (litert@pi5) belongs to the device's row ("host / pi5"), under its
            # backend's column.
            device = record.device.name if record.device is not None else None
            row = f"{label} / {device}" if device else label
            records.append(replace(record, extra={**record.extra, "machine": label}))
            cell = matrix.setdefault(record.model.name, {}).setdefault(row, {})
            cell[split_device(record.backend)[0]] = matrix_cell(record)
    return Report(records, machines=machines, matrix=matrix)


def compare_reports(old: Report, new: Report, max_regression: float) -> list[str]:
    problems = []
    for typed in new.records:
        if typed.verdict in (Verdict.SKIPPED, Verdict.DOES_NOT_CONVERT):
            continue
        baseline = old.baseline_of(typed)
        source = typed.test
        decoder = decoder_gate_figures(typed, source)
        old_decoder = decoder_gate_figures(baseline, f"baseline of {source}") if baseline is not None else None
        # Both records read once into what the gate reads (its parser reads a record's JSON, as a stored
        # report holds it), and judged by its rules.
        if decoder is not None and old_decoder is not None:  # judged by the gate's decoder figures
            found = check_baseline(decoder, old_decoder, max_regression, figures=GENERATION_FIGURES)
        else:
            found = check_baseline(GateFigures.from_json(typed.to_json(), source=source),
                                   GateFigures.from_json(baseline.to_json(), source=f"baseline of {source}")
                                   if baseline is not None else None,
                                   max_regression)
        problems += [f"{typed.test}: {p}" for p in found]
    return problems
