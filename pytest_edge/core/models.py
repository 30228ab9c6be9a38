"""Find a model's artifacts: a path or a stem, relative to the test file, the rootdir, or the
``edge_model_dirs`` folders; and know a model by its place (its key), not its file stem.

A model's **key** is its place without suffix (``a/net`` for ``a/net.onnx``; an export folder for a
decoder exported as a folder), relative to the first ``edge_model_dirs`` folder that holds it, else
to the rootdir; outside both it is the stem. Goldens (``golden/<key>/``), A/B twins and report rows
go by the key (docs/goldens.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import EdgeUsageError


@dataclass(frozen=True)
class Model:
    name: str  # the stem (an export folder's name): test ids, and where goldens lay before keys
    artifacts: dict[str, Path]  # suffix -> file
    key: str = ""  # the model's place (see the module): unique per model; "" until placed: the name
    base: Path | None = field(default=None, compare=False)  # the folder ``key`` is relative to
    place: Path | None = field(default=None, compare=False)  # the artifacts' path without suffix, or the folder

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)

    def artifact(self, suffix: str) -> Path | None:
        return self.artifacts.get(suffix)

    def placed(self, place: Path, bases: Sequence[Path]) -> "Model":
        """This model known by ``place``: its key relative to the first of ``bases`` that holds it."""
        where = Path(os.path.abspath(place))
        for base in bases:
            root = Path(os.path.abspath(base))
            if root in where.parents:
                return Model(self.name, self.artifacts, where.relative_to(root).as_posix(), root, where)
        return Model(self.name, self.artifacts, self.name, None, where)

    def twin(self, artifact: Path, folder: Path) -> Path:
        """Where ``artifact``'s A/B twin lies in the baseline ``folder``: at the artifact's path under
        the folder its key is relative to (main's ``models/`` for a model of ``models/``); a model
        outside the project: the file of the same name."""
        if self.base is not None:
            try:
                return Path(folder) / Path(os.path.abspath(artifact)).relative_to(self.base)
            except ValueError:  # an artifact outside the model's place (a GenAI config naming ../x)
                pass
        return Path(folder) / Path(artifact).name


class ModelKeys:
    """The models this session resolved, by key: two places with one key are an error naming both
    (never a shared golden), and the stems in use tell whether a golden at a stem's old place can be
    only this model's."""

    def __init__(self) -> None:
        self.places: dict[str, Path | None] = {}
        self.stems: dict[str, set[str]] = {}

    def claim(self, model: Model) -> Model:
        known = self.places.setdefault(model.key, model.place)
        if model.place is not None and known is not None and known != model.place:
            raise EdgeUsageError(f"two models have the key {model.key!r}: {known} and {model.place}; their goldens "
                                 f"and A/B twins would be one (golden/{model.key}/): move or rename one "
                                 "(docs/goldens.md, a model's key)")
        self.stems.setdefault(model.name, set()).add(model.key)
        return model

    def sole_of_stem(self, model: Model) -> bool:
        """Whether no other model of this session has ``model``'s stem (its old golden is its own)."""
        return self.stems.get(model.name, {model.key}) <= {model.key}


def refuse_outside(spec: str, dirs: Sequence[Path], suffixes: Sequence[str], keyword: str = "model") -> None:
    """``keyword=spec`` names something inside the folders models are looked for in (the test's, the
    rootdir, edge_model_dirs): one that ends in '.' or '..' names no model, and one whose path leaves
    every folder (``"../../.."``, an absolute path elsewhere) would test, and record goldens for,
    whatever lies there. Judged on the path as written (links inside are followed, as DVC and
    git-annex check artifacts out). EdgeUsageError naming the keyword, the path and the folders."""
    if Path(spec).name in ("", ".", "..") or Path(spec).parts[-1:] in ((".",), ("..",)):
        raise EdgeUsageError(f"{keyword}={spec!r} names a folder by '.' or '..', not a model: name the export "
                             "folder or the artifact")
    roots = [os.path.abspath(folder) for folder in dirs]
    for folder in dirs:
        candidate = os.path.abspath(spec if Path(spec).is_absolute() else Path(folder) / spec)
        inside = any(candidate == root or candidate.startswith(root.rstrip(os.sep) + os.sep) for root in roots)
        if not inside and any(os.path.lexists(candidate + suffix) for suffix in ("", *suffixes)):
            raise EdgeUsageError(f"{keyword}={spec!r} is {candidate}, outside the folders models are looked "
                                 f"for in ({', '.join(dict.fromkeys(roots))}): refused, nothing there is read or "
                                 "recorded (list its folder in edge_model_dirs)")


def resolve_model(spec: str, search_dirs: Sequence[Path], suffixes: Iterable[str],
                  key_bases: Sequence[Path] = (), keyword: str | None = None) -> Model:
    """``spec`` with a known suffix names one artifact; without, every artifact of that stem.
    ``key_bases``: the folders the model's key is relative to (:meth:`Model.placed`). With
    ``keyword`` (the marker's, for its message) a ``spec`` that leaves ``search_dirs`` is refused
    (:func:`refuse_outside`) before anything is looked at."""
    suffixes = list(dict.fromkeys(suffixes))
    if keyword is not None:
        refuse_outside(spec, search_dirs, suffixes, keyword)
    given = Path(spec)
    searched = []
    for folder in search_dirs:
        candidate = given if given.is_absolute() else folder / given
        searched.append(str(candidate))
        # The longest suffix the name ends with: "m.ncnn.param" is an ".ncnn.param", not a ".param".
        named = max((s for s in suffixes if candidate.name.endswith(s) and candidate.name != s), key=len, default=None)
        if named is not None and candidate.is_file():
            stem = candidate.name.removesuffix(named)
            return Model(stem, {named: candidate}).placed(candidate.with_name(stem), key_bases)
        # Not a file of that name: a stem that ends like a suffix ("cnn.onnx" of cnn.onnx.onnx) is a stem.
        found = {s: candidate.with_name(candidate.name + s) for s in suffixes}
        found = {s: p for s, p in found.items() if p.is_file()}
        if found:
            return Model(candidate.name, found).placed(candidate, key_bases)
        if given.is_absolute():
            break
    raise EdgeUsageError(f"model {spec!r} not found: no {'/'.join(suffixes)} artifact at "
                         + ", ".join(dict.fromkeys(searched))
                         + "; folders searched by stem are the test file's, the rootdir and those listed in "
                         "the ini option edge_model_dirs (e.g. pyproject.toml [tool.pytest.ini_options] "
                         "edge_model_dirs = [\"models\"])")
