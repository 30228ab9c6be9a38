"""``pytest-edge accept MODEL --reason "..."``: accept an intended change of one model in the merge
gate, for exactly its artifacts as they are now (the sha256 of every file each is made of: external
data, a GenAI folder's configuration), in the project's acceptance file (``edge-accept.toml``), to
commit with the change and review in the pull request. A tensor model by its stem or path, a
decoder as ``edge_llm(model=...)`` names it (an export folder too)."""

from __future__ import annotations

import argparse
import os
import sys

from ..core.acceptance import write_acceptance
from ..backends import all_artifact_suffixes
from ..errors import EdgeError, EdgeUsageError
from ..files import sha256_file
from ..core.external_data import identity_files
from ..core.models import Model, resolve_model
from ..core.plan import key_bases, search_dirs
from ..judging.regressions import GATE_FIGURES
from .project import project_settings


def command_line_text(text: str) -> str:
    """A command-line argument as text: a byte that is not UTF-8 (a Latin-1 terminal's 'é', which
    Python keeps as a lone surrogate) is read as Latin-1, the rest as UTF-8, so the reason keeps what
    was typed rather than an escape no TOML file can hold."""
    return "".join(chr(ord(c) - 0xDC00) if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)


def _model(spec: str, settings) -> Model:
    """The tensor model of that stem or path, else the decoder ``edge_llm(model=spec)`` would test."""
    dirs = search_dirs(settings, None)
    bases = key_bases(settings)
    try:
        return resolve_model(spec, dirs, all_artifact_suffixes(), bases)
    except EdgeUsageError as first:
        from ..run.decoder_plan import resolve_llm_model  # a decoder: an export folder, a .gguf

        try:
            return resolve_llm_model(spec, dirs, bases)
        except EdgeUsageError:
            raise first from None


def accept_command(args: argparse.Namespace) -> int:
    reason = command_line_text(args.reason).strip()
    if not reason:
        print("pytest-edge accept: --reason is empty: an accepted regression says why (it is kept in the file "
              "and the report)", file=sys.stderr)
        return 2
    try:
        settings = project_settings()
        model = _model(args.model, settings)
        files = {}
        for artifact in sorted(set(model.artifacts.values())):
            files.update({path: sha256_file(path) for path in identity_files(artifact).values()})
        path = settings.accept_file
        accepted = write_acceptance(path, model.key, list(dict.fromkeys(files.values())), reason,
                                    args.figure or (), rootdir=settings.rootdir)
    except (EdgeError, OSError) as exc:
        print(f"pytest-edge accept: {exc}", file=sys.stderr)
        return 2
    figures = ", ".join(accepted.figures) if accepted.figures else "every figure"
    print(f"{os.path.relpath(path)}: {model.key}: {figures} accepted for "
          + ", ".join(f"{os.path.relpath(p)} ({d[:12]})" for p, d in files.items())
          + f": {accepted.reason}")
    print("commit it with the change; the gate judges these artifacts by it, and any other artifact of "
          f"{model.key} as before")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the model's name (its stem), an artifact path, or a decoder's export folder")
    parser.add_argument("--reason", required=True, help="why the change is accepted (kept in the file and the report)")
    parser.add_argument("--figure", action="append", choices=GATE_FIGURES,
                        help="accept only this figure (repeatable; default: every figure)")
    parser.set_defaults(func=accept_command)
