"""The ``edge`` marker's keywords: validated, with units parsed, before any runtime is touched."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from ..accuracy.compare import STATISTICAL_KEYS, TOLERANCE_KEYS, ScopedTolerances, Tolerance, ToleranceOverride
from ..backends import predicted_targets
from ..checks import EDGE, Finding, budgets_for, budgets_of
from ..errors import EdgeUsageError
from ..units import parse_fraction, parse_int, parse_names, parse_value
from ..measurement.timing import MAX_RUNS


def parse_reference(value: Any, what: str = "reference") -> str:
    """A model name or artifact path (resolved at collection, like ``model``)."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise EdgeUsageError(f"{what}: expected a model name or an artifact path, got {value!r}")
    return value.strip()


@dataclass
class MarkerSpec:
    """Everything one ``@pytest.mark.edge(...)`` asks for, in canonical units (ms, MB, fraction)."""

    model: str | None = None
    backends: list[str] | None = None
    skip_backends: list[str] = field(default_factory=list)
    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    min_snr_db: float | None = None
    topk_agreement: float | None = None
    tolerances: dict[str, ScopedTolerances] = field(default_factory=dict)  # tolerances=, by scope (output or backend)
    target: str | None = None
    warmup: int | None = None
    runs: int | None = None
    threads: int | None = None
    inputs: Any = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Another model (name or artifact path) whose golden this test's artifact is checked against.
    reference: str | None = None
    # The budgets this marker sets, by keyword: rows of checks.BUDGETS (those of EDGE), parsed by the
    # row's own parser in canonical units; a row is the one place a budget is spelled
    # (``budget(keyword)``), so adding one is adding a row. A number, or names (allowed_cpu_ops).
    budget_values: dict[str, float | tuple[str, ...]] = field(default_factory=dict)
    # Where a target that quantizes at load (rknn's -int8) takes its calibration cases: an .npz of one
    # case or a folder of them, relative to the test's folder (run/calibration.py); None: the golden's cases.
    calibration: str | None = None

    def budget(self, keyword: str) -> float | tuple[str, ...] | None:
        """The value this marker gives the budget ``keyword`` (a row of checks.BUDGETS); None: not set."""
        if keyword not in BUDGET_KEYWORDS:
            raise KeyError(f"{keyword!r} is no budget of the edge marker")
        return self.budget_values.get(keyword)

    @property
    def needs_measurement(self) -> bool:
        return any(self.budget(budget.keyword) is not None for budget in budgets_for(EDGE) if budget.measured)

    def budgets(self, check: Callable[..., list[Finding]]) -> dict[str, float | None]:
        """This marker's budgets that ``check`` judges (a check of :mod:`pytest_edge.checks`)."""
        return budgets_of(check, self.budget)

    @property
    def names_tolerance(self) -> bool:
        """Whether the marker itself sets any tolerance (keywords or ``tolerances=``)."""
        return bool(self.tolerances) or any(getattr(self, key) is not None for key in TOLERANCE_KEYS)

    @property
    def statistical_only(self) -> bool:
        """Whether the marker names statistical checks (min_cosine, min_snr_db, topk_agreement) and
        no element-wise tolerance, neither as keywords nor in ``tolerances=``."""
        return (not self.tolerances and self.atol is None and self.rtol is None
                and any(getattr(self, key) is not None for key in STATISTICAL_KEYS))


BUDGET_KEYWORDS = tuple(budget.keyword for budget in budgets_for(EDGE))
KEYWORDS = tuple(f.name for f in fields(MarkerSpec) if f.name != "budget_values") + BUDGET_KEYWORDS


