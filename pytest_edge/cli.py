"""``pytest-edge``: a first configuration (init), goldens (refresh, prune, list, diff), coverage
inspection, quantization triage, report merge/compare/html/summary, and devices (prepare, list)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from . import device_commands
from .triage import quant
from .backends import get_backend
from .errors import EdgeError, EdgeUsageError
from .marker import TARGETS, MarkerSpec, parse_percent
from .plan import backend_choices
from .report.json_report import compare_reports, format_table, load_report, matrix_lines, merge_reports, write_page, write_report
from .session import EdgeSession, Settings


def golden_refresh(pytest_args: Sequence[str]) -> int:
    """``pytest --edge-update-golden`` with any pytest arguments (paths, -k, -n ...)."""
    import pytest

    return int(pytest.main(["--edge-update-golden", *pytest_args]))


def _coverage_row(backend: str, cov, note: str = "") -> list[str]:
    ops = ", ".join(f"{k} x{v}" for k, v in sorted(cov.fallback_op_names.items())) or "none"
    return [backend, f"{cov.delegated_ops}/{cov.total_ops} delegated",
            f"{cov.fallback:.1%}" + (" (approx.)" if cov.approximate else ""), str(cov.partitions), ops, note]


def project_settings(pytest_args: Sequence[str] = ()) -> Settings:
    """The project's settings exactly as ``pytest`` would read them here: rootdir, the ini file
    (pytest.ini, pyproject.toml, tox.ini, setup.cfg) and every ``edge_*`` key. pytest parses its
    configuration and this hook stops it before any test is collected."""
    import pytest

    from .plugin import settings_from_config

    captured: dict[str, Settings] = {}

    class _Capture:
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> int:
            captured["settings"] = settings_from_config(config)
            return 0

    code = pytest.main(["-p", "no:cacheprovider", *pytest_args], plugins=[_Capture()])
    if "settings" not in captured:
        raise EdgeUsageError(f"cannot read the pytest configuration here (pytest exit status {int(code)})")
    return captured["settings"]


def inspect_rows(target: str, settings: Settings, predict: Sequence[str] = ()) -> list[list[str]]:
    """Per available backend: coverage, partitions and fallback operators of a model file or stem."""
    session = EdgeSession(settings)
    rows = []
    try:
        model = session.resolve(target, Path.cwd())
        choices = backend_choices(settings, MarkerSpec(), model)
        if Path(target).suffix in model.artifacts:
            # A file was named: that artifact's backends only (not "no .onnx artifact" beside a .pte).
            choices = [(name, reason) for name, reason in choices
                       if get_backend(name).suffix == Path(target).suffix]
        for backend, reason in choices:
            if reason:
                rows.append([backend, "—", "—", "—", "—", f"skipped: {reason}"])
                continue
            try:
                loaded = session.load(session.plan(model, backend))
            except EdgeError as exc:
                rows.append([backend, "—", "—", "—", "—", f"error: {exc}"])
                continue
            cov = loaded.coverage
            if cov is None:
                rows.append([backend, str(loaded.artifact), "—", "—", "—", "coverage not readable"])
                continue
            note = "" if get_backend(backend).has_delegate else "no delegate by design"
            rows.append(_coverage_row(backend, cov, note))
        for target_name in predict:
            predictors = [name for name, reason in choices
                          if reason is None and target_name in get_backend(name).predicts_targets]
            if not predictors:
                rows.append([f"predicted {target_name}", "—", "—", "—", "—",
                             "no backend here predicts it for this model's artifacts"])
                continue
            backend = get_backend(predictors[0])
            artifact = backend.artifact_of(model)
            assert artifact is not None
            predicted = backend.predicted_coverage(artifact, target_name)
            if predicted is None:  # OpenVINO without that device's plugin here
                rows.append([f"predicted {target_name}", "—", "—", "—", "—",
                             f"{backend.name} cannot predict it here (the device's plugin does not load)"])
                continue
            rows.append(_coverage_row(f"predicted {target_name}", predicted, f"{backend.name}'s prediction"))
    finally:
        session.close()
    return rows


def _inspect(args: argparse.Namespace) -> int:
    try:
        settings = project_settings()
        settings.model_dirs = [*settings.model_dirs, *(Path(d).resolve() for d in args.model_dir)]
        rows = inspect_rows(args.model, settings, predict=args.target)
    except EdgeError as exc:
        print(f"pytest-edge inspect: {exc}", file=sys.stderr)
        return 2
    header = ["backend", "delegated", "fallback", "partitions", "fallback operators", "note"]
    print("\n".join(format_table(rows, header)))
    return 0


def _init(args: argparse.Namespace) -> int:
    from .init_project import init

    try:
        return init(Path(args.folder), record_golden=not args.no_golden)
    except (EdgeError, OSError) as exc:
        print(f"pytest-edge init: {exc}", file=sys.stderr)
        return 2


def golden_rows(settings: Settings) -> list[list[str]]:
    """One row per golden set (model, input set): cases, reference backend, its artifacts with
    their recorded sha256 and whether each still matches the artifact the tests would load."""
    from .golden import GoldenStore

    store, session = GoldenStore(settings.golden_dir), EdgeSession(settings)
    rows = []
    for model_name in store.models():
        keys = store.sets(model_name)
        if not keys:
            rows.append([model_name, "—", "—", "—", "—", "no golden set in this folder"])
        for key in keys:
            try:
                golden = store.load(model_name, key)
            except EdgeError as exc:
                rows.append([model_name, key, "—", "—", "—", f"unreadable: {exc}"])
                continue
            try:
                model = session.resolve(model_name)
                states = [f"{path.name}: {_artifact_state(golden, path)}"
                          for path in model.artifacts.values() if path.name in golden.meta.get("artifacts", {})]
            except EdgeError:
                states = ["no artifact of that name in edge_model_dirs (unused?)"]
            recorded = ", ".join(f"{name} {digest[:12]}"
                                 for name, digest in sorted(golden.meta.get("artifacts", {}).items()))
            rows.append([model_name, key, str(len(golden.cases)), golden.reference_backend, recorded,
                         "; ".join(states)])
    return rows


def _artifact_state(golden, path: Path) -> str:
    """current, stale, LFS pointer (the content was never pulled: not a change), or the problem."""
    from .backends.base import is_lfs_pointer

    if is_lfs_pointer(path):
        return "LFS pointer (run git lfs pull)"
    try:
        return "stale" if golden.stale_reason(path) else "current"
    except EdgeError as exc:  # external data missing or outside the model's folder
        return f"error: {exc}"


def _golden_list(args: argparse.Namespace) -> int:
    try:
        rows = golden_rows(project_settings())
    except EdgeError as exc:
        print(f"pytest-edge golden list: {exc}", file=sys.stderr)
        return 2
    print("\n".join(format_table(rows, ["model", "input set", "cases", "reference", "artifacts (sha256)", "state"])))
    return 0


def golden_usage(pytest_args: Sequence[str] = ()) -> tuple[Settings, set[tuple[str, str]]]:
    """Collect the project's tests as ``pytest [pytest_args]`` would (nothing runs, no runtime
    starts) and return the settings and the (model, input set) references of its edge tests.
    EdgeUsageError when the collection cannot speak for every test: collection errors, node ids,
    deselection (-k, -m), or no edge test at all."""
    import contextlib
    import io

    import pytest

    from .golden.use import USE_KEY, golden_references
    from .plugin import SESSION_KEY, item_plan

    if any("::" in arg for arg in pytest_args):
        raise EdgeUsageError("prune needs every test collected; node ids (file::test) select some only")
    found: dict[str, object] = {}

    class _Usage:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            edge = session.config.stash[SESSION_KEY]
            found["settings"] = edge.settings
            found["refs"] = golden_references(edge, session.items, item_plan)
            found["use"] = session.config.stash[USE_KEY]

    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = pytest.main(["-p", "no:cacheprovider", "--collect-only", "-q", *pytest_args], plugins=[_Usage()])
    use = found.get("use")
    tail = "\n".join(output.getvalue().splitlines()[-15:])
    if use is None or use.collect_errors or int(code) not in (0, 5):
        raise EdgeUsageError(f"collecting the tests failed (pytest exit status {int(code)}); nothing is "
                             f"pruned while a test may be missing:\n{tail}")
    if use.deselected:
        raise EdgeUsageError(f"{use.deselected} tests were deselected (-k, -m, --deselect): prune needs "
                             "every test collected")
    refs = found["refs"]
    if not refs:
        raise EdgeUsageError("no test with @pytest.mark.edge was collected here: pass the paths of the edge "
                             "tests (pytest-edge golden prune [--dry-run] PATH...)")
    return found["settings"], refs


def golden_prune(argv: Sequence[str]) -> int:
    """``pytest-edge golden prune [--dry-run] [pytest args]``: remove the golden sets that no
    collected test uses."""
    from .golden import GoldenStore, set_label
    from .golden.use import unused_golden_sets

    dry_run = "--dry-run" in argv
    pytest_args = [arg for arg in argv if arg != "--dry-run"]
    try:
        settings, refs = golden_usage(pytest_args)
        store = GoldenStore(settings.golden_dir)
        unused = unused_golden_sets(store, refs)
    except EdgeError as exc:
        print(f"pytest-edge golden prune: {exc}", file=sys.stderr)
        return 2
    if not unused:
        print(f"no unused golden sets in {settings.golden_dir}")
        return 0
    status = 0
    for model, key in unused:
        folder = store.folder(model, key)
        if dry_run:
            print(f"would remove {set_label(model, key)} ({folder})")
            continue
        try:
            removed = store.remove(model, key)
        except (EdgeError, OSError) as exc:
            print(f"pytest-edge golden prune: cannot remove {set_label(model, key)} ({folder}): {exc}",
                  file=sys.stderr)
            status = 1
            continue
        print(f"removed {set_label(model, key)} ({folder}, {len(removed)} files and folders)")
    return status


def _golden_diff(args: argparse.Namespace) -> int:
    from .golden import GoldenStore, check_set_key
    from .golden.obtained import diff_lines, obtained_dir

    try:
        settings = project_settings()
        key = check_set_key(args.set)
        lines = diff_lines(GoldenStore(settings.golden_dir), args.model,
                           obtained_dir(settings.rootdir, args.model, key), key=key)
    except EdgeError as exc:
        print(f"pytest-edge golden diff: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else f"no obtained outputs for {args.model} (every backend matched its golden)")
    return 0


def _merge(args: argparse.Namespace) -> int:
    try:
        merged = merge_reports([load_report(Path(p)) for p in args.reports])
    except ValueError as exc:
        print(f"pytest-edge report merge: {exc}", file=sys.stderr)
        return 2
    if args.output:
        write_report(Path(args.output), merged)
    print("\n".join(matrix_lines(merged)))
    return 0


def _compare(args: argparse.Namespace) -> int:
    try:
        old, new = load_report(Path(args.old)), load_report(Path(args.new))
        limit = parse_percent(args.max_regression)
    except (ValueError, EdgeError) as exc:
        print(f"pytest-edge report compare: {exc}", file=sys.stderr)
        return 2
    problems = compare_reports(old, new, limit)
    for problem in problems:
        print(problem)
    print(json.dumps({"regressions": len(problems)}))
    return 1 if problems else 0


def _load_pair(command: str, args: argparse.Namespace) -> tuple[dict, dict | None, float] | None:
    """The report, the optional baseline and the threshold, or None after saying what is wrong."""
    try:
        report = load_report(Path(args.report))
        baseline = load_report(Path(args.baseline)) if args.baseline else None
        limit = parse_percent(args.max_regression)
    except (ValueError, EdgeError) as exc:
        print(f"pytest-edge report {command}: {exc}", file=sys.stderr)
        return None
    return report, baseline, limit


def _html(args: argparse.Namespace) -> int:
    from .report.html import render_html

    loaded = _load_pair("html", args)
    if loaded is None:
        return 2
    try:
        page = render_html(*loaded)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field load_report does not check
        print(f"pytest-edge report html: cannot render {args.report}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_page(Path(args.output), page)
    except OSError as exc:
        print(f"pytest-edge report html: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"html: {args.output}")
    return 0


def _summary(args: argparse.Namespace) -> int:
    from .report.markdown import markdown_summary

    loaded = _load_pair("summary", args)
    if loaded is None:
        return 2
    try:
        text = markdown_summary(*loaded)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field load_report does not check
        print(f"pytest-edge report summary: cannot render {args.report}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    if not args.output:
        print(text)
        return 0
    try:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_page(Path(args.output), text)
    except OSError as exc:
        print(f"pytest-edge report summary: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["golden", "refresh"]:
        # Everything after "refresh" belongs to pytest, options included, so argparse stays out.
        return golden_refresh(argv[2:])
    if argv[:2] == ["golden", "prune"] and not {"-h", "--help"} & set(argv[2:]):
        return golden_prune(argv[2:])
    parser = argparse.ArgumentParser(prog="pytest-edge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    golden = commands.add_parser("golden", help="golden outputs")
    golden_commands = golden.add_subparsers(dest="golden_command", required=True)
    golden_commands.add_parser("refresh", help="pytest --edge-update-golden [pytest args]")
    golden_commands.add_parser("prune", help="remove golden sets no test uses: prune [--dry-run] [pytest args]")
    listing = golden_commands.add_parser("list", help="models with goldens: cases, reference, artifacts, staleness")
    listing.set_defaults(func=_golden_list)
    diff = golden_commands.add_parser("diff", help="what mismatching backends produced, against the golden")
    diff.add_argument("model", help="the model's name (its golden folder)")
    diff.add_argument("--set", default="default",
                      help="the input set (its key, as golden list shows it; default: generated inputs)")
    diff.set_defaults(func=_golden_diff)

    init = commands.add_parser("init", help="configure a project with model artifacts, write a first test per "
                                             "model and record its goldens")
    init.add_argument("folder", nargs="?", default=".", help="the project folder (default: here)")
    init.add_argument("--no-golden", action="store_true", help="write the configuration and the test only")
    init.set_defaults(func=_init)

    inspect = commands.add_parser("inspect", help="delegate coverage of a model on every available backend")
    inspect.add_argument("model", help="an artifact path, or a stem (finds .onnx/.tflite/.pte)")
    inspect.add_argument("--model-dir", action="append", default=[],
                         help="also search this folder for a stem (the project's edge_model_dirs are searched)")
    inspect.add_argument("--target", action="append", default=[], choices=list(TARGETS),
                         help="also predict coverage on a mobile ONNX Runtime execution provider (nnapi, "
                              "coreml) or an OpenVINO device (gpu, npu)")
    inspect.set_defaults(func=_inspect)

    triage = commands.add_parser("triage", help="where a model loses accuracy")
    triage_commands = triage.add_subparsers(dest="triage_command", required=True)
    quant_command = triage_commands.add_parser("quant", help="per-layer quantization loss: float vs int8 .tflite")
    quant.add_arguments(quant_command)
    quant_command.set_defaults(func=quant.run_parsed)

    report = commands.add_parser("report", help="join, compare or render JSON reports")
    report_commands = report.add_subparsers(dest="report_command", required=True)
    merge = report_commands.add_parser("merge", help="device x backend matrix from several reports")
    merge.add_argument("reports", nargs="+")
    merge.add_argument("-o", "--output", help="write the merged report here")
    merge.set_defaults(func=_merge)
    compare = report_commands.add_parser("compare", help="regressions of NEW against OLD (exit 1 if any)")
    compare.add_argument("old")
    compare.add_argument("new")
    compare.add_argument("--max-regression", default="10%")
    compare.set_defaults(func=_compare)
    html = report_commands.add_parser("html", help="one self-contained HTML page (optionally against a baseline)")
    summary = report_commands.add_parser("summary", help="Markdown for a CI job summary (stdout without -o)")
    for command, func in ((html, _html), (summary, _summary)):
        command.add_argument("report")
        command.add_argument("baseline", nargs="?", help="a report to show the change against")
        command.add_argument("--max-regression", default="10%", help="changes above this are highlighted")
        command.set_defaults(func=func)
    html.add_argument("-o", "--output", required=True, help="write the page here")
    summary.add_argument("-o", "--output", help="write the Markdown here (e.g. $GITHUB_STEP_SUMMARY)")

    device_commands.add_arguments(commands)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
