"""The terminal table printed after a run (one row per model and backend, the worst verdict over
its tests), its footer lines, the device x backend matrix of a merged report, and the gate's line."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .. import codec
from ..backends import split_device
from ..core.record import COMPILE_ONLY, NOT_JUDGED, NOT_MEASURED, GateVerdict, Record, TimingNotJudged, Verdict

DASH = "—"


def figure(value: Any, fmt: str) -> str:
    """A figure in ``fmt``, or a dash for one not measured."""
    return DASH if value is None else format(value, fmt)


# A backend skipped because the model has no artifact for it says so in this form (plan.py); such
# rows carry no information beyond the suffix, so the table folds them into one line per model.
_NO_ARTIFACT = re.compile(r"^no (\.[\w.-]+) artifact for ")
VERDICT_RANK = {Verdict.FAILED: 0, Verdict.ERROR: 0, Verdict.PASSED: 1, Verdict.DOES_NOT_CONVERT: 2, Verdict.SKIPPED: 2}
# Verdicts of records that ran nothing: a skip, and a borrowed artifact the backend's frontend
# cannot convert (errors.DoesNotConvert), each with its reason.
NOT_RUN = frozenset({Verdict.SKIPPED, Verdict.DOES_NOT_CONVERT})
TABLE_WIDTH = 100


def timing_policy(record: Mapping[str, Any]) -> TimingNotJudged | None:
    """Why the record's timing is not judged (its ``timing_not_judged``), as a policy; None: judged."""
    return TimingNotJudged.from_json(record.get("timing_not_judged"), f"record {record.get('test')}")


def missing_artifact(record: Mapping[str, Any]) -> str | None:
    """The artifact suffix (".pte") a skipped record lacked, or None for any other record."""
    if record.get("verdict") != Verdict.SKIPPED:
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
        shorten = _shorten_backend if column == 1 else _shorten
        short = {name: shorten(name, limit) for name in {r[column] for r in rows}}
        alike = Counter(short.values())
        for row in rows:
            # Two names cut to the same text ("lite…@here" for litert and litert-ref) stay whole:
            # a wider table beats two rows that read alike.
            row[column] = short[row[column]] if alike[short[row[column]]] == 1 else row[column]
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
        if r["verdict"] in NOT_RUN:
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
        verdict = r["verdict"] if r["verdict"] not in NOT_RUN else \
            f"{r['verdict']} [{notes[str(r.get('skip_reason') or '')]}]"
        if r.get("warnings"):
            verdict += " (gate inconclusive)"
        rows.append([model, backend, figure(acc.get("max_abs_err"), ".2e"), coverage,
                     figure(cov.get("partitions"), "d"), figure(lat.get("p50"), ".3f"),
                     figure(lat.get("p99"), ".3f"), figure(r.get("load_ms"), ".1f"),
                     figure(r.get("peak_memory_mb"), ".1f"), verdict])
    return _fit(rows, HEADER, width) if width else rows


def backend_has_delegate(backend: str) -> bool:
    """Whether the backend is meant to delegate; a reference lane (litert-ref) is not. Asks the
    registry, and falls back on the "-ref" naming when the backend is not installed here."""
    try:
        from ..backends import get_backend

        return bool(get_backend(backend).has_delegate)
    except Exception:  # noqa: BLE001 - a report read on another machine may name any backend
        return not split_device(backend)[0].endswith("-ref")


def table_footer(records: Sequence[Mapping[str, Any]], width: int = TABLE_WIDTH) -> list[str]:
    """Lines printed after the table: the reasons of the rows' skips, one line per model for the
    backends skipped because it has no artifact for them, and a legend when a reference lane
    shows 0 % coverage."""
    rows = _table_records(records)
    verdicts = {str(r.get("skip_reason") or ""): r["verdict"] for _, _, r in rows if r["verdict"] in NOT_RUN}
    # A skip's reason follows "skipped:"; a does-not-convert reason says so itself.
    lines = [_shorten(f"[{n}] {'skipped: ' if verdicts.get(reason) == Verdict.SKIPPED else ''}{reason or 'no reason given'}",
                      width) for reason, n in _skip_notes(rows).items()]
    unconverted = [r for _, _, r in rows if r["verdict"] == Verdict.DOES_NOT_CONVERT]
    if unconverted:
        which = ", ".join(sorted({f"{r['model']['name']} on {r['backend']}" for r in unconverted}))
        lines.append(_shorten(f"{len(unconverted)} do(es) not convert here ({which}): reported, not failed, "
                              "unless the backend is targeted (backends=, --edge-backends, --edge-require)", width))
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


