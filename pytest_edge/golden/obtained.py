"""What a mismatching backend produced, against the golden: ``pytest-edge golden diff MODEL``.

A check that finds a mismatch writes the backend's outputs to
``<rootdir>/.edge/obtained/<model>/<backend>-case_NNN.npz`` (outside the committed golden folder);
this reads them back and prints, per backend, case and output, the error statistics and the worst
elements, so a user diffs files instead of reading numbers out of a failure message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np

from ..accuracy.compare import compare_output
from ..files import atomic_write, relative_path
from ..core.plan import Plan
from .layout import DEFAULT_SET, Golden, npz_bytes
from .store import GoldenStore

_NAME = re.compile(r"(?P<backend>.+)-case_(?P<case>\d{3,})\.npz")


def obtained_dir(rootdir: Path, model: str, key: str = DEFAULT_SET) -> Path:
    """Where a mismatching backend's outputs go: beside the golden, outside the committed folder
    (one subfolder per input set, as in the golden folder)."""
    folder = rootdir / ".edge" / "obtained" / model
    return folder if key == DEFAULT_SET else folder / f"inputs-{key}"


def write_obtained(rootdir: Path, plan: Plan, index: int, golden: Golden, outputs: Sequence[np.ndarray],
                   out_order: Sequence[int]) -> Path:
    """Write one case's outputs beside the golden they missed (pytest-regressions' ``.obtained``
    files); the path relative to ``rootdir``. With reference= that is the reference model's golden,
    and the file is named after the tested model too, so it neither overwrites the reference model's
    own obtained files nor goes unseen by ``pytest-edge golden diff <reference>``."""
    folder = obtained_dir(rootdir, golden.model, golden.key)
    folder.mkdir(parents=True, exist_ok=True)
    who = plan.backend if plan.reference is None else f"{plan.model.name}.{plan.backend}"
    path = folder / f"{who}-case_{index:03d}.npz"
    arrays = {f"outputs/{ref.name}": np.asarray(outputs[pos]) for ref, pos in zip(golden.outputs_spec, out_order)}
    atomic_write(path, npz_bytes(arrays))
    return Path(relative_path(path, rootdir))


def diff_lines(store: GoldenStore, model: str, obtained_dir: Path, worst: int = 3,
               key: str = DEFAULT_SET) -> list[str]:
    """Lines of the report; GoldenError if the golden cannot be read, [] if nothing was obtained."""
    golden = store.load(model, key)
    lines = []
    for path in sorted(obtained_dir.glob("*.npz")) if obtained_dir.is_dir() else []:
        match = _NAME.fullmatch(path.name)
        if match is None:
            continue
        backend, index = match["backend"], int(match["case"])
        if index >= len(golden.cases):
            lines.append(f"{backend} case {index}: the golden has {len(golden.cases)} case(s) now; stale file {path}")
            continue
        with np.load(path, allow_pickle=False) as data:
            outputs = {key.split("/", 1)[1]: data[key] for key in data.files if key.startswith("outputs/")}
        for name, expected in golden.cases[index].outputs.items():
            actual = outputs.get(name)
            if actual is None or actual.shape != expected.shape:
                lines.append(f"{backend} case {index} {name}: shape {None if actual is None else actual.shape} "
                             f"against the golden's {expected.shape}")
                continue
            c = compare_output(name, expected, actual, {"atol": 0.0, "rtol": 0.0})
            delta = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
            lines.append(f"{backend} case {index} {name}: max |Δ| {c.max_abs_err:.3g}, mean |Δ| "
                         f"{float(delta.mean()):.3g}, max rel {c.max_rel_err:.3g}, cosine "
                         f"{'—' if c.cosine is None else format(c.cosine, '.6f')}, SNR "
                         f"{'—' if c.snr_db is None else format(c.snr_db, '.1f')} dB")
            flat = np.argsort(delta, axis=None)[::-1][:worst]
            for position in flat:
                at = tuple(int(i) for i in np.unravel_index(position, delta.shape))
                # 9 significant digits tell any two float32 apart (NumPy 2's repr adds "np.float32(...)").
                lines.append(f"    at {list(at)}: golden {float(expected[at]):.9g}, {backend} {float(actual[at]):.9g}")
    return lines
