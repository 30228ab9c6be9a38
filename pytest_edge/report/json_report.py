"""The JSON report (SPEC §6), the terminal table, and merging/comparing reports."""

from __future__ import annotations

import json
import os
import re
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..checks import check_baseline
from ..files import atomic_write

SCHEMA = "pytest-edge/report/1"
DASH = "—"


def build_report(records: Sequence[Mapping[str, Any]], machine: Mapping[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA,
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": dict(machine),
            "records": sorted(records, key=lambda r: r["test"])}


def write_report(path: Path, report: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps(report, indent=2) + "\n").encode())


def write_page(path: Path, text: str) -> None:
    """The HTML page or Markdown summary, written as the JSON report is (readers see the old file or
    the new one, never a page cut short by a full disk); a target that is not a plain file (a pipe,
    /dev/stdout, a link a CI runner set up) is written in place, not replaced."""
    path = Path(path)
    if os.path.islink(path) or (path.exists() and not stat.S_ISREG(path.stat().st_mode)):
        path.write_text(text, encoding="utf-8")
        return
    atomic_write(path, text.encode("utf-8"))


def load_report(path: Path) -> dict[str, Any]:
    """Read a report written by ``write_report`` or ``merge_reports``; anything else (not JSON, not
    an object, another schema, records of the wrong shape, non-numeric figures) is a ValueError
    naming the file and the offending record, which callers report instead of a traceback.
    Unknown fields are accepted, and every figure may be ``null`` (not measured)."""
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
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))

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
                raise bad(where, f"{key!r} must be a string, got {record.get(key)!r}")
        model = record.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("name"), str):
            raise bad(where, f"'model' must be an object with a 'name', got {model!r}")
        for key in figures:
            if not number(record.get(key)):
                raise bad(where, f"{key!r} must be a number or null, got {record[key]!r}")
        for key, inner in nested.items():
            block = record.get(key)
            if block is None:
                continue
            if not isinstance(block, dict):
                raise bad(where, f"{key!r} must be an object or null, got {block!r}")
            if key == "coverage" and block and "fallback" not in block:
                raise bad(where, "'coverage' has no 'fallback' figure")
            for figure in inner:
                if not number(block.get(figure)):
                    raise bad(where, f"'{key}.{figure}' must be a number or null, got {block[figure]!r}")
        if record.get("processes") is not None and not (
                isinstance(record["processes"], list) and all(isinstance(p, dict) for p in record["processes"])):
            raise bad(where, f"'processes' must be a list of objects, got {record['processes']!r}")
        for number_index, process in enumerate(record.get("processes") or []):
            for figure in per_process:
                if not number(process.get(figure)):
                    raise bad(where, f"'processes[{number_index}].{figure}' must be a number or null, "
                                     f"got {process[figure]!r}")
        quantiles = record.get("latency_quantiles_ms")
        if quantiles is not None and not (isinstance(quantiles, list) and all(
                number(q) and q is not None for q in quantiles)):
            raise bad(where, f"'latency_quantiles_ms' must be a list of numbers or null, got {quantiles!r}")
    return report


def _num(value: Any, fmt: str) -> str:
    return DASH if value is None else format(value, fmt)


# A backend skipped because the model has no artifact for it says so in this form (plan.py); such
# rows carry no information beyond the suffix, so the table folds them into one line per model.
_NO_ARTIFACT = re.compile(r"^no (\.[\w.-]+) artifact for ")
VERDICT_RANK = {"failed": 0, "error": 0, "passed": 1, "skipped": 2}
TABLE_WIDTH = 100


def missing_artifact(record: Mapping[str, Any]) -> str | None:
    """The artifact suffix (".pte") a skipped record lacked, or None for any other record."""
    if record.get("verdict") != "skipped":
        return None
    match = _NO_ARTIFACT.match(str(record.get("skip_reason") or ""))
    return match.group(1) if match else None


def worst_per(records: Iterable[Mapping[str, Any]], key: Any) -> dict[Any, Mapping[str, Any]]:
    """The record with the worst verdict for each ``key(record)``: several tests of one model on
    one backend show as one row, and a failure is never hidden behind a pass."""
    grouped: dict[Any, Mapping[str, Any]] = {}
    for record in records:
        k = key(record)
        if k not in grouped or VERDICT_RANK.get(record["verdict"], 1) < VERDICT_RANK.get(grouped[k]["verdict"], 1):
            grouped[k] = record
    return grouped


