"""Golden inputs: drawn from the signature with a fixed seed, or taken from what the user gives."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..backends import TensorSpec
from ..backends.shapes import matched_positions, oversized_input
from ..errors import EdgeError, EdgeUsageError
from . import DEFAULT_SEED  # noqa: F401 - its name here too (triage, tests)

if TYPE_CHECKING:  # numpy.typing is an import of its own (a few ms), for annotations only
    from numpy.typing import ArrayLike

Case = dict[str, np.ndarray]
# One case of inputs= as the user gave it, by input name: arrays, NumPy scalars, Python numbers or
# nested lists, kept as given (check_case converts each to the model's dtype, or refuses it).
UserCase = dict[str, "ArrayLike"]


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


def check_shapes(shapes: Mapping[str, Sequence[int]], specs: Sequence[TensorSpec], origin: str,
                 renamed: Mapping[str, str] | None = None, golden_names: Sequence[str] = ()) -> None:
    """``shapes=`` may only name inputs the model has (by the golden's names where the artifact's
    differ, ``renamed``: golden name -> artifact name); a typo would otherwise be ignored silently
    and the dynamic dimension it meant to fix would still be an error (or a default batch of 1)."""
    names = [s.name for s in specs]
    renamed = renamed or {}
    unknown = [n for n in shapes if n not in names and n not in renamed]
    if unknown:
        also = (f" (the golden's: {list(golden_names)}, matched by position)"
                if golden_names and list(golden_names) != names else "")
        raise EdgeUsageError(f"{origin}: shapes= names {', '.join(map(repr, unknown))}, which the model "
                             f"does not have; its inputs are {names}{also}")


def _dtype(spec: TensorSpec) -> np.dtype:
    try:
        return np.dtype(spec.dtype)
    except (TypeError, ValueError) as exc:
        raise EdgeUsageError(f"input {spec.name!r} has dtype {spec.dtype!r}, which NumPy has no type for; "
                             "pytest-edge cannot feed it") from exc


def integer_range(dtype: np.dtype) -> tuple[int, int]:
    """Values drawn for an integer input: an 8-bit one's full range, else 0..10 (indices, counts)."""
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max)) if dtype.itemsize == 1 else (0, 10)


def generate_case(specs: Sequence[TensorSpec], shapes: Mapping[str, Sequence[int]], seed: int) -> Case:
    rng = np.random.default_rng(seed)
    case: Case = {}
    for spec in specs:
        shape = concrete_shape(spec, shapes)
        too_big = oversized_input(shape)
        if too_big:
            raise EdgeUsageError(f"input {spec.name!r}: {too_big}; give a smaller one with shapes= or inputs=")
        dtype = _dtype(spec)
        if dtype.kind == "f":
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind in "iu":
            low, high = integer_range(dtype)
            value = rng.integers(low, high, shape, endpoint=True).astype(dtype)
        else:
            raise EdgeUsageError(f"cannot draw values for input {spec.name!r} of dtype {spec.dtype}; "
                                 "give inputs= in the marker")
        case[spec.name] = value
    return case


def _as_case(value: Any, origin: str) -> UserCase:
    # Values stay as given: check_case needs to tell a NumPy array's chosen dtype from a Python
    # number's default one.
    if not isinstance(value, Mapping):
        raise EdgeUsageError(f"inputs= from {origin} must be a dict of arrays (one case) or a list of "
                             f"such dicts, got {_what(value)}")
    return {str(k): v for k, v in value.items()}