def parse_marker(args: tuple, kwargs: Mapping[str, Any]) -> MarkerSpec:
    """Build an :class:`MarkerSpec` from the marker's arguments; unknown keywords are errors."""
    unknown = sorted(set(kwargs) - set(KEYWORDS))
    if unknown:
        raise EdgeUsageError(f"unknown edge marker keyword(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(KEYWORDS)}")
    if len(args) > 1 or (args and "model" in kwargs):
        raise EdgeUsageError("the edge marker takes at most one positional argument, the model")
    spec = MarkerSpec()
    model = args[0] if args else kwargs.get("model")
    spec.model = None if model is None else str(model)
    spec.backends = parse_names(kwargs.get("backends"), "backends")
    spec.skip_backends = parse_names(kwargs.get("skip_backends"), "skip_backends") or []
    both = [name for name in spec.skip_backends if name in (spec.backends or [])]
    if both:
        raise EdgeUsageError(f"both backends= and skip_backends= name {', '.join(map(repr, both))}; "
                             "name a backend in one of them")
    for key in ("atol", "rtol", "min_snr_db"):
        if kwargs.get(key) is not None:
            setattr(spec, key, parse_value(kwargs[key], {"": 1.0}, key, ""))
    for key in ("min_cosine", "topk_agreement"):
        if kwargs.get(key) is not None:
            setattr(spec, key, parse_fraction(kwargs[key], key))
    for budget in budgets_for(EDGE):
        if kwargs.get(budget.keyword) is not None:
            spec.budget_values[budget.keyword] = budget.parse(kwargs[budget.keyword], budget.keyword)
    for budget in budgets_for(EDGE):  # a keyword that qualifies a budget means nothing without it
        if budget.qualifies and spec.budget(budget.keyword) is not None and spec.budget(budget.qualifies) is None:
            raise EdgeUsageError(f"{budget.keyword} qualifies {budget.qualifies}, which this marker does not set "
                                 f"(e.g. {budget.qualifies}=0: every other operator on the accelerator)")
    for key, minimum in (("warmup", 0), ("runs", 1), ("threads", 1)):
        if kwargs.get(key) is not None:
            setattr(spec, key, parse_int(kwargs[key], key, minimum))
    if spec.runs is not None and spec.runs > MAX_RUNS:
        raise EdgeUsageError(f"runs: {spec.runs} is more than {MAX_RUNS} timed runs per process; "
                             "to time longer, raise edge_min_time")
    target = kwargs.get("target")
    if target is not None:
        targets = predicted_targets()  # the backends' predicts_targets
        if str(target).lower() not in targets:
            raise EdgeUsageError(f"target: {target!r} is not one of {', '.join(targets)}")
        spec.target = str(target).lower()
    if kwargs.get("reference") is not None:
        spec.reference = parse_reference(kwargs["reference"])
    spec.tolerances = _check_tolerances(kwargs.get("tolerances") or {})
    spec.inputs = _check_inputs(kwargs.get("inputs"))
    spec.shapes = _check_shapes(kwargs.get("shapes") or {})
    if kwargs.get("calibration") is not None:
        if not isinstance(kwargs["calibration"], (str, Path)) or not str(kwargs["calibration"]).strip():
            raise EdgeUsageError(f"calibration: expected the path of an .npz file or a folder of them, got "
                                 f"{kwargs['calibration']!r}")
        spec.calibration = str(kwargs["calibration"])
    return spec


# Elements one input may have: beyond this a typo (an extra digit) would allocate gigabytes
# before any runtime could refuse the shape.
MAX_ELEMENTS = 2**31


def _check_shapes(shapes: Any) -> dict[str, tuple[int, ...]]:
    """{input name: sequence of ints >= 0}; no strings (``"123"`` is not (1, 2, 3)), no floats, no
    bools, and at most MAX_ELEMENTS elements per input. Whether each name is an input of the
    model is checked once the model is loaded (``inputs.check_shapes``)."""
    if not isinstance(shapes, Mapping):
        raise EdgeUsageError(f"shapes: expected {{input name: shape}}, got {shapes!r}")
    checked: dict[str, tuple[int, ...]] = {}
    for name, shape in shapes.items():
        what = f"shapes={{{str(name)!r}: {shape!r}}}"
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise EdgeUsageError(f"{what}: the shape must be a tuple of ints, e.g. (1, 3, 224, 224)")
        dims = []
        for dim in shape:
            try:
                if isinstance(dim, bool):
                    raise TypeError
                dims.append(operator.index(dim))  # ints and NumPy integers, not 2.5 or "3"
            except TypeError:
                raise EdgeUsageError(f"{what}: dimension {dim!r} is not an integer") from None
        negative = [d for d in dims if d < 0]
        if negative:
            raise EdgeUsageError(f"{what}: dimension {negative[0]} of input {str(name)!r} is negative")
        if math.prod(dims) > MAX_ELEMENTS:
            raise EdgeUsageError(f"{what}: input {str(name)!r} would have {math.prod(dims)} elements, "
                                 f"more than {MAX_ELEMENTS}; check the shape for a typo")
        checked[str(name)] = tuple(dims)
    return checked


