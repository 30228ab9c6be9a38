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
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from ..backends import recording_suffixes
from ..backends.decoder_search import WHAT_IS_FOUND, Decoders, FoundDecoder, find_decoders
from ..errors import EdgeError, EdgeUsageError
from ..files import atomic_write

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


def first_llm_test_source(decoders: Sequence[FoundDecoder], taken: set[str]) -> str:
    """One edge_llm test per decoder: greedy tokens against the golden on every LLM runtime that can
    run one of its artifacts. The prompt is token ids (a tokenizer is the app's business), the first
    ids of its vocabulary: the user replaces it with their own."""
    tests = []
    for decoder in decoders:
        name = "test_llm_" + (re.sub(r"\W", "_", decoder.model).strip("_") or "model")
        while name in taken:
            name += "_"
        taken.add(name)
        prompt = [i % decoder.vocab_size for i in range(1, 5)]
        tests.append(f"\n\n# {decoder.what}: put your own prompts' token ids; budgets: ttft_ms=, tpot_ms=, "
                     f"min_top1_agreement=, max_kld= ...\n"
                     f"@pytest.mark.edge_llm(model={json.dumps(decoder.model)}, prompts=[{prompt!r}], new_tokens=8)\n"
                     f"def {name}(edge_llm):\n    pass\n")
    return "".join(tests)