def _what(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _call(source: Any) -> Any:
    """Call the user's ``inputs=`` callable; its own exceptions become usage errors that name it."""
    name = getattr(source, "__qualname__", None) or repr(source)
    try:
        produced = source()
        if isinstance(produced, Iterator):  # a generator: its body runs now
            produced = list(produced)
    except EdgeError:
        raise
    except Exception as exc:
        raise EdgeUsageError(f"inputs=: the callable {name} raised {type(exc).__name__}: {exc}") from exc
    return produced


def user_cases(source: Any, base_dir: Path) -> list[UserCase]:
    """The marker's ``inputs=``: an .npz path, a dict of arrays, a list of dicts, or a callable
    returning a dict or a list of dicts (one per case). Values are checked by :func:`check_case`."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        path = path if path.is_absolute() else base_dir / path
        try:
            data = np.load(path, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):  # a .npy: one unnamed array
                raise EdgeUsageError(f"cannot read inputs file {path}: it holds one array, not an .npz "
                                     "archive of named arrays (save it with np.savez(path, x=...))")
            with data:
                return [{k: data[k] for k in data.files}]
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
            raise EdgeUsageError(f"cannot read inputs file {path}: {exc}") from exc
    if callable(source):
        produced = _call(source)
        cases = _cases_of(produced, "the inputs callable")
        if cases is None:
            raise EdgeUsageError(f"inputs=: the callable {getattr(source, '__qualname__', source)!s} returned "
                                 f"{_what(produced)}; it must return a dict of arrays or a list of dicts")
        return cases
    cases = _cases_of(source, "inputs=")
    if cases is None:
        raise EdgeUsageError(f"inputs= must be an .npz path, a dict, a list of dicts or a callable, "
                             f"got {type(source).__name__}")
    return cases


def _cases_of(value: Any, origin: str) -> list[UserCase] | None:
    """A dict is one case, a list or tuple of dicts one case each; None for anything else."""
    if isinstance(value, Mapping):
        return [_as_case(value, origin)]
    if isinstance(value, (list, tuple)):
        return [_as_case(item, origin) for item in value]
    return None


_KIND_NAMES = {"U": "strings", "S": "bytes", "O": "Python objects", "V": "records", "M": "datetimes",
               "m": "timedeltas", "c": "complex numbers"}


def refuse_non_numbers(cases: Sequence[UserCase]) -> None:
    """An inputs= case holding values no golden can hold (complex, strings, objects) is refused
    with the input's name and dtype, before a set key is made of it: a check would otherwise look
    for a golden set that can never exist and say "no golden outputs"."""
    for index, case in enumerate(cases):
        for name, value in case.items():
            try:
                kind = np.asarray(value).dtype
            except (ValueError, TypeError):
                continue  # ragged: convert_input says what is wrong with it
            if kind.kind not in "biuf":
                where = f"case {index}, " if len(cases) > 1 else ""
                raise EdgeUsageError(f"inputs=: {where}input {name!r} holds {_KIND_NAMES.get(kind.kind, kind.name)} "
                                     f"(dtype {kind}); a golden holds numbers only (bool, int, uint, float)")


def convert_input(value: ArrayLike, spec: TensorSpec, origin: str) -> np.ndarray:
    """One user-given input as an array of the model's dtype, refusing conversions that lose values.

    - A NumPy array (or NumPy scalar) of another dtype is converted when NumPy calls the cast
      safe (int8 -> int32, uint8 -> float32, bool -> float32, float32 -> float64), when it stays
      within its kind and every value survives (int64 -> int32 for values in range: ``np.full``
      and ``np.arange`` make int64 by default), and from float to a narrower float
      (float64 -> float32: NumPy makes float64 by default, and rounding to the model's precision
      is what feeding that model means; a finite value that overflows to Inf is still an error).
      Any other change of kind (int64 -> float32, float -> int, int -> bool) is an error naming
      the input and both dtypes and suggesting ``.astype(...)``: it usually means a missing
      preprocessing step (an integer image given to a float model) or a wrong input.
    - Python numbers and lists carry no dtype choice: they are converted when every value survives
      exactly (``3`` for a float input is 3.0; ``2.5`` for an integer input is an error).
    - Strings, objects, complex numbers and NaN are errors (NaN could not be matched against the
      recorded golden inputs). +-Inf is allowed in float inputs (additive attention masks).
    """
    expected = _dtype(spec)
    label = f"{origin}: inputs=: input {spec.name!r}"
    from_numpy = isinstance(value, (np.ndarray, np.generic))
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists, unconvertible objects
        raise EdgeUsageError(f"{label} is not an array: {exc}") from exc
    given = array.dtype
    if given.kind not in "biuf":
        raise EdgeUsageError(f"{label} holds {_KIND_NAMES.get(given.kind, given.name)} (dtype {given}); "
                             f"the model takes {expected} numbers")
    if given.kind == "f" and np.isnan(array).any():
        raise EdgeUsageError(f"{label} contains {int(np.isnan(array).sum())} NaN values; golden inputs "
                             "must be numbers")
    if given == expected:
        return array
    if np.can_cast(given, expected, "safe"):
        return array.astype(expected)
    same_kind = given.kind == expected.kind or (given.kind in "iu" and expected.kind in "iu")
    with np.errstate(all="ignore"):
        converted = array.astype(expected)
        if given.kind == "f" and expected.kind == "f":
            lost = np.isfinite(array) & ~np.isfinite(converted)  # overflow; rounding is accepted
        elif expected.kind == "f":  # int/bool -> float: exact?
            lost = converted.astype(np.float64) != array.astype(np.float64)
        else:  # -> int or bool: does the value come back?
            lost = converted.astype(given) != array
    if (same_kind or not from_numpy) and not np.any(lost):
        return converted
    if np.any(lost):
        where = tuple(int(i) for i in np.argwhere(lost)[0]) if array.ndim else ()
        example = array[where].item() if array.ndim else array.item()
        detail = (f"value {example!r}" + (f" at index {where}" if array.ndim else "")
                  + f" does not survive the conversion to {expected}")
    else:
        detail = f"{given} -> {expected} changes the kind of number, which pytest-edge does not do silently"
    # An integer array for a float model is most often an image not yet scaled to what it expects.
    scaling = " (after any scaling the model expects)" if given.kind in "iub" and expected.kind == "f" else ""
    raise EdgeUsageError(f"{label} has dtype {given}, the model takes {expected}: {detail}; if that is "
                         f"intended, give it as {spec.name}.astype(np.{expected.name}){scaling}")


def check_case(case: UserCase, specs: Sequence[TensorSpec], origin: str) -> Case:
    """Put a case in signature order with the declared dtypes (see :func:`convert_input` for
    which conversions are made and which are errors)."""
    names = [s.name for s in specs]
    missing = [n for n in names if n not in case]
    extra = [n for n in case if n not in names]
    if missing or extra:
        raise EdgeUsageError(f"{origin}: inputs= gives {sorted(case)}, the model's inputs are {names}"
                             + (f" (missing {missing})" if missing else "")
                             + (f" (not inputs of the model: {extra})" if extra else ""))
    return {s.name: convert_input(case[s.name], s, origin) for s in specs}


def feed_order(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec]) -> list[int]:
    """For each reference tensor, its position in ``actual`` (:func:`~pytest_edge.backends.base.matched_positions`)."""
    return matched_positions([s.name for s in reference], [s.name for s in actual])


def signature_problems(reference: Sequence[TensorSpec], actual: Sequence[TensorSpec],
                       order: Sequence[int], kind: str) -> list[str]:
    problems = []
    for ref, index in zip(reference, order):
        act = actual[index]
        if np.dtype(ref.dtype) != np.dtype(act.dtype):
            problems.append(f"{kind} {ref.name!r}: dtype {act.dtype}, golden has {ref.dtype}")
        if shapes_differ(ref.shape, act.shape):
            problems.append(f"{kind} {ref.name!r}: shape {list(act.shape)}, golden has {list(ref.shape)}")
    return problems


def shapes_differ(reference: Sequence[Any], actual: Sequence[Any]) -> bool:
    """Ranks differ, or a static dimension does (dynamic ones, names or None, match anything)."""
    return len(reference) != len(actual) or any(
        isinstance(a, int) and isinstance(r, int) and a >= 0 and r >= 0 and a != r
        for a, r in zip(actual, reference))