# A merged report's matrix cell: a record's verdict and P50 latency, under this key (the report's format).
_CELL_P50 = "p50_ms"


@codec.layout(lenient=True)  # a merged report read back: a cell that does not fit shows dashes
@dataclass(frozen=True)
class MatrixCell:
    """The cell of the device x backend matrix a merged report keeps for a record."""

    verdict: str = ""
    p50: float | None = codec.json_field(key=_CELL_P50, default=None)


# A merged report's matrix: model -> machine (or "machine / device") -> backend -> cell.
Matrix = dict[str, dict[str, dict[str, MatrixCell]]]


def matrix_cell(record: Record) -> MatrixCell:
    """The cell of the device x backend matrix a merged report keeps for ``record`` (read by
    :func:`matrix_lines`)."""
    return MatrixCell(str(record.verdict), (record.latency_ms or {}).get("p50"))


def matrix_lines(matrix: Matrix) -> list[str]:
    """A merged report's matrix, one table per model."""
    lines = []
    for model, per_machine in sorted(matrix.items()):
        backends = sorted({b for cells in per_machine.values() for b in cells})
        rows = []
        for label, cells in sorted(per_machine.items()):
            row = [label]
            for backend in backends:
                cell = cells.get(backend)
                row.append(DASH if cell is None else f"{cell.verdict} {figure(cell.p50, '.3f')}ms")
            rows.append(row)
        lines.append(f"model {model}")
        lines.extend(format_table(rows, ["machine", *backends]))
        lines.append("")
    return lines


def gate_summary(records: Iterable[Mapping[str, Any]]) -> str | None:
    """One line on what the merge gate compared, with the models new in the change (no twin or
    stored record: measured, not judged), or None when no record was gated."""
    checks = [r["baseline_check"] for r in records if r.get("baseline_check")]
    if not checks:
        return None
    # A record whose baseline held none of its figures compared nothing (a report of an older
    # pytest-edge names no "compared": it counts as compared, as it always did).
    empty = [c for c in checks if not c.get("new") and c.get("compared") == []]
    compared = [c for c in checks if not c.get("new") and c.get("compared") != []]
    new = [c for c in checks if c.get("new")]
    modes = sorted({_gate_mode(c) for c in checks})
    count = {v: sum(1 for c in compared if c.get("verdict") == v)
             for v in (GateVerdict.FAILED, GateVerdict.INCONCLUSIVE, GateVerdict.ACCEPTED)}
    what = "twin" if all(c.get("mode") == "ab" for c in new) else "baseline"
    return (f"merge gate ({'; '.join(modes)}): {len(compared)} compared, {count[GateVerdict.FAILED]} regressed, "
            f"{count[GateVerdict.INCONCLUSIVE]} inconclusive"
            + (f", {count[GateVerdict.ACCEPTED]} accepted" if count[GateVerdict.ACCEPTED] else "")
            + (f", {len(new)} new (no {what}: {_few(c.get('looked_for', '?') for c in new)})" if new else "")
            + (f", {len(empty)} with no figure in common with the baseline ({_few(str(c.get('baseline', '?')) for c in empty)})"
               if empty else ""))


def _gate_mode(check: Mapping[str, Any]) -> str:
    if check.get("mode") == "ab":
        return f"A/B against {check.get('folder') or Path(str(check.get('baseline'))).parent}"
    return "against stored numbers"


