"""Comparison of outputs against golden outputs: element-wise (NumPy ``isclose``) and statistical.

Pure functions: they take arrays and tolerances and return figures and messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

import numpy as np

from . import metrics
from .metrics import as_float

# The marker's tolerance keywords, which the comparison resolves and applies.
STATISTICAL_KEYS = ("min_cosine", "min_snr_db", "topk_agreement")  # the checks for quantized artifacts
TOLERANCE_KEYS = ("atol", "rtol", *STATISTICAL_KEYS)


@dataclass(frozen=True)
class Tolerance:
    """The checks one output is compared by, a field per keyword of :data:`TOLERANCE_KEYS`:
    element-wise (``atol``, ``rtol``: NumPy ``isclose``, the one not given 0) and statistical (the
    quantized artifacts'). None: that check is not made."""

    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    min_snr_db: float | None = None
    topk_agreement: float | None = None

    @property
    def elementwise(self) -> bool:
        return self.atol is not None or self.rtol is not None


@dataclass(frozen=True)
class ToleranceOverride:
    """One scope's entry of the marker's ``tolerances=``: the keywords it sets, and those it switches
    off (given as None there, so no outer scope's value applies)."""

    values: Tolerance = Tolerance()
    off: frozenset[str] = frozenset()

    def over(self, base: Tolerance) -> Tolerance:
        """``base`` with this scope's keywords set and switched off."""
        given = {key: getattr(self.values, key) for key in TOLERANCE_KEYS if getattr(self.values, key) is not None}
        return replace(base, **{key: None for key in self.off}, **given)


@dataclass(frozen=True)
class ScopedTolerances:
    """``tolerances[scope]``, a scope being an output or a backend: its own keywords, and where it is
    a backend, each output's on it (``{backend: {output: {...}}}``)."""

    own: ToleranceOverride = ToleranceOverride()
    outputs: Mapping[str, ToleranceOverride] = field(default_factory=dict)


@dataclass
class OutputComparison:
    name: str
    max_abs_err: float
    max_rel_err: float
    cosine: float | None
    snr_db: float | None
    topk: float | None
    problems: list[str] = field(default_factory=list)


def _finite_or_none(x: float) -> float | None:
    # A figure computed from NaN/Inf (or overflowing float64) means nothing: say so with None.
    return x if math.isfinite(x) else None


def cosine(expected: np.ndarray, actual: np.ndarray) -> float | None:
    return _finite_or_none(metrics.cosine(expected, actual))


def snr_db(expected: np.ndarray, actual: np.ndarray) -> float | None:
    """Signal-to-noise ratio of ``actual`` against ``expected`` in dB (capped at 200 when exact)."""
    snr = metrics.snr_db(expected, actual)
    if math.isnan(snr):
        return None
    return -200.0 if snr == -math.inf else min(200.0, snr)


def topk_agreement(expected: np.ndarray, actual: np.ndarray, k: int = 1) -> float | None:
    """Fraction of rows (last axis = classes) whose top-k class sets agree."""
    if expected.ndim == 0 or expected.shape[-1] < k:
        return None
    e = as_float(expected).reshape(-1, expected.shape[-1])
    a = as_float(actual).reshape(-1, actual.shape[-1])
    top_e = np.argsort(-e, axis=1, kind="stable")[:, :k]
    top_a = np.argsort(-a, axis=1, kind="stable")[:, :k]
    agree = [set(x) == set(y) for x, y in zip(top_e, top_a)]
    return float(np.mean(agree))


def needed_tolerances(expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> tuple[float, float]:
    """The smallest atol (with the given rtol) and rtol (with the given atol) that would pass;
    ``inf`` where no finite tolerance would (NaN or Inf on either side), never NaN."""
    e, a = as_float(expected), as_float(actual)
    with np.errstate(invalid="ignore"):
        diff = np.where(a == e, 0.0, np.abs(a - e))  # equal infinities agree
    if not np.all(np.isfinite(diff)):
        return math.inf, math.inf
    scale = np.where(np.isfinite(e), np.abs(e), 0.0)  # where e is +-inf, diff is 0 (equal) by now
    need_atol = float(np.max(diff - rtol * scale, initial=0.0))
    over = diff - atol
    if np.any((over > 0) & (scale == 0)):
        need_rtol = math.inf
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            need_rtol = float(np.max(np.where(scale > 0, over / scale, 0.0), initial=0.0))
    return max(need_atol, 0.0), max(need_rtol, 0.0)


def _fmt(x: float) -> str:
    return "inf" if not math.isfinite(x) else f"{x:.3g}"  # never suggest a NaN tolerance


def likely_cause(expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> str:
    """Where to look first when outputs disagree, in the order the field has learned (SPEC §7):
    pre/post-processing (layout, channel order, normalisation), then export and quantization,
    then the backend's kernels."""
    e, a = as_float(expected), as_float(actual)

    def close(x: np.ndarray) -> bool:
        return x.shape == a.shape and bool(np.allclose(a, x, atol=max(atol, 1e-6), rtol=max(rtol, 1e-5)))

    if e.ndim == 4:
        for perm, what in (((0, 2, 3, 1), "NHWC where the golden is NCHW"),
                           ((0, 3, 1, 2), "NCHW where the golden is NHWC")):
            if close(np.transpose(e, perm)):
                return f"layout: the output is the golden in {what}"
    for axis in range(e.ndim):
        if e.shape[axis] in (3, 4) and close(np.flip(e, axis)):
            return f"channel order: the output is the golden reversed on axis {axis} (RGB/BGR?)"
    if a.shape != e.shape:
        return "shape: the artifact's output shape differs from the golden; check the export"
    flat_e, flat_a = e.ravel(), a.ravel()
    if flat_e.size > 1 and np.std(flat_e) > 0:
        scale, offset = np.polyfit(flat_e, flat_a, 1)
        fitted = scale * flat_e + offset
        residual = np.linalg.norm(flat_a - fitted) / max(np.linalg.norm(flat_a - flat_a.mean()), 1e-30)
        if abs(offset) < 1e-5 * max(1.0, abs(scale) * float(np.abs(flat_e).max())):
            offset = 0.0  # fitting noise, not an offset
        if residual < 1e-3 and (abs(scale - 1) > 1e-2 or abs(offset) > max(atol, 1e-6)):
            return (f"normalisation: the output is {scale:.4g} x golden + {offset:.4g}; check the input "
                    "scaling (0..255 vs 0..1, mean/std) and any post-processing")
    cos = cosine(expected, actual)
    if cos is not None and cos >= 0.99:
        return (f"numerics: same direction (cosine {cos:.5f}), small differences: quantization or the "
                "backend's kernels; for quantized artifacts use min_cosine/min_snr_db/topk_agreement")
    # Said to a user who sees no "above": name what was ruled out.
    return ("large disagreement: not a layout, channel-order or scaling difference of the golden; if the "
            "artifact changed on purpose, refresh the golden; else compare the export (operators, opset, "
            "quantization) with the reference artifact, then the backend's kernels")


def compare_output(name: str, expected: np.ndarray, actual: np.ndarray,
                   tolerance: Tolerance) -> OutputComparison:
    atol = float(tolerance.atol or 0.0)
    rtol = float(tolerance.rtol or 0.0)
    problems: list[str] = []
    actual, expected = np.asarray(actual), np.asarray(expected)
    for side, array in (("golden", expected), ("output", actual)):
        if array.dtype.kind not in "biuf":
            problems.append(f"output {name!r}: the {side} has dtype {array.dtype}, not numbers")
            return OutputComparison(name, math.inf, math.inf, None, None, None, problems)
    if expected.dtype.kind == "f" and not np.all(np.isfinite(expected)):
        # Checked first: against a NaN golden every figure (and any suggested tolerance) is NaN.
        nan, inf = int(np.isnan(expected).sum()), int(np.isinf(expected).sum())
        problems.append(f"golden output {name!r} has {nan} NaN and {inf} Inf of {expected.size} "
                        "elements, so nothing can be compared against it; refresh the golden with "
                        "pytest --edge-update-golden once the reference backend gives finite outputs")
        return OutputComparison(name, math.inf, math.inf, None, None, None, problems)
    if actual.shape != expected.shape:
        problems.append(f"output {name!r}: shape {list(actual.shape)}, golden has {list(expected.shape)}; "
                        f"look first at {likely_cause(expected, actual, atol, rtol)}")
        return OutputComparison(name, math.inf, math.inf, None, None, None, problems)
    if actual.dtype.kind == "f" and not np.all(np.isfinite(actual)):
        nan, inf = int(np.isnan(actual).sum()), int(np.isinf(actual).sum())
        problems.append(f"output {name!r} has {nan} NaN and {inf} Inf of {actual.size} elements")
        return OutputComparison(name, math.inf, math.inf, None, None, None, problems)
    e, a = as_float(expected), as_float(actual)
    diff = np.abs(a - e)
    max_abs = float(diff.max(initial=0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(e) > 0, diff / np.abs(e), np.where(diff > 0, np.inf, 0.0))
    max_rel = float(rel.max(initial=0.0))
    cos, snr = cosine(expected, actual), snr_db(expected, actual)
    top = topk_agreement(expected, actual) if tolerance.topk_agreement is not None else None
    if tolerance.elementwise:
        close = np.isclose(a, e, rtol=rtol, atol=atol)
        bad = int(close.size - np.count_nonzero(close))
        if bad:
            worst = np.unravel_index(int(np.argmax(np.where(close, -1.0, diff))), diff.shape)
            need_atol, need_rtol = needed_tolerances(expected, actual, atol, rtol)
            problems.append(
                f"output {name!r}: {bad} of {close.size} elements differ beyond atol={atol:g}, "
                f"rtol={rtol:g}; max abs err {max_abs:.3g}, max rel err {_fmt(max_rel)}; worst at "
                f"index {tuple(int(i) for i in worst)}: got {a[worst]:.9g}, golden {e[worst]:.9g}; "
                f"would pass with atol={_fmt(need_atol)} (rtol={rtol:g}) or rtol={_fmt(need_rtol)} "
                f"(atol={atol:g}); look first at {likely_cause(expected, actual, atol, rtol)}")
    # A figure that cannot be computed (values overflow float64) fails its check rather than passing.
    if tolerance.min_cosine is not None and (cos is None or cos < float(tolerance.min_cosine)):
        problems.append(f"output {name!r}: cosine similarity {'not computable' if cos is None else f'{cos:.6f}'} "
                        f"< min_cosine {tolerance.min_cosine}")
    if tolerance.min_snr_db is not None and (snr is None or snr < float(tolerance.min_snr_db)):
        problems.append(f"output {name!r}: SNR {'not computable' if snr is None else f'{snr:.1f} dB'} "
                        f"< min_snr_db {tolerance.min_snr_db}")
    if tolerance.topk_agreement is not None:
        if top is None:
            problems.append(f"output {name!r}: top-1 agreement needs a last axis of classes")
        elif top < float(tolerance.topk_agreement):
            problems.append(f"output {name!r}: top-1 agreement {top:.3f} < topk_agreement "
                            f"{tolerance.topk_agreement}")
    return OutputComparison(name, max_abs, max_rel, cos, snr, top, problems)


def resolve_tolerance(defaults: Tolerance, tolerances: Mapping[str, ScopedTolerances] | None,
                      backend: str, output: str) -> Tolerance:
    """Marker-level values, then ``tolerances[output]``, ``tolerances[backend]``, and
    ``tolerances[backend][output]``, each overriding the one before; a None in a layer switches its
    keyword off (``{"atol": None, "rtol": None}``: no element-wise check there)."""
    tolerances = tolerances or {}
    resolved = defaults
    for scope in (tolerances.get(output), tolerances.get(backend)):
        if scope is not None:
            resolved = scope.own.over(resolved)
    backend_scope = tolerances.get(backend)
    if backend_scope is not None and output in backend_scope.outputs:
        resolved = backend_scope.outputs[output].over(resolved)
    return resolved


def worst(values: Iterable[float | None], pick: Callable[[list[float]], float]) -> float | None:
    """``pick`` (max, or min for a similarity) of the figures that were computed; None where none was."""
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def summarize(comparisons: list[OutputComparison]) -> dict[str, float | None]:
    """The record's ``accuracy`` figures: worst over all outputs and cases."""
    return {
        "max_abs_err": worst([c.max_abs_err for c in comparisons], max),
        "max_rel_err": worst([c.max_rel_err for c in comparisons], max),
        "cosine": worst([c.cosine for c in comparisons], min),
        "snr_db": worst([c.snr_db for c in comparisons], min),
    }