def folded_skips(records: Iterable[Mapping[str, Any]]) -> dict[str, tuple[list[str], list[str]]]:
    """Per model: the artifact suffixes it lacks and the backends skipped for that."""
    folded: dict[str, tuple[list[str], list[str]]] = {}
    for record in records:
        suffix = missing_artifact(record)
        if suffix is None:
            continue
        suffixes, backends = folded.setdefault(record["model"]["name"], ([], []))
        if suffix not in suffixes:
            suffixes.append(suffix)
        if record["backend"] not in backends:
            backends.append(record["backend"])
    return {m: (sorted(s), sorted(b)) for m, (s, b) in sorted(folded.items())}


def fold_line(model: str, suffixes: Sequence[str], backends: Sequence[str]) -> str:
    return f"{model}: no {', '.join(suffixes)}: {', '.join(backends)} skipped"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _fit(rows: list[list[str]], header: Sequence[str], width: int) -> list[list[str]]:
    """Shorten the model and backend names until the table is at most ``width`` columns wide (down
    to 20 characters, then 10); the figures and the verdict are never cut (a cut verdict, "passed
    (gat…", hides what it says), and no column goes below its header."""
    def total() -> int:
        return sum(max(len(str(c)) for c in col) for col in zip(header, *rows)) + 2 * (len(header) - 1)

    for column, floor in ((0, 20), (1, 20), (0, 10), (1, 10)):
        excess = total() - width
        if excess <= 0:
            break
        current = max(len(str(c)) for c in [header[column], *(r[column] for r in rows)])
        limit = max(current - excess, floor, len(header[column]))
        for row in rows:
            row[column] = _shorten_backend(row[column], limit) if column == 1 else _shorten(row[column], limit)
    return rows


def _shorten_backend(name: str, width: int) -> str:
    """Shorten a backend name but keep its device (``onnxrunt…@board``): the device is the news."""
    base, at, device = name.partition("@")
    if not at or len(name) <= width or len(device) + 3 > width:
        return _shorten(name, width)
    return _shorten(base, width - len(device) - 1) + "@" + device


def _table_records(records: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, Mapping[str, Any]]]:
    grouped = worst_per((r for r in records if missing_artifact(r) is None),
                        lambda r: (r["model"]["name"], r["backend"]))
    return [(model, backend, r) for (model, backend), r in sorted(grouped.items())]


def _skip_notes(rows: Sequence[tuple[str, str, Mapping[str, Any]]]) -> dict[str, int]:
    """Skip reasons (other than a missing artifact) numbered in table order: the row says
    "skipped [1]" and the footer gives the reason once, however many rows share it."""
    notes: dict[str, int] = {}
    for _, _, r in rows:
        if r["verdict"] == "skipped":
            notes.setdefault(str(r.get("skip_reason") or ""), len(notes) + 1)
    return notes


def table_rows(records: Iterable[Mapping[str, Any]], width: int | None = TABLE_WIDTH) -> list[list[str]]:
    """One row per (model, backend) that ran; the worst verdict over its tests. Backends skipped
    for a missing artifact, and the reasons of other skips, are left to :func:`table_footer`.
    Cells are shortened so the table fits ``width`` columns (None: never shortened)."""
    selected = _table_records(records)
    notes = _skip_notes(selected)
    rows = []
    for model, backend, r in selected:
        cov = r.get("coverage") or {}
        lat = r.get("latency_ms") or {}
        acc = r.get("accuracy") or {}
        coverage = DASH if not cov else f"{1 - cov['fallback']:.0%}" + ("*" if cov.get("method") == "predicted" else "")
        verdict = r["verdict"] if r["verdict"] != "skipped" else f"skipped [{notes[str(r.get('skip_reason') or '')]}]"
        if r.get("warnings"):
            verdict += " (gate inconclusive)"
        rows.append([model, backend, _num(acc.get("max_abs_err"), ".2e"), coverage,
                     _num(cov.get("partitions"), "d"), _num(lat.get("p50"), ".3f"),
                     _num(lat.get("p99"), ".3f"), _num(r.get("load_ms"), ".1f"),
                     _num(r.get("peak_memory_mb"), ".1f"), verdict])
    return _fit(rows, HEADER, width) if width else rows


def backend_has_delegate(backend: str) -> bool:
    """Whether the backend is meant to delegate; a reference lane (litert-ref) is not. Asks the
    registry, and falls back on the "-ref" naming when the backend is not installed here."""
    try:
        from ..backends import get_backend

        return bool(get_backend(backend).has_delegate)
    except Exception:  # noqa: BLE001 - a report read on another machine may name any backend
        return not backend.partition("@")[0].endswith("-ref")