def _few(items: Iterable[str], shown: int = 4) -> str:
    items = list(dict.fromkeys(items))
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def gate_compared_nothing(records: Iterable[Mapping[str, Any]]) -> str | None:
    """Why the run fails where a merge gate ran and compared nothing: every gated record is new (no
    twin in the A/B folder, no record in the stored report), so nothing was judged; None otherwise."""
    checks = [r["baseline_check"] for r in records if r.get("baseline_check")]
    if not checks or any(not c.get("new") and c.get("compared") != [] for c in checks):
        return None
    if not all(c.get("new") for c in checks):  # some had a baseline, none a figure in common with it
        return (f"pytest-edge: the merge gate compared nothing: no baseline record held a figure of its model "
                f"({_few(str(c.get('baseline', '?')) for c in checks if not c.get('new'))}); "
                "a report of this project's tests (--edge-report on main) is what it compares against (docs/gate.md)")
    folders = _few(str(c.get("folder")) for c in checks)
    if all(c.get("mode") == "ab" for c in checks):
        return (f"pytest-edge: the merge gate compared nothing: --edge-baseline-models {folders} holds no twin of any "
                f"tested model (looked for {_few(str(c.get('looked_for')) for c in checks)}); a twin lies at the "
                "artifact's path under the edge_model_dirs folder that holds the model (else under the rootdir), "
                "e.g. main's models/ for edge_model_dirs = [\"models\"] (docs/gate.md)")
    return (f"pytest-edge: the merge gate compared nothing: --edge-baseline {folders} holds no record of any tested "
            f"model (looked for {_few(str(c.get('looked_for')) for c in checks)}): a report of this project's tests "
            "(--edge-report on main) is what it compares against (docs/gate.md)")


# The compile-time targets' own columns (docs/npu.md): what the conformance table has none for.
COMPILED_HEADERS = ("model", "target", "compiler", "system config", "memory mode", "NPU ops", "CPU ops", "SRAM KiB",
                    "off-chip flash KiB", "DRAM KiB", "estimated NPU ms", "estimated cycles", "verdict")


