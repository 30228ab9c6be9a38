"""Golden inputs: drawn from the signature with a fixed seed, or taken from what the user gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .backends import TensorSpec
from .errors import EdgeUsageError

DEFAULT_SEED = 0

Case = dict[str, np.ndarray]


def concrete_shape(spec: TensorSpec, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    """The shape to feed: ``shapes=`` first; a dynamic leading (batch) dimension becomes 1; any
    other dynamic dimension needs ``shapes=``."""
    if spec.name in shapes:
        shape = tuple(int(d) for d in shapes[spec.name])
        if len(shape) != len(spec.shape):
            raise EdgeUsageError(f"shapes={{{spec.name!r}: {shape}}} has rank {len(shape)}, "
                                 f"but input {spec.name!r} has shape {list(spec.shape)}")
        return shape
    shape = []
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, int) and dim >= 0:
            shape.append(dim)
        elif axis == 0:
            shape.append(1)
        else:
            raise EdgeUsageError(
                f"input {spec.name!r} has a dynamic dimension {dim!r} at axis {axis} "
                f"(shape {list(spec.shape)}); fix it with shapes={{{spec.name!r}: (...)}} in the marker")
    return tuple(shape)


def generate_case(specs: Sequence[TensorSpec], shapes: Mapping[str, Sequence[int]], seed: int) -> Case:
    rng = np.random.default_rng(seed)
    case: Case = {}
    for spec in specs:
        shape = concrete_shape(spec, shapes)
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            low, high = (info.min, info.max) if dtype.itemsize == 1 else (0, 10)
            value = rng.integers(low, high, shape, endpoint=True).astype(dtype)
        else:
            raise EdgeUsageError(f"cannot draw values for input {spec.name!r} of dtype {spec.dtype}; "
                                 "give inputs= in the marker")
        case[spec.name] = value
    return case


def _as_case(value: Any, origin: str) -> Case:
    if not isinstance(value, Mapping):
        raise EdgeUsageError(f"inputs from {origin} must be a dict of arrays, got {type(value).__name__}")
    return {str(k): np.asarray(v) for k, v in value.items()}


def user_cases(source: Any, base_dir: Path) -> list[Case]:
    """The marker's ``inputs=``: an .npz path, a dict of arrays, or a callable returning either a
    dict or a list of dicts (one per case)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        path = path if path.is_absolute() else base_dir / path
        try:
            with np.load(path, allow_pickle=False) as data:
                return [{k: data[k] for k in data.files}]
        except (OSError, ValueError) as exc:
            raise EdgeUsageError(f"cannot read inputs file {path}: {exc}") from exc
    if callable(source):
        produced = source()
        if isinstance(produced, Mapping):
            return [_as_case(produced, "the inputs callable")]
        return [_as_case(item, "the inputs callable") for item in produced]
    if isinstance(source, Mapping):
        return [_as_case(source, "inputs=")]
    if isinstance(source, (list, tuple)):
        return [_as_case(item, "inputs=") for item in source]
    raise EdgeUsageError(f"inputs= must be an .npz path, a dict, a list of dicts or a callable, "
                         f"got {type(source).__name__}")


def check_case(case: Case, specs: Sequence[TensorSpec], origin: str) -> Case:
    """Put a case in signature order and cast Python scalars to the declared dtypes."""
    names = [s.name for s in specs]
    missing = [n for n in names if n not in case]
    extra = [n for n in case if n not in names]
    if missing or extra:
        raise EdgeUsageError(f"{origin}: inputs {sorted(case)} do not match the model's inputs {names}"
                             + (f" (missing {missing})" if missing else "")
                             + (f" (unknown {extra})" if extra else ""))
    return {s.name: np.asarray(case[s.name]).astype(s.dtype, copy=False) for s in specs}


def feed_order(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec]) -> list[int]:
    """For each reference tensor, its position in ``actual``. Artifacts of one network keep the
    order of the network's arguments, but not always the names (a .pte has none), so tensors are
    matched by name when both sides name the same set, and by position otherwise."""
    ref_names = [s.name for s in reference]
    act_names = [s.name for s in actual]
    if len(ref_names) != len(act_names):
        raise ValueError(f"{len(act_names)} tensors ({act_names}) where the golden signature has "
                         f"{len(ref_names)} ({ref_names})")
    if set(ref_names) == set(act_names):
        return [act_names.index(n) for n in ref_names]
    return list(range(len(ref_names)))


def signature_problems(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec],
                       order: Sequence[int], kind: str) -> list[str]:
    problems = []
    for ref, index in zip(reference, order):
        act = actual[index]
        if np.dtype(ref.dtype) != np.dtype(act.dtype):
            problems.append(f"{kind} {ref.name!r}: dtype {act.dtype}, golden has {ref.dtype}")
        if len(ref.shape) != len(act.shape) or any(
                isinstance(a, int) and isinstance(r, int) and a >= 0 and r >= 0 and a != r
                for a, r in zip(act.shape, ref.shape)):
            problems.append(f"{kind} {ref.name!r}: shape {list(act.shape)}, golden has {list(ref.shape)}")
    return problems

