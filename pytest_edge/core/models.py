"""Find a model's artifacts: a path or a stem, relative to the test file, the rootdir, or the
``edge_model_dirs`` folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import EdgeUsageError


@dataclass(frozen=True)
class Model:
    name: str
    artifacts: dict[str, Path]  # suffix -> file

    def artifact(self, suffix: str) -> Path | None:
        return self.artifacts.get(suffix)


def resolve_model(spec: str, search_dirs: Sequence[Path], suffixes: Iterable[str]) -> Model:
    """``spec`` with a known suffix names one artifact; without, every artifact of that stem."""
    suffixes = list(dict.fromkeys(suffixes))
    given = Path(spec)
    searched = []
    for folder in search_dirs:
        candidate = given if given.is_absolute() else folder / given
        searched.append(str(candidate))
        # The longest suffix the name ends with: "m.ncnn.param" is an ".ncnn.param", not a ".param".
        named = max((s for s in suffixes if candidate.name.endswith(s) and candidate.name != s), key=len, default=None)
        if named is not None and candidate.is_file():
            return Model(candidate.name.removesuffix(named), {named: candidate})
        # Not a file of that name: a stem that ends like a suffix ("cnn.onnx" of cnn.onnx.onnx) is a stem.
        found = {s: candidate.with_name(candidate.name + s) for s in suffixes}
        found = {s: p for s, p in found.items() if p.is_file()}
        if found:
            return Model(candidate.name, found)
        if given.is_absolute():
            break
    raise EdgeUsageError(f"model {spec!r} not found: no {'/'.join(suffixes)} artifact at "
                         + ", ".join(dict.fromkeys(searched))
                         + "; folders searched by stem are the test file's, the rootdir and those listed in "
                         "the ini option edge_model_dirs (e.g. pyproject.toml [tool.pytest.ini_options] "
                         "edge_model_dirs = [\"models\"])")
