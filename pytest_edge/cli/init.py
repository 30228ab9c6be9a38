"""``pytest-edge init``: a project with model artifacts, green in one command.

It finds the ``.onnx``/``.tflite``/``.pte`` files under the project folder (not in virtual
environments, hidden folders or node_modules), adds ``edge_model_dirs`` to the pytest
configuration pytest already reads there (or creates one: ``[tool.pytest.ini_options]`` in an
existing pyproject.toml, else pytest.ini), writes ``tests/test_edge_models.py`` with one
``@pytest.mark.edge`` test per tensor model and one ``@pytest.mark.edge_llm`` test per decoder LLM
(an ONNX Runtime GenAI or Optimum export folder, a ``.gguf``, a ``.pte`` or ``.tflite`` that is an
LLM export: find_decoders), and records the golden outputs with ``pytest --edge-update-golden`` on
that file; what it found and did not cover is printed. Nothing the user wrote is overwritten: a project
that sets ``edge_model_dirs`` already, or has that test file, is refused with the reason.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..backends import compile_targets, recording_suffixes
from ..backends.decoder_search import WHAT_IS_FOUND, Decoders, find_decoders
from ..errors import EdgeError, EdgeUsageError
from ..files import atomic_write
from .first_tests import Traits, first_llm_test_source, first_test_source
from .pytest_config import configured_text, pytest_config, read_back

TEST_FILE = Path("tests") / "test_edge_models.py"
# Folders that hold someone else's files (environments, caches, dependencies).
SKIPPED_DIRS = {"venv", "env", "node_modules", "__pycache__", "site-packages"}


@dataclass
class Found:
    """The models of a project: folders to search by stem (relative to the config's folder), the
    stems, and the folders of a stem met again elsewhere (ignored: a model's name is its stem,
    which also names its golden folder)."""

    dirs: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def _skipped(folder: Path) -> bool:
    return folder.name.startswith(".") or folder.name in SKIPPED_DIRS or (folder / "pyvenv.cfg").exists()


def _suffix(name: str, suffixes: Sequence[str]) -> str | None:
    """The one of ``suffixes`` that ``name`` ends with (and is more than), or None."""
    return next((s for s in suffixes if name.endswith(s) and name != s), None)


def _folders(root: Path) -> list[Path]:
    """``root`` and the folders under it that are the project's (not environments, hidden folders)."""
    found, pending = [], [root]
    while pending:
        folder = pending.pop()
        found.append(folder)
        pending += [p for p in sorted(folder.iterdir()) if p.is_dir() and not p.is_symlink() and not _skipped(p)]
    return found


def find_models(root: Path, base: Path | None = None, decoders: Sequence[Path] = ()) -> Found:
    """The artifacts under ``root``, in sorted order; paths relative to ``base`` (the folder of
    the configuration file, where pytest resolves ``edge_model_dirs``; default ``root``). The
    ``decoders`` (find_decoders' artifacts) are no tensor models: left out."""
    base = base or root
    left_out = {Path(p).resolve() for p in decoders}
    # The formats a golden is recorded from by default (the backends with a reference_priority).
    suffixes = recording_suffixes()
    stems: dict[str, list[Path]] = {}
    pending = [root]
    while pending:
        folder = pending.pop()
        for path in sorted(folder.iterdir()):
            if path.is_dir() and not path.is_symlink():
                if not _skipped(path):
                    pending.append(path)
            elif (suffix := _suffix(path.name, suffixes)) is not None and path.is_file() \
                    and path.resolve() not in left_out:
                stem = path.name.removesuffix(suffix)
                stems.setdefault(stem, [])
                if path.parent not in stems[stem]:
                    stems[stem].append(path.parent)
    found = Found()
    for stem, folders in sorted(stems.items()):
        first, *others = sorted(folders, key=lambda f: (len(f.relative_to(root).parts), str(f)))
        relative = _relative(first, base)
        if relative not in found.dirs:
            found.dirs.append(relative)
        found.models.append(stem)
        found.ignored += [f"{_relative(f, base)}/{stem}" for f in others]
    found.dirs.sort()
    return found


def project_decoders(root: Path, base: Path | None = None) -> Decoders:
    """The decoder LLMs under ``root`` (backends.decoder_search), named from ``base``."""
    return find_decoders(root, base or root, _folders, _relative)


def _relative(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix() or "."
    except ValueError:
        return str(path.resolve())


def model_traits(root: Path, models: Sequence[str]) -> dict[str, Traits]:
    """Traits of each model, read from its signature on its reference backend (loaded with the
    configuration just written). pytest-edge feeds a dynamic leading (batch) dimension as 1 and
    cannot choose the others (inputs.feed_shape). A model that cannot load is left to the pytest
    run, which names the problem."""
    from ..run.session import EdgeSession
    from .project import project_settings

    settings = project_settings(["--rootdir", str(root), str(root)])
    session = EdgeSession(settings)
    traits = {}
    # The compile-time NPU targets installed here (vela's default configuration per family), with the
    # artifacts each compiles: an int8 model gets a test on them (docs/npu.md).
    npu = {name: target.artifact_suffixes() for name, target in compile_targets().items()
           if target.compile_only and target.unavailable_reason() is None}
    try:
        for name in models:
            try:
                model = session.resolve(name, root)
                info = session.load(session.plan(model, session.golden.reference_backend(model)))
            except EdgeError:
                continue
            quantized = info.precision in ("int8", "uint8")
            trait = Traits(int8_outputs=[s.name for s in info.outputs if s.dtype in ("int8", "uint8")],
                           quantized=quantized, inputs=tuple((tuple(s.shape), s.dtype) for s in info.inputs),
                           npu_targets=tuple(name for name, target in npu.items() if quantized
                                             and any(model.artifact(suffix) for suffix in target)))
            if any(not isinstance(d, int) or d < 0 for spec in info.inputs for d in spec.shape[1:]):
                trait.dynamic = ", ".join(f"{s.name!r}: {list(s.shape)}" for s in info.inputs)
            traits[name] = trait
    finally:
        session.close()
    return traits


def init(root: Path, record_golden: bool = True) -> int:
    """Configure, write the first test, record the goldens; the exit status of that pytest run."""
    root = root.resolve()
    inipath, already = pytest_config(root)
    if already:
        raise EdgeUsageError(f"{inipath} sets edge_model_dirs already: this project is configured (write edge "
                             f"tests by hand, or remove the setting to run pytest-edge init again)")
    test_file = root / TEST_FILE
    if test_file.exists():
        raise EdgeUsageError(f"{test_file} exists: pytest-edge init does not overwrite it")
    base = inipath.parent if inipath is not None else root
    decoders = project_decoders(root, base)
    found = find_models(root, base, decoders.artifacts)
    if not found.models and not decoders.found:
        for line in decoders.not_covered:
            print(f"not covered: {line}", file=sys.stderr)
        raise EdgeUsageError(f"no {'/'.join(recording_suffixes())} artifact under {root}, nor a decoder LLM "
                             f"({WHAT_IS_FOUND}) (virtual environments and hidden folders are not searched): export a "
                             "model first")
    dirs = found.dirs or ["."]  # decoders are named by their path from here; tensor models by stem in these
    config_path, text = configured_text(inipath, root, dirs)
    if read_back(config_path, text) != dirs:
        raise EdgeUsageError(f"{config_path}: with edge_model_dirs added it would not read back as "
                             f"{dirs} (or not parse at all); nothing written: set edge_model_dirs by hand")
    atomic_write(config_path, text.encode("utf-8"))
    print(f"{config_path}: edge_model_dirs = {', '.join(dirs)}")
    test_file.parent.mkdir(parents=True, exist_ok=True)
    traits = model_traits(root, found.models) if found.models else {}
    source = first_test_source(found.models, traits)
    source += first_llm_test_source(decoders.found, set(re.findall(r"^def (test_\w+)\(", source, re.M)))
    atomic_write(test_file, source.encode("utf-8"))
    if found.models:
        print(f"{test_file}: {len(found.models)} test(s): {', '.join(found.models)}")
    if decoders.found:
        print(f"{test_file}: {len(decoders.found)} decoder LLM test(s) (edge_llm): "
              + "; ".join(f"{d.model} ({d.what})" for d in decoders.found)
              + ". Their prompts are placeholder token ids: replace them with your tokenizer's")
    for path in found.ignored:
        print(f"ignored {path}.*: another model of that name comes first (a model's name is its stem)")
    for line in decoders.not_covered:
        print(f"not covered: {line}")
    if not record_golden:
        print("golden outputs not recorded (--no-golden): pytest --edge-update-golden records them")
        return 0
    print(f"recording golden outputs: pytest --edge-update-golden {TEST_FILE}")
    done = subprocess.run([sys.executable, "-m", "pytest", "--edge-update-golden", str(TEST_FILE)], cwd=root)
    if done.returncode == 0:
        targets = sorted({t for trait in traits.values() for t in trait.npu_targets})
        print(f"done: `pytest` now checks {len(found.models)} tensor model(s) and {len(decoders.found)} decoder(s) "
              "on every backend installed here that runs them, against their goldens"
              + (f"; {sum(1 for t in traits.values() if t.npu_targets)} int8 model(s) compiled for the NPU targets "
                 f"{', '.join(targets)}" if targets else "")
              + (f"; {len(decoders.not_covered)} not covered (above)" if decoders.not_covered else ""))
    else:
        print(f"pytest --edge-update-golden {TEST_FILE} failed (exit status {done.returncode}): the messages above "
              "name the model and backend; fix the artifact, then run that command again", file=sys.stderr)
    return done.returncode


def init_command(args: argparse.Namespace) -> int:
    try:
        return init(Path(args.folder), record_golden=not args.no_golden)
    except (EdgeError, OSError) as exc:
        print(f"pytest-edge init: {exc}", file=sys.stderr)
        return 2
