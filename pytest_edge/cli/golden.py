"""``pytest-edge golden``: refresh, list, prune and diff the golden sets."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import EdgeError
from ..report.table import format_table
from ..run.session import EdgeSession
from ..core.settings import Settings
from .project import golden_usage, project_settings

if TYPE_CHECKING:
    from ..golden.layout import ChangedFile


def golden_refresh(pytest_args: Sequence[str]) -> int:
    """``pytest --edge-update-golden`` with any pytest arguments (paths, -k, -n ...)."""
    import pytest

    return int(pytest.main(["--edge-update-golden", *pytest_args]))


def golden_rows(settings: Settings) -> list[list[str]]:
    """One row per golden set (model, input set): cases, reference backend, its artifacts with
    their recorded sha256 and whether each still matches the artifact the tests would load."""
    from ..golden import GoldenStore

    store, session = GoldenStore(settings.golden_dir), EdgeSession(settings)
    rows = []
    for model_name in store.models():
        keys = store.sets(model_name)
        prompts = store.prompts(model_name)
        if prompts:
            rows.append(_decoder_row(model_name, prompts, settings.rootdir))
        if not keys and not prompts:
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
                          for path in model.artifacts.values() if path.name in golden.meta.artifacts]
            except EdgeError:
                states = ["no artifact of that name in edge_model_dirs (unused?)"]
            recorded = ", ".join(f"{name} {digest[:12]}"
                                 for name, digest in sorted(golden.meta.artifacts.items()))
            rows.append([model_name, key, str(len(golden.cases)), golden.reference_backend, recorded,
                         "; ".join(states)])
    return rows


def _decoder_row(model: str, prompts: list[Path], rootdir: Path) -> list[str]:
    """One row for a model's decoder goldens (``llm``): how many prompts, the reference backend, the
    artifact each was recorded from with its sha256, and whether each file of that artifact is still
    the one recorded (the tensor goldens' rule, golden.layout.changed_files)."""
    from ..golden.layout import changed_files
    from ..golden.tokens import golden_files, read_golden, recorded_files

    recorded: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()  # (path, model file's sha256, every file's)
    backends, problems = set(), []
    for path in prompts:
        try:
            meta = read_golden(path, None).meta
        except EdgeError as exc:
            problems.append(f"{path.name}: unreadable: {exc}")
            continue
        backends.add(str(meta.reference_backend))
        where = str(meta.path or meta.artifact)
        recorded.add((where, str(meta.sha256), tuple(sorted(recorded_files(meta).items()))))
    states = []
    for where, _, files in sorted(recorded):
        artifact = rootdir / where
        if not artifact.is_file():
            states.append(f"{where}: not found (recorded before goldens kept the artifact's path, or removed)")
            continue
        states.append(f"{where}: {_state(list(changed_files(dict(files), golden_files(artifact))))}")
    return [model, "llm", str(len(prompts)), ", ".join(sorted(backends)) or "—",
            ", ".join(sorted({f"{Path(w).name} {d[:12]}" for w, d, _ in recorded})), "; ".join(states + problems)]


def _artifact_state(golden, path: Path) -> str:
    """current, stale, LFS pointer (the content was never pulled: not a change), or the problem."""
    from ..backends.base import is_lfs_pointer

    if is_lfs_pointer(path):
        return "LFS pointer (run git lfs pull)"
    try:
        return _state([change for _, change in golden.changes(path)])
    except EdgeError as exc:  # external data missing or outside the model's folder
        return f"error: {exc}"


def _state(changes: list[ChangedFile]) -> str:
    """current, or stale naming each file that changed: tensor and decoder rows alike."""
    return f"stale ({', '.join(change.summary for change in changes)})" if changes else "current"


def list_command(args: argparse.Namespace) -> int:
    try:
        rows = golden_rows(project_settings())
    except EdgeError as exc:
        print(f"pytest-edge golden list: {exc}", file=sys.stderr)
        return 2
    print("\n".join(format_table(rows, ["model", "input set", "cases", "reference", "artifacts (sha256)", "state"])))
    return 0


def golden_prune(argv: Sequence[str]) -> int:
    """``pytest-edge golden prune [--dry-run] [pytest args]``: remove the golden sets that no
    collected test uses."""
    from ..golden import GoldenStore, set_label
    from ..golden.use import unused_golden_sets

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


def diff_command(args: argparse.Namespace) -> int:
    from ..golden import GoldenStore, check_set_key
    from ..golden.layout import DEFAULT_SET, LLM_SET
    from ..golden.obtained import diff_lines, obtained_dir, token_diff_lines

    try:
        settings = project_settings()
        key = check_set_key(args.set)
        store = GoldenStore(settings.golden_dir)
        # A decoder's goldens (llm/) beside or instead of the model's tensor golden sets.
        decoder = key == DEFAULT_SET and bool(store.prompts(args.model))
        lines = diff_lines(store, args.model, obtained_dir(settings.rootdir, args.model, key), key=key) \
            if not decoder or store.exists(args.model, key) else []
        if decoder:
            lines += token_diff_lines(store, args.model, obtained_dir(settings.rootdir, args.model, LLM_SET))
    except EdgeError as exc:
        print(f"pytest-edge golden diff: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else f"no obtained outputs for {args.model} (every backend matched its golden)")
    return 0