def _check_inputs(source: Any) -> Any:
    """The kinds ``inputs=`` can be; their contents are checked when the cases are read."""
    if source is None or callable(source) or isinstance(source, (str, Path, Mapping, list, tuple)):
        return source
    raise EdgeUsageError(f"inputs=: expected an .npz path, a dict of arrays, a list of dicts or a "
                         f"callable returning one of those, got {type(source).__name__}")




FRACTION_KEYS = ("min_cosine", "topk_agreement")


def _tolerance_value(key: str, value: Any, what: str) -> float | None:
    """One tolerance, parsed as the marker-level keyword is: atol/rtol/min_snr_db numbers >= 0,
    min_cosine/topk_agreement fractions (0.99 or "99%"); None switches the keyword off in that scope
    (resolve_tolerance drops it), as on edge_llm's tolerances=."""
    if value is None:
        return None
    if key in FRACTION_KEYS:
        return parse_fraction(value, what)
    return parse_value(value, {"": 1.0}, what, "")


def _check_tolerances(tolerances: Any) -> dict[str, ScopedTolerances]:
    """{backend or output: {key: value}} or {backend: {output: {key: value}}}; typos are errors.
    Values are parsed here (so ``{"atol": "loose"}`` fails at collection, not mid-comparison) and
    kept as floats."""
    shape = "tolerances: expected {backend or output: {atol: ..., rtol: ...}}"
    if not isinstance(tolerances, Mapping):
        raise EdgeUsageError(f"{shape}; got {tolerances!r}")
    checked: dict[str, ScopedTolerances] = {}
    for scope, entry in tolerances.items():
        if not isinstance(scope, str):
            raise EdgeUsageError(f"{shape}; the key {scope!r} is not a backend or output name")
        if not isinstance(entry, Mapping):
            raise EdgeUsageError(f"{shape}; got {scope!r}: {entry!r}")
        unknown = [key for key, value in entry.items()
                   if not isinstance(value, Mapping) and key not in TOLERANCE_KEYS]
        unknown += [inner for value in entry.values() if isinstance(value, Mapping)
                    for inner in value if inner not in TOLERANCE_KEYS]
        if unknown:
            raise EdgeUsageError(f"tolerances[{scope!r}]: unknown key(s) {', '.join(map(repr, unknown))}; "
                                 f"known: {', '.join(TOLERANCE_KEYS)}")
        own: dict[str, float | None] = {}
        outputs: dict[str, ToleranceOverride] = {}
        for key, value in entry.items():
            if isinstance(value, Mapping):  # {backend: {output: {...}}}
                outputs[str(key)] = _override({k: _tolerance_value(k, v, f"tolerances[{scope!r}][{key!r}].{k}")
                                               for k, v in value.items()})
            else:
                own[key] = _tolerance_value(key, value, f"tolerances[{scope!r}].{key}")
        checked[scope] = ScopedTolerances(_override(own), outputs)
    return checked


def _override(parsed: Mapping[str, float | None]) -> ToleranceOverride:
    """One scope's parsed keywords: a value sets one, None switches it off there."""
    return ToleranceOverride(Tolerance(**{key: value for key, value in parsed.items() if value is not None}),
                             frozenset(key for key, value in parsed.items() if value is None))
