"""``pytest-edge inspect``: delegate coverage of a model on every available backend."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ..backends import compile_targets, get_backend, tensor_backends
from ..backends.compiled import Compilation
from ..errors import EdgeError, EdgeUsageError
from ..core.marker import MarkerSpec
from ..core.models import Model
from ..core.plan import backend_choices
from ..report.table import format_table
from ..run.session import EdgeSession
from ..core.settings import Settings
from .project import project_settings


def _coverage_row(backend: str, cov, note: str = "") -> list[str]:
    ops = ", ".join(f"{k} x{v}" for k, v in sorted(cov.fallback_op_names.items())) or "none"
    return [backend, f"{cov.delegated_ops}/{cov.total_ops} delegated",
            f"{cov.fallback:.1%}" + (" (approx.)" if cov.approximate else ""), str(cov.partitions), ops, note]


def _kib(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f} KiB"


def compiled_note(compiled: Compilation) -> str:
    """What an NPU compiler planned, every figure optional (a .pte without its delegate's graph has
    no estimate; a memory mode uses no DRAM): SRAM, off-chip flash, DRAM, the estimate."""
    estimate = ("no estimate" if compiled.estimated_ms is None else
                f"estimated NPU time {compiled.estimated_ms:.4g} ms (an estimate)")
    return (f"compiled by {compiled.compiler}: SRAM {_kib(compiled.sram_kib)}, off-chip flash "
            f"{_kib(compiled.flash_kib)}, DRAM {_kib(compiled.dram_kib)}, {estimate}")


def _named_suffix(named: Path, model: Model) -> str | None:
    """The suffix under which ``model`` holds the file ``named`` (``.ncnn.param`` too), None if none."""
    return next((suffix for suffix, path in model.artifacts.items() if path.resolve() == named.resolve()), None)


def inspect_rows(target: str, settings: Settings, predict: Sequence[str] = ()) -> list[list[str]]:
    """Per available backend: coverage, partitions and fallback operators of a model file or stem."""
    session = EdgeSession(settings)
    rows = []
    try:
        # A file named on the command line is the user's own choice, wherever it lies: looked for in
        # its folder (model= in a test file is confined to the project's folders: core.models).
        named = Path(target)
        model = (session.resolve(str(named.resolve()), named.resolve().parent) if named.is_file()
                 else session.resolve(target, Path.cwd()))
        suffix = _named_suffix(named, model) if named.is_file() else None
        if suffix is not None:
            # A file was named: that artifact only (a backend of two formats, as Ethos-U's .tflite and
            # .pte, given the file named, not its sibling of the other format), on the backends of its
            # format (not "no .onnx artifact" beside a .pte), and on any --backends selects that read
            # it (Ethos-U's .pte; OpenVINO converting a .tflite only where asked for).
            model = replace(model, artifacts={suffix: model.artifacts[suffix]})
        choices = backend_choices(settings, MarkerSpec(), model)
        if suffix is not None:
            choices = [(name, reason) for name, reason in choices if get_backend(name).suffix == suffix or
                       (settings.backends is not None and suffix in get_backend(name).artifact_suffixes())]
            if not choices:  # an empty table would say nothing: which backends there are, said instead
                readers = [name for name, backend in {**tensor_backends(), **compile_targets()}.items()
                           if suffix in backend.artifact_suffixes()]
                raise EdgeUsageError(f"{target}: --backends {','.join(settings.backends or [])} selects no backend "
                                     f"that reads a {suffix} file; those that do: {', '.join(readers) or 'none'}")
        for backend, reason in choices:
            if reason:
                rows.append([backend, "—", "—", "—", "—", f"skipped: {reason}"])
                continue
            if get_backend(backend).compile_only:  # an NPU compiler's placement (docs/npu.md)
                try:
                    compiled = session.compiled(backend, get_backend(backend).artifact_of(model))
                except EdgeError as exc:
                    rows.append([backend, "—", "—", "—", "—", f"error: {exc}"])
                    continue
                rows.append(_coverage_row(backend, compiled.coverage, compiled_note(compiled)))
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


def inspect_command(args: argparse.Namespace) -> int:
    try:
        settings = project_settings()
        settings.model_dirs = [*settings.model_dirs, *(Path(d).resolve() for d in args.model_dir)]
        if getattr(args, "backends", ""):
            settings.backends = [name.strip() for name in args.backends.split(",") if name.strip()]
        rows = inspect_rows(args.model, settings, predict=args.target)
    except EdgeError as exc:
        print(f"pytest-edge inspect: {exc}", file=sys.stderr)
        return 2
    header = ["backend", "delegated", "fallback", "partitions", "fallback operators", "note"]
    print("\n".join(format_table(rows, header)))
    return 0
