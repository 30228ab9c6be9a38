"""Golden store: ``<golden_dir>/<model>/meta.json`` plus one ``case_NNN-<hash>.npz`` per case.
``<model>`` is the model's key (``tiny_cnn``, ``a/net``: core.models), so a model's folder may lie
in subfolders of the store.

A model keeps one golden *set* per input set. Generated inputs (seeded, from the signature) form
the default set, stored in the model's folder itself as before input sets existed; the inputs of a
marker's ``inputs=`` form a set keyed by :func:`input_key` (12 hex digits of sha256 over the
arrays' names, dtypes, shapes and bytes), stored in ``<model>/inputs-<key>/`` with the same files.

Nothing is written unless asked. Every write goes to a temporary file beside its target and is
moved into place with ``os.replace``, under a per-model lock, so an interrupted or concurrent
(pytest-xdist) refresh never leaves a half-written or lost golden file. ``meta.json`` is written
last: it is the commit point that names the case files.

Reading treats the files as untrusted: see :mod:`.validate`.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np

from .. import codec
from ..errors import GoldenError
from ..files import atomic_write
from .layout import (CASE_NAME, DEFAULT_SET, LLM_DIR, LLM_PROMPT, LLM_SET, SCHEMA, SET_DIR, UPDATE_HINT, Golden, GoldenCase, GoldenMeta, case_file,
                     check_set_key, non_finite_problem, npz_bytes)
from .validate import check_set_folder, read_set

_LEFTOVER_PATTERNS = (".case_*.npz.*.tmp", ".meta.json.*.tmp")
# How deep model folders are looked for (a key's parts): a hostile tree is not walked forever.
MAX_KEY_DEPTH = 16


class GoldenStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def folder(self, model: str, key: str = DEFAULT_SET) -> Path:
        """The folder of one input set: the model's folder for the default set, else its
        ``inputs-<key>`` subfolder; ``llm`` for its decoder goldens."""
        if key == LLM_SET:
            return self.root / model / LLM_DIR
        if check_set_key(key) == DEFAULT_SET:
            return self.root / model
        return self.root / model / f"inputs-{key}"

    def exists(self, model: str, key: str = DEFAULT_SET) -> bool:
        return os.path.lexists(self.folder(model, key) / "meta.json")

    def models(self) -> list[str]:
        """The model folders of the store, by key (``a/net``): each folder that holds a golden set
        (``meta.json``, ``inputs-*``) or decoder goldens (``llm/``), and each empty leaf folder. What
        lies inside a model's folder is that model's (its sets, the user's notes): not walked. Symbolic
        links are not followed (not ours)."""
        found: list[str] = []

        def walk(folder: Path, prefix: str, depth: int) -> None:
            for child in sorted(folder.iterdir()):
                if not child.is_dir() or child.is_symlink():
                    continue
                key = prefix + child.name
                subfolders = [c for c in child.iterdir() if c.is_dir() and not c.is_symlink()]
                if os.path.lexists(child / "meta.json") or not subfolders or any(
                        SET_DIR.fullmatch(c.name) or c.name == LLM_DIR for c in subfolders):
                    found.append(key)
                elif depth < MAX_KEY_DEPTH:
                    walk(child, key + "/", depth + 1)

        if self.root.is_dir() and not self.root.is_symlink():
            walk(self.root, "", 1)
        return found

    def sets(self, model: str) -> list[str]:
        """The keys of the sets stored for ``model``: ``default`` when the model's folder has a
        ``meta.json``, then each ``inputs-<12 hex>`` subfolder that has one (other names, links
        and files are not golden sets and are left alone)."""
        folder = self.root / model
        keys = [DEFAULT_SET] if os.path.lexists(folder / "meta.json") else []
        if folder.is_dir() and not folder.is_symlink():
            for child in sorted(folder.iterdir()):
                match = SET_DIR.fullmatch(child.name)
                if match and child.is_dir() and not child.is_symlink() and os.path.lexists(child / "meta.json"):
                    keys.append(match["key"])
        return keys

    def all_sets(self) -> list[tuple[str, str]]:
        """Every (model, set) stored: its input sets, and ``llm`` where it has decoder goldens."""
        return [(model, key) for model in self.models()
                for key in [*self.sets(model), *([LLM_SET] if self.prompts(model) else [])]]

    def prompts(self, model: str) -> list[Path]:
        """The decoder goldens of ``model`` (``llm/prompt-<16 hex>.npz``; links and other names are not ours)."""
        folder = self.root / model / LLM_DIR
        if not folder.is_dir() or folder.is_symlink():
            return []
        return sorted(p for p in folder.iterdir() if LLM_PROMPT.fullmatch(p.name) and p.is_file() and not p.is_symlink())

    def load(self, model: str, key: str = DEFAULT_SET) -> Golden:
        folder = self.folder(model, key)
        meta_path = folder / "meta.json"
        check_set_folder(folder, key)
        if not os.path.lexists(meta_path):
            which = "" if key == DEFAULT_SET else f", input set {key} (the inputs= of the test)"
            raise GoldenError(f"no golden outputs for model {model!r}{which} (looked for {meta_path}); "
                              f"create them with {UPDATE_HINT}")
        tidy_leftovers(self.root / model, folder)
        with _locked(self.root / model, shared=True):  # a consistent meta.json + cases, even mid-refresh
            return read_set(model, key, folder, meta_path)

    def write(self, model: str, meta: GoldenMeta, cases: list[GoldenCase], key: str = DEFAULT_SET) -> Golden:
        """Record one input set; other sets of the model (other folders) are not touched."""
        folder = self.folder(model, key)
        for index, case in enumerate(cases):
            # The session checks outputs before recording; a golden must never hold NaN/Inf anyway.
            for kind, arrays in (("input", case.inputs), ("output", case.outputs)):
                for name, array in arrays.items():
                    problem = non_finite_problem(kind, name, np.asarray(array))
                    if problem:
                        raise GoldenError(f"refusing to write the golden for {model!r} in {folder}: "
                                          f"case {index}: {problem}")
        check_set_folder(folder, key)
        folder.mkdir(parents=True, exist_ok=True)
        blobs = [npz_bytes({**{f"inputs/{k}": v for k, v in case.inputs.items()},
                            **{f"outputs/{k}": v for k, v in case.outputs.items()}}) for case in cases]
        meta = replace(meta, schema=SCHEMA, cases=tuple(case_file(i, blob) for i, blob in enumerate(blobs)),
                       input_set=key)
        with _locked(self.root / model):
            # Under the exclusive lock no other refresh is writing here: any hidden temporary is
            # a leftover of one that was killed between write and rename.
            remove_leftovers(folder)
            for name, blob in zip(meta.cases, blobs):
                atomic_write(folder / name, blob)
            text = json.dumps(codec.to_json(meta), indent=2, sort_keys=True)
            atomic_write(folder / "meta.json", (text + "\n").encode())
            keep = set(meta.cases)
            for stale in folder.glob("case_*.npz"):
                if stale.name not in keep:
                    stale.unlink()
        return Golden(model, folder, meta, list(cases), key=key)

    def remove(self, model: str, key: str = DEFAULT_SET) -> list[Path]:
        """Delete one set under the model's exclusive lock: ``meta.json`` first (the commit point:
        the set is gone even if a case file cannot be removed), then its case files and leftover
        temporaries, then its folder (and the model's) if nothing else is left in it. Files this
        store did not write are left where they are. Returns what was removed."""
        folder = self.folder(model, key)
        model_folder = self.root / model
        if not os.path.lexists(folder):
            return []
        if key == LLM_SET:
            return self._remove_prompts(model)
        check_set_folder(folder, key)
        removed: list[Path] = []
        with _locked(model_folder):
            meta_path = folder / "meta.json"
            if os.path.lexists(meta_path):
                meta_path.unlink()
                removed.append(meta_path)
            for path in sorted(folder.iterdir()):
                if CASE_NAME.fullmatch(path.name) and not path.is_dir():
                    path.unlink()
                    removed.append(path)
            removed += remove_leftovers(folder)
            for empty in ((folder, model_folder) if key != DEFAULT_SET else (model_folder,)):
                try:
                    empty.rmdir()
                    removed.append(empty)
                except OSError:  # not empty: other sets or the user's own files
                    return removed
        return removed + self._remove_empty_parents(model_folder)

    def _remove_prompts(self, model: str) -> list[Path]:
        """A model's decoder goldens: its prompt files, then the folders they leave empty."""
        removed: list[Path] = []
        for path in self.prompts(model):
            path.unlink()
            removed.append(path)
        for empty in (self.root / model / LLM_DIR, self.root / model):
            try:
                empty.rmdir()
                removed.append(empty)
            except OSError:  # not empty: tensor sets, the user's own files
                return removed
        return removed + self._remove_empty_parents(self.root / model)

    def _remove_empty_parents(self, model_folder: Path) -> list[Path]:
        """The folders of a key's parts (``a`` of ``a/net``) that nothing else uses any more."""
        removed: list[Path] = []
        for parent in model_folder.parents:
            if parent == self.root or self.root not in parent.parents:
                break
            try:
                parent.rmdir()
                removed.append(parent)
            except OSError:
                break
        return removed

def remove_leftovers(folder: Path) -> list[Path]:
    """Delete the hidden temporaries an interrupted refresh left in ``folder``; call it only
    under the folder's exclusive lock. Returns what was removed."""
    removed = []
    for pattern in _LEFTOVER_PATTERNS:
        for path in folder.glob(pattern):
            try:
                if not path.is_dir() or path.is_symlink():
                    path.unlink()
                    removed.append(path)
            except FileNotFoundError:
                pass
    return removed


def tidy_leftovers(model_folder: Path, folder: Path) -> None:
    """Remove a killed refresh's temporaries (up to MBs each) when no refresh is running now: a
    check need not wait for the next refresh to tidy the folder. Never waits, never fails: a
    read-only checkout keeps them."""
    try:
        fd = os.open(model_folder, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        remove_leftovers(folder)
    except OSError:  # a refresh holds the folder, or it is read-only
        pass
    finally:
        os.close(fd)


@contextmanager
def _locked(folder: Path, shared: bool = False) -> Iterator[None]:
    # Lock the folder itself, so no lock file is left in the user's golden tree.
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
