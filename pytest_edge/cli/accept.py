"""``pytest-edge accept MODEL --reason "..."``: accept an intended change of one model in the merge
gate, for exactly its artifacts as they are now (their sha256), in the project's acceptance file
(``edge-accept.toml``), to commit with the change and review in the pull request."""

from __future__ import annotations

import argparse
import os
import sys

from ..core.acceptance import write_acceptance
from ..backends import all_artifact_suffixes
from ..errors import EdgeError
from ..files import sha256_file
from ..core.models import resolve_model
from ..core.plan import key_bases, search_dirs
from ..measurement.regressions import GATE_FIGURES
from .project import project_settings


def accept_command(args: argparse.Namespace) -> int:
    try:
        settings = project_settings()
        model = resolve_model(args.model, search_dirs(settings, None), all_artifact_suffixes(), key_bases(settings))
        artifacts = sorted(set(model.artifacts.values()))
        digests = [sha256_file(path) for path in artifacts]
        path = settings.accept_file
        accepted = write_acceptance(path, model.key, digests, args.reason, args.figure or ())
    except (EdgeError, OSError) as exc:
        print(f"pytest-edge accept: {exc}", file=sys.stderr)
        return 2
    figures = ", ".join(accepted.figures) if accepted.figures else "every figure"
    print(f"{os.path.relpath(path)}: {model.key}: {figures} accepted for "
          + ", ".join(f"{os.path.relpath(p)} ({d[:12]})" for p, d in zip(artifacts, digests))
          + f": {accepted.reason}")
    print("commit it with the change; the gate judges these artifacts by it, and any other artifact of "
          f"{model.key} as before")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the model's name (its stem) or an artifact path")
    parser.add_argument("--reason", required=True, help="why the change is accepted (kept in the file and the report)")
    parser.add_argument("--figure", action="append", choices=GATE_FIGURES,
                        help="accept only this figure (repeatable; default: every figure)")
    parser.set_defaults(func=accept_command)
