"""The inputs ``pytest-edge triage quant`` compares a float and a quantized model on, each with a
label for the table: a test's golden inputs (the float model's golden folder, which a test that
names the pair with ``reference=`` reads), an ``.npz`` case, or random cases from the signature."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..backends import TensorSpec
from ..errors import EdgeUsageError, GoldenError
from ..golden.layout import SET_DIR
from ..golden.store import GoldenStore
from ..accuracy.inputs import generate_case

Case = Mapping[str, np.ndarray]
Labelled = list[tuple[str, Case]]
DEFAULT_CASES = 8


def random_cases(specs: Sequence[TensorSpec], count: int, seed: int) -> Labelled:
    """``count`` cases from the signature, seeds ``seed``, ``seed + 1``, ..."""
    if count < 1:
        raise EdgeUsageError(f"--cases must be at least 1, got {count}")
    return [(f"seed {seed + i}", generate_case(specs, {}, seed + i)) for i in range(count)]


def load_inputs(path: Path | str) -> dict[str, np.ndarray]:
    """Inputs from an .npz: arrays named after the inputs, or a golden case (``inputs/<name>``)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: np.array(archive[k]) for k in archive.files}
    except FileNotFoundError as exc:
        raise EdgeUsageError(f"{path}: no such inputs file") from exc
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise EdgeUsageError(f"{path} is not a readable .npz of inputs: {exc}") from exc
    if any(k.startswith("inputs/") for k in arrays):
        arrays = {k[len("inputs/"):]: v for k, v in arrays.items() if k.startswith("inputs/")}
    for name, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise EdgeUsageError(f"{path}: input {name!r} is {value.dtype}, not numbers")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            # NaN compares as neither below nor above a threshold: every layer would look fine
            raise EdgeUsageError(f"{path}: input {name!r} has NaN or Inf values; the models are compared on "
                                 "finite inputs")
    return arrays


def unstack(labelled: Labelled, specs: Sequence[TensorSpec]) -> Labelled:
    """A case whose arrays each hold N stacked inputs of a batch-1 model (``[N, ...]`` for an input
    of shape ``[1, ...]``, by name or else by position) as N cases ``label[0]``, ``label[1]``, ...,
    so one .npz can carry several inputs and the worst decides; any other case is kept as it is."""
    result: Labelled = []
    for label, case in labelled:
        names = [s.name if s.name in case else None for s in specs]
        if None in names and len(case) == len(specs):
            names = list(case)
        arrays = [np.asarray(case[n]) if n is not None else None for n in names]
        counts = {a.shape[0] for a, s in zip(arrays, specs) if a is not None and len(s.shape) == a.ndim
                  and a.ndim and s.shape[0] == 1 and tuple(a.shape[1:]) == tuple(s.shape[1:])}
        if specs and None not in names and len(counts) == 1 and min(counts) > 1 and all(
                len(s.shape) == a.ndim and a.ndim and tuple(a.shape[1:]) == tuple(s.shape[1:])
                for a, s in zip(arrays, specs)):
            result += [(f"{label}[{i}]", {n: a[i:i + 1] for n, a in zip(names, arrays)})
                       for i in range(min(counts))]
        else:
            result.append((label, case))
    return result


def golden_cases(folder: Path) -> Labelled:
    """Every case of one golden set (a model's folder, or its ``inputs-<key>`` subfolder), read
    and verified by the golden store (hashes, sizes, NaN/Inf), labelled by case file."""
    folder = Path(folder)
    match = SET_DIR.fullmatch(folder.name)
    store, model, key = ((GoldenStore(folder.parent.parent), folder.parent.name, match["key"]) if match
                         else (GoldenStore(folder.parent), folder.name, "default"))
    try:
        golden = store.load(model, key)
    except GoldenError as exc:
        raise EdgeUsageError(f"{folder}: not a usable golden folder for triage quant: {exc}") from exc
    names = list(golden.meta.cases)
    if not golden.cases:
        raise EdgeUsageError(f"{folder}: the golden set has no cases")
    return [(names[i] if i < len(names) else f"case {i}", case.inputs) for i, case in enumerate(golden.cases)]


def choose_inputs(given: str | None, golden_root: Path | None, float_model: Path) -> tuple[Labelled, str] | None:
    """The cases named on the command line (an .npz or a golden folder), else the float model's
    golden set under ``golden_root`` (what a test with ``reference=`` compares on); None when
    there is neither (then random cases)."""
    if given:
        path = Path(given)
        if path.is_dir():
            return golden_cases(path), f"golden inputs of {path}"
        return [(path.name, load_inputs(path))], f"inputs from {path}"
    if golden_root is not None:
        # The float model's key (docs/goldens.md): its path without suffix where named relative to the
        # project (models/a/net.tflite: golden/models/a/net), else its stem (a model of edge_model_dirs).
        place = Path(float_model).with_name(Path(float_model).name.rsplit(".", 1)[0])
        places = [place, Path(place.name)] if not place.is_absolute() and ".." not in place.parts else [Path(place.name)]
        for folder in (Path(golden_root) / p for p in dict.fromkeys(places)):
            if (folder / "meta.json").exists():
                return golden_cases(folder), f"golden inputs of {folder} (the float model's golden)"
    return None