def compiled_rows(records: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """One row per compile-time target's record: the compiler's placement, memory and estimate."""
    rows = []
    for record in records:
        npu = record.get("npu")
        if timing_policy(record) is not COMPILE_ONLY or not isinstance(npu, Mapping):
            continue
        coverage, settings = record.get("coverage") or {}, npu.get("settings") or {}
        kib = [figure(None if npu.get(key) is None else npu[key] / 1024, ".2f") for key in ("sram_bytes", "flash_bytes")]
        dram = (npu.get("memories") or {}).get("dram") if isinstance(npu.get("memories"), Mapping) else None
        kib.append(figure(dram / 1024 if isinstance(dram, (int, float)) else None, ".2f"))
        rows.append([record["model"]["name"], record["backend"], str(npu.get("compiler")),
                     str(settings.get("system_config") or DASH), str(settings.get("memory_mode") or DASH),
                     figure(coverage.get("delegated_ops"), "d"), figure(coverage.get("fallback_ops"), "d"), *kib,
                     figure(npu.get("estimated_ms"), ".4g"), figure(npu.get("estimated_cycles"), "d"),
                     str(record.get("verdict"))])
    return rows


def target_matrix(records: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[str], dict[tuple[str, str], str]]:
    """Model x accelerator target (the records with a compiler's ``npu`` block): per cell the share of
    operators the accelerator runs, the SRAM the compiler planned and the verdict, the worst record
    where several tests check one pair. What a team chooses a chip by: one network fully on one NPU
    and half on the CPU on another. ``(models, targets, cells)``; no targets, no matrix."""
    chosen = [r for r in records if isinstance(r.get("npu"), Mapping)]
    worst = worst_per(chosen, lambda r: (r["model"]["name"], r["backend"]))
    cells = {}
    for (model, target), record in worst.items():
        coverage, npu = record.get("coverage") or {}, record["npu"]
        total, placed = coverage.get("total_ops"), coverage.get("delegated_ops")
        share = (f"{placed / total:.0%} on the NPU ({placed} of {total})"
                 if isinstance(total, int) and isinstance(placed, int) and total > 0 else "placement unknown")
        sram = npu.get("sram_bytes")
        memory = f"SRAM {sram / 1024:.2f} KiB" if isinstance(sram, (int, float)) else "SRAM —"
        cells[(model, target)] = f"{share}, {memory}, {record.get('verdict')}"
    return sorted({m for m, _ in cells}), sorted({t for _, t in cells}), cells


def compiled_lines(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The compile-time targets' figures (docs/npu.md), apart from the measured columns: nothing
    executed, and the time is the compiler's estimate."""
    compiled = [r for r in records if timing_policy(r) is COMPILE_ONLY and isinstance(r.get("npu"), Mapping)]
    if not compiled:
        return []
    lines = [f"note: {', '.join(sorted({r['backend'] for r in compiled}))}: compile-time target(s): the compiler ran, "
             "nothing executed (no outputs compared, no latency measured); its figures, estimates for the time:"]
    for record in compiled[:8]:
        npu = record["npu"]
        kib = {key: figure(None if npu.get(key) is None else npu[key] / 1024, ".2f") for key in ("sram_bytes", "flash_bytes")}
        clock = npu.get("clock_hz")
        dram = (npu.get("memories") or {}).get("dram") if isinstance(npu.get("memories"), Mapping) else None
        memory = f"SRAM {kib['sram_bytes']} KiB, off-chip flash {kib['flash_bytes']} KiB" + (
            f", DRAM {figure(dram / 1024, '.2f')} KiB" if isinstance(dram, (int, float)) and dram else "")
        cycles = npu.get("estimated_cycles")
        estimate = ("no estimate" if npu.get("estimated_ms") is None or cycles is None else
                    f"estimated NPU time {figure(npu.get('estimated_ms'), '.4g')} ms ({cycles} cycles at "
                    f"{figure(clock and clock / 1e6, 'g')} MHz)")
        lines.append(f"  {record['model']['name']} on {record['backend']} ({npu.get('compiler')}, "
                     f"{(npu.get('settings') or {}).get('system_config') or 'its delegate'}): {memory}, {estimate}")
    if len(compiled) > 8:
        lines.append(f"  ... and {len(compiled) - 8} more (the report's npu blocks)")
    return lines


def summary_lines(records: Sequence[Mapping[str, Any]], *, under_load: bool = False, inconclusive: int = 0,
                  xdist_workers: int | None = None) -> list[str]:
    """What the terminal prints after a run: the table, its footer, the gate's line, and the notes
    that qualify the figures (predicted coverage, timings under load, inconclusive gates, restarted
    workers, measurement beside other xdist workers)."""
    lines = format_table(table_rows(records))
    lines += table_footer(records)  # skipped-for-no-artifact backends, one line per model; legend
    gate = gate_summary(records)
    if gate:
        lines.append(gate)
    if any((r.get("coverage") or {}).get("method") == "predicted" for r in records):
        lines.append("* coverage predicted from the execution provider's support rules")
    if under_load:
        lines.append("note: some timings ran under load (other processes kept more than half a core busy; see "
                     "timing_under_load in the report): their latency figures are noisier than on an idle machine")
    recorded = sorted({r["backend"] for r in records if timing_policy(r) is NOT_JUDGED})
    if recorded:
        lines.append(f"note: latency, load time and memory of {', '.join(recorded)} were recorded, not judged "
                     "against budgets or baselines (emulated device: timing and memory are not the target's; "
                     "edge_emulated_timing = judge judges them)")
    unmeasured = sorted({r["backend"] for r in records if timing_policy(r) is NOT_MEASURED})
    if unmeasured:
        lines.append(f"note: latency, load time and memory of {', '.join(unmeasured)} were not measured "
                     "(emulated device: timing and memory are not the target's; edge_emulated_timing = record "
                     "measures them, = judge judges them too)")
    lines += compiled_lines(records)
    # Figures the candidate holds and its baseline does not: said, never passed in silence.
    for r in records:
        check = r.get("baseline_check") if isinstance(r.get("baseline_check"), dict) else {}
        lines += [f"note: {r.get('test')}: {note}" for note in check.get("notes") or []
                  if isinstance(note, str) and ": not compared: " in note]
    counted = [r for r in records if isinstance(r.get("counted"), dict)]
    if counted:
        figures = ", ".join(f"{r['model']['name']} on {r['backend']} {r['counted']['instructions']:,.0f}"
                            for r in counted[:6]) + (", ..." if len(counted) > 6 else "")
        lines.append(f"note: counted mode: instructions per inference under {counted[0]['counted'].get('tool')} "
                     f"({figures}); nothing was timed (Valgrind is far slower), so latency and memory are null and "
                     "their budgets not judged")
    if inconclusive:
        lines.append(f"note: {inconclusive} latency regression(s) against the stored baseline were inconclusive "
                     "because the machine was busy (see the warnings); A/B mode (--edge-baseline-models) is not "
                     "fooled by load")
    restarts = sum(len(r.get("restarts") or []) for r in records)
    if restarts:
        lines.append(f"note: {restarts} backend worker(s) died between requests and were restarted (see the "
                     "EdgeWorkerRestarted warnings and the records' restarts; --edge-strict-restarts fails such tests)")
    if xdist_workers:
        lines.append(f"note: timing and memory ran one at a time across the {xdist_workers} xdist workers, but "
                     "correctness tests of other workers ran beside them; for the steadiest figures run without -n")
    return lines
