"""The decoder LLMs of a project, found as their exporters left them, for ``pytest-edge init``
(cli/init.py): which folder or artifact each ``edge_llm`` test names, what it is, and its
vocabulary; the artifacts that are no tensor models. What each format's decoder looks like is
runtime knowledge, so it lives here, beside the readers it asks (decoder_config, each backend's
``decoder_config``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..errors import EdgeError

# What find_decoders looks for, in words (init's refusal of a folder without any model says it).
WHAT_IS_FOUND = ".gguf, an ONNX Runtime GenAI or Optimum export folder, an LLM .pte or .tflite"


@dataclass
class FoundDecoder:
    """A decoder LLM of the project: what ``edge_llm(model=...)`` names (an export folder, or one
    artifact by its path, relative to the configuration's folder), what it is, and its vocabulary
    (the first test's prompt ids must lie in it)."""

    model: str
    what: str
    vocab_size: int
    artifacts: list[Path] = field(default_factory=list)


@dataclass
class Decoders:
    found: list[FoundDecoder] = field(default_factory=list)
    not_covered: list[str] = field(default_factory=list)  # "path: why", said by init

    @property
    def artifacts(self) -> list[Path]:
        return [a for d in self.found for a in d.artifacts]


def _causal_lm_folder(folder: Path) -> bool:
    """An Optimum export folder: ``model.onnx`` beside a Hugging Face ``config.json`` of a causal LM."""
    try:
        architectures = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return False
    return (folder / "model.onnx").is_file() and any(
        isinstance(a, str) and a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures)


def _hand_written(artifact: Path) -> bool:
    """A ``<stem>.json`` in the decoder keys beside it (this project's convention for a decoder
    whose export carries no configuration)."""
    from .decoder_config import LlmConfig, config_path

    try:
        LlmConfig.load(config_path(artifact))
        return True
    except (EdgeError, OSError, ValueError, TypeError, KeyError):
        return False


def find_decoders(root: Path, base: Path, folders: Callable[[Path], Sequence[Path]],
                  relative: Callable[[Path, Path], str]) -> Decoders:
    """The decoder LLMs under ``root``: ONNX Runtime GenAI folders (a ``genai_config.json`` naming its
    decoder) and Optimum folders (``model.onnx`` beside a causal LM's ``config.json``), each the folder
    (a lone ``.gguf``/``.pte``/``.tflite`` beside it is the same model's other artifact); then each
    ``.gguf``; each ``.pte`` with ExecuTorch's LLM metadata methods; each ``.tflite`` with
    litert-torch's prefill/decode signatures; and an artifact with a hand-written ``<stem>.json``.
    The configuration is read as edge_llm reads it; one that cannot be read is not covered, with why.
    ``folders``: the project's folders under ``root`` (init's walk); ``relative``: a path as the
    test names it, from ``base`` (the configuration's folder)."""
    from . import decoder_backends
    from .decoder_config import genai_decoder, read_config

    backends = decoder_backends()
    by_suffix = {b.suffix: b for b in backends.values()}
    suffixes = (".gguf", ".pte", ".tflite", ".onnx")
    result = Decoders()

    def config(artifact: Path):
        backend = by_suffix.get(artifact.suffix)
        reader = backend.decoders.config_of if backend is not None and backend.decoders is not None \
            and artifact.suffix != ".onnx" else None
        return read_config(artifact, metadata=reader)

    for folder in folders(root):
        files = [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in suffixes]
        claimed: list[Path] = []
        try:
            named = genai_decoder(folder)
        except EdgeError as exc:
            result.not_covered.append(f"{relative(folder, base)}: {exc}")
            named = None
        export = ("ONNX Runtime GenAI folder" if named is not None and named.is_file()
                  else "Optimum ONNX folder" if _causal_lm_folder(folder) else None)
        if export is not None:
            onnx = named if named is not None else folder / "model.onnx"
            claimed = [onnx] + [p for p in files if p.suffix != ".onnx" and by_suffix.get(p.suffix)
                                and sum(q.suffix == p.suffix for q in files) == 1]
            # The lone other artifacts are this folder's model too (edge_llm takes one of each kind).
            try:
                vocab = config(onnx).vocab_size
            except EdgeError as exc:
                result.not_covered.append(f"{relative(folder, base)}: {exc}")
            else:
                kinds = [export] + [p.name for p in claimed[1:]]
                result.found.append(FoundDecoder(relative(folder, base), " + ".join(kinds), vocab, claimed))
        stems: dict[str, list[Path]] = {}
        for path in files:
            if path in claimed or path.suffix == ".onnx" and not _hand_written(path):
                continue
            if path.suffix in (".pte", ".tflite") and not _hand_written(path):
                try:
                    decoders = by_suffix[path.suffix].decoders
                    carried = decoders.config_of(path) if decoders is not None else None
                except EdgeError:
                    continue  # not an LLM export: a tensor model
                if carried is None:  # no LLM metadata (or no runtime to read it): a tensor model
                    continue
            stems.setdefault(path.stem, []).append(path)
        # One model per stem (tiny_llm.onnx and tiny_llm.pte: one network on two runtimes, one golden),
        # named by its path without the suffix, as edge_llm finds it; an export folder holding only it
        # (export_llama's model.pte, a converter's model.gguf) by the folder, as it is keyed.
        alone = len(stems) == 1 and folder != root and all(p.stem in stems for p in files)
        for stem, paths in stems.items():
            try:
                vocab = config(paths[0]).vocab_size
            except EdgeError as exc:
                result.not_covered.append(f"{relative(paths[0], base)}: {exc}")
                continue
            kinds = {".gguf": "GGUF", ".pte": "ExecuTorch LLM export", ".tflite": "LiteRT generative export",
                     ".onnx": "ONNX decoder with a hand-written configuration"}
            result.found.append(FoundDecoder(relative(folder if alone else folder / stem, base),
                                             " + ".join(kinds[p.suffix] for p in paths),
                                             vocab, paths))
    return result
