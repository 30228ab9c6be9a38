"""``pytest-edge inspect``: delegate coverage of a model on every available backend."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from ..backends import all_backends, compile_targets, get_backend, tensor_backends
from ..backends.base import Backend
from ..backends.decoder_config import read_config
from ..backends.speech import SpeechConfig, SpeechConfigError
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


@dataclass(frozen=True)
class ExportSummary:
    """What ``inspect`` says of a decoder LLM's or a speech export's file, which has no tensor graph
    to place on a delegate: the configuration its backends read (from the file itself where it
    carries one), and the file's size."""

    path: Path
    kind: str  # "decoder LLM", "speech recognizer"
    readers: tuple[str, ...]  # the registered backends that read it
    size_bytes: int
    figures: tuple[tuple[str, str], ...]  # (what, value), in reading order
    source: str  # where the figures were read

    def lines(self) -> list[str]:
        rows = [["file", str(self.path)], ["size", f"{self.size_bytes:,} bytes"], ["kind", self.kind],
                ["read by", ", ".join(self.readers)], *([k, v] for k, v in self.figures),
                ["read from", self.source]]
        return format_table(rows, ["", ""])[2:]  # a two-column list, no header


def _reads(backend: Backend, path: Path) -> bool:
    """Whether ``path`` is a file of ``backend``'s suffixes (``x.onnx``; an export's own file name, as
    ``name.bin``; a file within an export folder, as ``folder/name.bin``)."""
    as_posix = path.resolve().as_posix()
    return any(path.name.endswith(suffix) if suffix.startswith(".") else
               (as_posix.endswith("/" + suffix)) for suffix in backend.artifact_suffixes())


def _matched(backend: Backend, path: Path) -> int:
    """The length of the longest of ``backend``'s suffixes that ``path`` is a file of (0: none)."""
    as_posix = path.resolve().as_posix()
    return max((len(suffix) for suffix in backend.artifact_suffixes()
                if (path.name.endswith(suffix) if suffix.startswith(".") else as_posix.endswith("/" + suffix))), default=0)


def _export_root(path: Path, backend: Backend) -> Path:
    """The export folder a speech runtime's file lies in (its suffix may name a subfolder)."""
    suffix = next(s for s in backend.artifact_suffixes() if path.resolve().as_posix().endswith("/" + s))
    return path.resolve().parents[len(Path(suffix).parts) - 1]


def _speech_figures(path: Path, folder: Path) -> tuple[tuple[str, str], ...]:
    """The export's configuration (validated as a recognizer reads it) and its shape from config.json."""
    try:
        config = SpeechConfig.read(folder)
        shape = json.loads((folder / "config.json").read_text())
    except (SpeechConfigError, OSError, ValueError) as exc:
        raise EdgeUsageError(f"{path}: not in a speech export inspect can read: {exc}") from None
    keys = (("encoder layers", "encoder_layers"), ("decoder layers", "decoder_layers"),
            ("encoder heads", "encoder_attention_heads"), ("decoder heads", "decoder_attention_heads"),
            ("width", "d_model"))
    return (("vocabulary", f"{config.vocab_size:,}"), ("mel bins", str(config.num_mel_bins)),
            ("decoder context", f"{config.max_target_positions:,} positions"),
            *((label, str(shape[key])) for label, key in keys if isinstance(shape.get(key), int)))


def export_summary(path: Path) -> ExportSummary | None:
    """The summary of ``path`` where every backend that reads its suffix runs decoders or recognizes
    speech (none places tensors); None for a tensor model's file (the coverage table's). Errors name
    the file and the backend."""
    readers = [b for b in all_backends().values() if _reads(b, path)]
    # The longest suffix decides, as format_backend does: sherpa-onnx's "sherpa-onnx/whisper-encoder.onnx"
    # is its export's file, not a tensor model every ".onnx" reader would take.
    longest = max((_matched(b, path) for b in readers), default=0)
    readers = [b for b in readers if _matched(b, path) == longest]
    if not readers or any(b.runs_tensors or b.compile_only for b in readers):
        return None
    names = tuple(b.name for b in readers)
    size = path.stat().st_size
    decoders = [b for b in readers if b.decoders is not None]
    if decoders:
        runtime = decoders[0].decoders
        assert runtime is not None
        try:
            config = read_config(path, metadata=runtime.config_of)
        except EdgeError as exc:
            raise EdgeUsageError(f"{path} ({decoders[0].name}): no decoder configuration inspect can read: {exc}") from None
        figures = (("layers", str(config.n_layers)), ("attention heads", str(config.n_heads)),
                   ("key/value heads", str(config.n_kv_heads)), ("head width", str(config.head_dim)),
                   ("vocabulary", f"{config.vocab_size:,}"), ("context", f"{config.max_context:,} positions"),
                   ("KV cache", f"{config.dtype}, {config.kv_cache_bytes(config.max_context):,} bytes at full context"))
        return ExportSummary(path, "decoder LLM", names, size, figures, config.source or str(path))
    speakers = [b for b in readers if b.speech is not None]
    if not speakers:
        raise EdgeUsageError(f"{path}: inspect reads tensor models, decoder LLMs and speech exports, not what "
                             f"{', '.join(names)} read{'s' if len(names) == 1 else ''}")
    folder = _export_root(path, speakers[0])
    figures = _speech_figures(path, folder)
    source = f"{folder}/config.json, generation_config.json, preprocessor_config.json"
    for backend in speakers:
        assert backend.speech is not None
        try:
            own = backend.speech.file_figures(folder)
        except EdgeError as exc:
            raise EdgeUsageError(f"{exc}") from None
        if own:
            figures = (*figures, *((f"{name} (the file's header)", str(value)) for name, value in own))
            source += f"; {path.name}'s own header"
    return ExportSummary(path, "speech recognizer", names, size, figures, source)


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
            # A suffix that is no backend's own (a converted format, as OpenVINO's IR) goes to those
            # that read it without being asked for by --backends.
            secondary = not any(b.suffix == suffix for b in all_backends().values())
            choices = [(name, reason) for name, reason in choices if get_backend(name).suffix == suffix or
                       ((settings.backends is not None or secondary) and
                        suffix in get_backend(name).artifact_suffixes())]
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
        named = Path(args.model)
        summary = export_summary(named) if named.is_file() else None
        if summary is not None:
            print("\n".join(summary.lines()))
            return 0
        rows = inspect_rows(args.model, settings, predict=args.target)
    except EdgeError as exc:
        print(f"pytest-edge inspect: {exc}", file=sys.stderr)
        return 2
    header = ["backend", "delegated", "fallback", "partitions", "fallback operators", "note"]
    print("\n".join(format_table(rows, header)))
    return 0