def table_footer(records: Sequence[Mapping[str, Any]], width: int = TABLE_WIDTH) -> list[str]:
    """Lines printed after the table: the reasons of the rows' skips, one line per model for the
    backends skipped because it has no artifact for them, and a legend when a reference lane
    shows 0 % coverage."""
    lines = [_shorten(f"[{n}] skipped: {reason or 'no reason given'}", width)
             for reason, n in _skip_notes(_table_records(records)).items()]
    lines += [_shorten(fold_line(model, suffixes, backends), width)
              for model, (suffixes, backends) in folded_skips(records).items()]
    reference = sorted({r["backend"] for r in records if missing_artifact(r) is None and r.get("coverage")
                        and not (r["coverage"].get("delegated_ops") or 0) and not backend_has_delegate(r["backend"])})
    if reference:
        lines.append(_shorten(f"coverage 0% on {', '.join(reference)}: a reference lane, no delegate by design", width))
    return lines


HEADER = ["model", "backend", "max |Δ|", "coverage", "parts", "P50 ms", "P99 ms", "load ms",
          "peak MB", "verdict"]


def format_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def merge_reports(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Join reports from several machines: all records, each tagged with its machine, and a
    device x backend matrix of verdicts and P50s per model."""
    records: list[dict[str, Any]] = []
    machines: list[dict[str, Any]] = []
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    for index, report in enumerate(reports):
        machine = dict(report.get("machine", {}))
        label = machine.get("name") or f"{machine.get('cpu', '?')} [{index}]"
        machine["label"] = label
        machines.append(machine)
        for record in report.get("records", []):
            # A record of a device (litert@pi5) belongs to the device's row ("host / pi5"), under its
            # backend's column.
            device = (record.get("device") or {}).get("name")
            row = f"{label} / {device}" if device else label
            records.append({**record, "machine": label})
            cell = matrix.setdefault(record["model"]["name"], {}).setdefault(row, {})
            cell[record["backend"].partition("@")[0]] = {"verdict": record["verdict"],
                                                          "p50_ms": (record.get("latency_ms") or {}).get("p50")}
    return {"schema": SCHEMA, "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machines": machines, "records": records, "matrix": matrix}


def matrix_lines(merged: Mapping[str, Any]) -> list[str]:
    lines = []
    for model, per_machine in sorted(merged["matrix"].items()):
        backends = sorted({b for cells in per_machine.values() for b in cells})
        rows = []
        for label, cells in sorted(per_machine.items()):
            row = [label]
            for backend in backends:
                cell = cells.get(backend)
                row.append(DASH if cell is None else
                           f"{cell['verdict']} {_num(cell['p50_ms'], '.3f')}ms")
            rows.append(row)
        lines.append(f"model {model}")
        lines.extend(format_table(rows, ["machine", *backends]))
        lines.append("")
    return lines


def gate_summary(records: Iterable[Mapping[str, Any]]) -> str | None:
    """One line on what the merge gate compared, or None when no record was gated."""
    checks = [r["baseline_check"] for r in records if r.get("baseline_check")]
    if not checks:
        return None
    modes = sorted({"A/B against " + str(Path(c["baseline"]).parent) if c["mode"] == "ab" else "against stored numbers"
                    for c in checks})
    count = {v: sum(1 for c in checks if c.get("verdict") == v) for v in ("failed", "inconclusive")}
    return (f"merge gate ({'; '.join(modes)}): {len(checks)} compared, {count['failed']} regressed, "
            f"{count['inconclusive']} inconclusive")


def find_baseline(baseline: Mapping[str, Any] | None, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The baseline record for the same test, else for the same (model, backend)."""
    if not baseline:
        return None
    same_model = None
    for old in baseline.get("records", []):
        if old.get("test") == record["test"]:
            return old
        if old.get("model", {}).get("name") == record["model"]["name"] and old.get("backend") == record["backend"]:
            same_model = same_model or old
    return same_model


def compare_reports(old: Mapping[str, Any], new: Mapping[str, Any], max_regression: float) -> list[str]:
    problems = []
    for record in new.get("records", []):
        if record.get("verdict") == "skipped":
            continue
        problems += [f"{record['test']}: {p}" for p in
                     check_baseline(record, find_baseline(old, record), max_regression)]
    return problems