def _relative(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix() or "."
    except ValueError:
        return str(path.resolve())


# The first test's SNR floor for an int8 model: triage quant's threshold of a layer that is fine.
QUANTIZED_MIN_SNR_DB = 20
# How exporters and teams name a quantized variant of a model: kws_int8, kws-qdq, kws_q8, kws_quant,
# kws_int8_qdq (optimum, onnxruntime.quantization, ai-edge-torch and ExecuTorch examples use these).
QUANTIZED_SUFFIX = re.compile(r"[_.-](u?int8|qdq|q8|i8|quant|quantized|ptq|qat|w8a8|dynamic_quant)$", re.I)


def quantized_base(stem: str, stems: Sequence[str]) -> str | None:
    """The float model that ``stem`` is the quantized variant of, by name (``kws_int8`` -> ``kws``,
    ``kws_int8_qdq`` -> ``kws``), where the project has it; None otherwise."""
    name = stem
    while (match := QUANTIZED_SUFFIX.search(name)) is not None:
        name = name[:match.start()]
        if name in stems and name != stem:
            return name
    return None


def named_quantized(stem: str) -> bool:
    return QUANTIZED_SUFFIX.search(stem) is not None


def first_test_source(models: Sequence[str], traits: Mapping[str, "Traits"] | None = None) -> str:
    """One edge test per model: outputs against the golden on every backend that can run it. A
    model with dynamic input dimensions is skipped with the reason (its sizes are the user's to
    give, with shapes=; no default would mean anything); one with int8/uint8 outputs gets atol=1
    (one quantization step: delegate and reference kernels may round apart). A quantized variant of
    another model of the project (``kws_int8`` beside ``kws``, same inputs) is checked against that
    model's golden, ``reference="kws"``, by SNR (min_snr_db=20): what quantization costs, on every
    backend; an int8 model without its float model, min_snr_db=20 against its own golden."""
    names: set[str] = set()
    tests = []
    traits = traits or {}
    for model in models:
        name = "test_" + (re.sub(r"\W", "_", model).strip("_") or "model")
        while name in names:
            name += "_"
        names.add(name)
        trait = traits.get(model) or Traits()
        head, budgets = "", ""
        base = quantized_base(model, models)
        theirs = (traits.get(base) or Traits()).inputs if base is not None else ()
        if theirs and trait.inputs and theirs != trait.inputs:
            head += f"# not against {base}'s golden: the inputs differ ({_inputs(trait.inputs)} vs {_inputs(theirs)})\n"
            base = None
        if trait.int8_outputs:
            head += (f"# {', '.join(map(repr, trait.int8_outputs))}: int8/uint8 outputs, which kernels may round "
                     "one quantization step apart\n")
            budgets = ", atol=1"
        elif base is not None:
            head += (f"# the quantized variant of {base}: its outputs against {base}'s golden, by SNR (kernels\n"
                     "# and converters round apart element-wise)\n")
            budgets = f", reference={json.dumps(base)}, min_snr_db={QUANTIZED_MIN_SNR_DB}"
        elif trait.quantized or named_quantized(model):
            head += ("# an int8 model with float outputs: judged by SNR, since kernels (and the int8 artifacts of\n"
                     "# different converters) round apart element-wise\n")
            budgets = f", min_snr_db={QUANTIZED_MIN_SNR_DB}"
        if trait.dynamic:
            reason = (f"{model}: dynamic input dimensions ({trait.dynamic}): give their sizes with shapes= "
                      f"in the marker, then remove this skip and run pytest --edge-update-golden")
            head += f"@pytest.mark.skip(reason={reason!r})\n"
        tests.append(f"\n\n{head}@pytest.mark.edge(model={json.dumps(model)}{budgets})\n"
                     f"def {name}(edge_model):\n    pass\n")
    return ('"""Conformance of the project\'s models, written by `pytest-edge init`: edit it freely.\n\n'
            "Each test runs on every installed backend that can load one of the model's artifacts and\n"
            "checks the outputs against the golden outputs (`pytest --edge-update-golden` records them).\n"
            "Budgets go in the marker: atol=, max_fallback=, p50_ms=, peak_memory_mb= ...\n"
            '"""\n\nimport pytest\n' + "".join(tests))


def _inputs(inputs: tuple) -> str:
    return ", ".join(f"{dtype}{list(shape)}" for shape, dtype in inputs)


# ------------------------------------------------------------------ the pytest configuration


def _ini_line(dirs: Sequence[str]) -> str:
    """pytest splits a ``paths`` ini value as a shell would: each folder quoted where it must be
    (``'My Models'``). A line break cannot be written into an ini value at all (the next line would
    be read as a setting of its own): refused."""
    unwritable = [d for d in dirs if "\n" in d or "\r" in d]
    if unwritable:
        raise EdgeUsageError(f"cannot write the folder {unwritable[0]!r} into an ini file: its name holds a line "
                             "break; rename it, or set edge_model_dirs in pyproject.toml by hand")
    return "edge_model_dirs = " + " ".join(shlex.quote(d) for d in dirs)


def _toml_line(dirs: Sequence[str]) -> str:
    # A JSON string is a TOML basic string: quotes, backslashes and control characters escaped.
    return "edge_model_dirs = [" + ", ".join(json.dumps(d, ensure_ascii=False) for d in dirs) + "]"


def read_back(path: Path, text: str) -> list[str] | None:
    """The ``edge_model_dirs`` pytest will read from ``text`` as ``path``, or None if it does not
    parse: what init writes is checked this way before it replaces the user's file."""
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
            table = data.get("tool", {}).get("pytest", {}) if path.name == "pyproject.toml" else data.get("pytest", {})
            value = table.get("ini_options", {}).get("edge_model_dirs", table.get("edge_model_dirs"))
            return list(value) if isinstance(value, list) else None
        import iniconfig

        parsed = iniconfig.IniConfig(str(path), data=text)
        name = "tool:pytest" if path.name == "setup.cfg" else "pytest"
        value = parsed[name].get("edge_model_dirs") if name in parsed else None
        return shlex.split(value) if isinstance(value, str) else None
    except Exception:  # noqa: BLE001 - any parse failure: the text is not written
        return None


def _insert_after(text: str, header: str, line: str) -> str | None:
    """``text`` with ``line`` right after the table/section ``header`` line; None without one."""
    match = re.search(rf"^[ \t]*{re.escape(header)}[ \t]*(#.*)?$", text, re.M)
    if match is None:
        return None
    return text[:match.end()] + "\n" + line + text[match.end():]


def configured_text(inipath: Path | None, root: Path, dirs: Sequence[str]) -> tuple[Path, str]:
    """The configuration file to write and its new text: the one pytest reads (``inipath``), or a
    new ``[tool.pytest.ini_options]`` in pyproject.toml, or a new pytest.ini."""
    if inipath is None:
        pyproject = root / "pyproject.toml"
        if pyproject.is_file():
            text = pyproject.read_text(encoding="utf-8")
            return pyproject, text + ("" if text.endswith("\n") or not text else "\n") + \
                f"\n[tool.pytest.ini_options]\n{_toml_line(dirs)}\n"
        return root / "pytest.ini", f"[pytest]\n{_ini_line(dirs)}\n"
    text = inipath.read_text(encoding="utf-8")
    name = inipath.name
    if name == "pyproject.toml":
        headers, line = ("[tool.pytest.ini_options]", "[tool.pytest]"), _toml_line(dirs)
    elif name in ("pytest.toml", ".pytest.toml"):
        headers, line = ("[pytest]",), _toml_line(dirs)
    else:
        headers, line = ("[tool:pytest]" if name == "setup.cfg" else "[pytest]",), _ini_line(dirs)
    for header in headers:
        new = _insert_after(text, header, line)
        if new is not None:
            return inipath, new
    # pytest reads pytest.ini even without its section.
    return inipath, text + ("" if text.endswith("\n") or not text else "\n") + f"{headers[0]}\n{line}\n"


def pytest_config(root: Path) -> tuple[Path | None, bool]:
    """The configuration file pytest reads for ``root`` and whether it sets edge_model_dirs."""
    import pytest

    found: dict[str, object] = {}

    class _Capture:
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> int:
            found["inipath"] = config.inipath
            found["set"] = "edge_model_dirs" in config.inicfg
            return 0

    code = pytest.main(["-p", "no:cacheprovider", "--rootdir", str(root), str(root)], plugins=[_Capture()])
    if "inipath" not in found:
        raise EdgeUsageError(f"cannot read the pytest configuration of {root} (pytest exit status {int(code)})")
    inipath = found["inipath"]
    return (Path(inipath) if inipath else None), bool(found["set"])


@dataclass
class Traits:
    """What the first test of a model must know of its signature."""

    dynamic: str = ""  # its inputs' shapes, when a dimension other than the leading one is dynamic
    int8_outputs: list[str] = field(default_factory=list)
    quantized: bool = False  # int8/uint8 arithmetic (float outputs): statistical check
    # Its inputs' (shape, dtype), names aside: a variant is checked against its float model's golden only with the same.
    inputs: tuple = ()


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
    try:
        for name in models:
            try:
                model = session.resolve(name, root)
                info = session.load(session.plan(model, session.golden.reference_backend(model)))
            except EdgeError:
                continue
            trait = Traits(int8_outputs=[s.name for s in info.outputs if s.dtype in ("int8", "uint8")],
                           quantized=info.precision in ("int8", "uint8"),
                           inputs=tuple((tuple(s.shape), s.dtype) for s in info.inputs))
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
    source = first_test_source(found.models, model_traits(root, found.models)) if found.models else \
        first_test_source([])
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
        print(f"done: `pytest` now checks {len(found.models)} tensor model(s) and {len(decoders.found)} decoder(s) "
              "on every backend installed here that runs them, against their goldens"
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
