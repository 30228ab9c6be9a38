"""The calibration cases of a target that quantizes at load (``Backend.calibrates``: an NPU toolkit's
int8 build): the marker's ``calibration=`` (an ``.npz`` of one case, or a folder of them, inside the
project), else every case of the test's golden. What the record says of it (how many samples, from
where) travels with the cases."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends.base import CalibrationCase
from ..core.plan import Plan
from ..errors import EdgeUsageError
from ..golden.sets import GoldenSets

# Arrays one calibration set may hold in all: beyond this a folder of images is not a calibration set
# but a dataset to subsample (the worker receives them in one message).
MAX_CALIBRATION_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Calibration:
    """Cases a load quantizes on, and where they come from: each case its origin (a file, a golden
    case) and its inputs by name. The Load request's ``calibration`` is its codec.to_json (arrays
    travel as arrays); equality is the source's (the arrays' bytes are :attr:`identity`'s)."""

    source: str
    cases: tuple[CalibrationCase, ...] = field(compare=False)

    @property
    def identity(self) -> str:
        """What tells two calibrations apart in the session's cache of loads: their source and bytes."""
        digest = hashlib.sha256(self.source.encode())
        for case in self.cases:
            for name in sorted(case.inputs):
                digest.update(name.encode() + np.ascontiguousarray(case.inputs[name]).tobytes())
        return digest.hexdigest()[:16]


def calibration_for(plan: Plan, golden: GoldenSets, rootdir: Path) -> Calibration | None:
    """``plan``'s calibration: the marker's ``calibration=`` set, else the golden's every case; None
    where neither exists yet (no golden recorded: the backend then calibrates on its first run)."""
    spec = plan.marker.calibration
    if spec is not None:
        return user_calibration(spec, plan.test_dir, rootdir, plan.backend)
    known = golden.known(plan)
    if known is None or not known.cases:
        return None
    cases = tuple(CalibrationCase(f"{known.folder} case {index}",
                                  {name: np.asarray(array) for name, array in case.inputs.items()})
                  for index, case in enumerate(known.cases))
    return Calibration(source=f"the golden's {len(cases)} case(s) ({known.folder})", cases=cases)


def _confined(spec: str, test_dir: Path, rootdir: Path, backend: str) -> Path:
    """``calibration=spec`` relative to the test's folder, inside the project's root also once links
    are followed (an absolute path elsewhere, ``../`` or a link out is refused, nothing there is read)."""
    path = Path(spec) if Path(spec).is_absolute() else test_dir / spec
    real, root = path.resolve(), rootdir.resolve()
    if not real.is_relative_to(root):
        raise EdgeUsageError(f"{backend}: calibration={spec!r} leads to {real}, outside the project's root ({root}): "
                             "refused, nothing there is read")
    if not path.exists():
        raise EdgeUsageError(f"{backend}: calibration={spec!r}: {path} does not exist (an .npz of one case, or a "
                             "folder of them)")
    return path


def user_calibration(spec: str, test_dir: Path, rootdir: Path, backend: str) -> Calibration:
    """The marker's ``calibration=``: an .npz file (one case: the model's inputs by name, as
    ``np.savez(path, x=...)`` writes them) or a folder whose .npz files are the cases, in name order.
    A folder with none, an unreadable file or one with no arrays is a usage error naming the file
    and ``backend``."""
    path = _confined(spec, test_dir, rootdir, backend)
    files = sorted(path.glob("*.npz")) if path.is_dir() else [path]
    if not files:
        raise EdgeUsageError(f"{backend}: calibration={spec!r}: no .npz file in {path} (save each case with "
                             "np.savez(path, x=...))")
    inputs: list[dict[str, np.ndarray]] = []
    total = 0
    for file in files:
        try:
            loaded = np.load(file, allow_pickle=False)
            # A .npy renamed .npz loads as a plain array, which is no context manager (Python 3.11 raises
            # TypeError at `with`): checked before it.
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise ValueError("it holds one array, not an .npz archive of the inputs by name")
            with loaded as data:
                case = {name: np.array(data[name]) for name in data.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
            raise EdgeUsageError(f"{backend}: cannot read calibration file {file}: {exc}") from None
        if not case:
            raise EdgeUsageError(f"{backend}: calibration file {file} holds no array")
        total += sum(array.nbytes for array in case.values())
        if total > MAX_CALIBRATION_BYTES:
            raise EdgeUsageError(f"{backend}: calibration={spec!r} holds more than {MAX_CALIBRATION_BYTES // 2**20} MiB "
                                 f"of arrays (at {file}); calibrate on a subsample")
        inputs.append(case)
    where = f"{path} ({len(files)} .npz file(s))" if path.is_dir() else str(path)
    return Calibration(source=f"calibration={spec!r}: {where}",
                       cases=tuple(CalibrationCase(str(f), case) for f, case in zip(files, inputs)))
