"""pytest_edge.codec: the one dataclass <-> JSON codec. Round trips (hypothesis), every supported
type, the formats a field or class declares, and hostile input: always one ValueError (or the
boundary's error) naming where and the field's dotted path, never a raw TypeError or KeyError."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_edge import codec
from pytest_edge.errors import BackendError


class Colour(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@dataclass(frozen=True)
class Inner:
    total_ops: int
    ratio: float | None = None


@dataclass
class Outer:
    name: str
    inner: Inner
    inners: list[Inner] = field(default_factory=list)
    shape: tuple[int | str | None, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    colour: Colour = Colour.RED
    level: Level | None = None
    flag: bool = False
    anything: Any = None
    pair: tuple[str, int] | None = None


@codec.layout(order=("bee", "sum", "a"), computed={"sum": lambda o: o.a + o.b})
@dataclass
class Shaped:
    a: int
    b: int = codec.json_field(key="bee")
    cache: dict[str, float] | None = codec.json_field(default=None, omit=lambda v: not v)
    rounded: float = codec.json_field(default=0.0, encode=lambda v: round(v, 2), finite=True)
    elsewhere: str = codec.json_field(default="", skip=True)


@codec.layout(rest="more")
@dataclass
class Open:
    known: int
    more: dict[str, Any] = field(default_factory=dict)


@dataclass
class WithArray:
    values: np.ndarray
    scaled: np.ndarray | None = codec.json_field(default=None, decode=lambda v: np.asarray(v, np.float32))


def test_round_trip_of_every_type() -> None:
    value = Outer("n", Inner(3, 0.5), [Inner(1), Inner(2, 2)], (1, "h", None), {"a": 1}, Colour.BLUE, Level.HIGH,
                  True, {"free": [1, {"x": None}]}, ("p", 4))
    data = codec.to_json(value)
    assert data == {"name": "n", "inner": {"total_ops": 3, "ratio": 0.5},
                    "inners": [{"total_ops": 1, "ratio": None}, {"total_ops": 2, "ratio": 2}],
                    "shape": [1, "h", None], "counts": {"a": 1}, "colour": "blue", "level": 2, "flag": True,
                    "anything": {"free": [1, {"x": None}]}, "pair": ["p", 4]}
    assert json.loads(json.dumps(data)) == data
    assert codec.from_json(Outer, json.loads(json.dumps(data)), "here") == value


def test_defaults_fill_missing_optional_fields_and_unknown_keys_are_ignored() -> None:
    assert codec.from_json(Outer, {"name": "n", "inner": {"total_ops": 1}, "newer": 1}, "x") == Outer("n", Inner(1))


def test_a_float_takes_an_int_as_written() -> None:
    found = codec.from_json(Inner, {"total_ops": 1, "ratio": 2}, "x")
    assert found.ratio == 2 and type(found.ratio) is int  # written back byte for byte


@pytest.mark.parametrize("data, message", [
    ({"name": "n", "inner": {"total_ops": "x"}}, "where: inner.total_ops: expected an integer, got 'x'"),
    ({"name": "n", "inner": {"total_ops": True}}, "where: inner.total_ops: expected an integer, got True"),
    ({"name": "n", "inner": {"total_ops": 1, "ratio": True}}, "where: inner.ratio: expected a number, got True"),
    ({"name": "n", "inner": {"total_ops": 1, "ratio": "1"}}, "where: inner.ratio: expected a number, got '1'"),
    ({"name": "n", "inner": {}}, "where: inner: no total_ops"),
    ({"inner": {"total_ops": 1}}, "where: no name"),
    ({"name": 3, "inner": {"total_ops": 1}}, "where: name: expected a string, got 3"),
    ({"name": "n", "inner": [1]}, "where: inner: no total_ops: expected an object, got [1]"),
    ({"name": "n", "inner": {"total_ops": 1}, "inners": [{"total_ops": 1}, {"total_ops": None}]},
     "where: inners[1].total_ops: expected an integer, got None"),
    ({"name": "n", "inner": {"total_ops": 1}, "inners": {"a": 1}}, "where: inners: expected a list"),
    ({"name": "n", "inner": {"total_ops": 1}, "shape": [1.5]}, "where: shape[0]: expected an integer or a string or null"),
    ({"name": "n", "inner": {"total_ops": 1}, "counts": {"a": "1"}}, "where: counts.a: expected an integer, got '1'"),
    ({"name": "n", "inner": {"total_ops": 1}, "counts": [1]}, "where: counts: expected an object"),
    ({"name": "n", "inner": {"total_ops": 1}, "colour": "green"},
     "where: colour: unknown Colour 'green' (known: 'red', 'blue')"),
    ({"name": "n", "inner": {"total_ops": 1}, "level": 3}, "where: level: unknown Level 3"),
    ({"name": "n", "inner": {"total_ops": 1}, "level": []}, "where: level: unknown Level"),
    ({"name": "n", "inner": {"total_ops": 1}, "flag": 1}, "where: flag: expected true or false, got 1"),
    ({"name": "n", "inner": {"total_ops": 1}, "pair": ["a"]}, "where: pair: expected a list of 2"),
    ("x" * 1000, "where: no name, inner: expected an object, got 'xxx"),
    (None, "where: no name, inner: expected an object, got None"),
])
def test_hostile_input_is_one_clear_error(data: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        codec.from_json(Outer, data, "where")
    assert type(caught.value) is ValueError and str(caught.value).startswith(message)
    assert len(str(caught.value)) < 200  # the value shown is cut short


def test_the_boundary_chooses_its_error() -> None:
    with pytest.raises(BackendError, match="malformed reply to load: no name"):
        codec.from_json(Outer, {}, "malformed reply to load", error=BackendError)


def test_deep_nesting_is_data_not_recursion() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    assert codec.from_json(Outer, {"name": "n", "inner": {"total_ops": 1}, "anything": deep}, "x").anything is deep
    with pytest.raises(ValueError, match="where: inner: no total_ops: expected an object, got"):
        codec.from_json(Outer, {"name": "n", "inner": deep}, "where")


def test_field_and_class_formats() -> None:
    value = Shaped(1, 2, None, 1.23456, "not written")
    data = codec.to_json(value)
    assert list(data.items()) == [("bee", 2), ("sum", 3), ("a", 1), ("rounded", 1.23)]
    assert codec.from_json(Shaped, data, "x") == Shaped(1, 2, None, 1.23)
    assert codec.to_json(Shaped(1, 2, {"r": 1.0}))["cache"] == {"r": 1.0}
    with pytest.raises(ValueError, match="where: rounded: expected a finite number, got nan"):
        codec.from_json(Shaped, {"a": 1, "bee": 2, "rounded": math.nan}, "where")
    with pytest.raises(ValueError, match="where: no bee"):
        codec.from_json(Shaped, {"a": 1, "b": 2}, "where")


def test_unknown_keys_kept_where_the_class_keeps_them() -> None:
    found = codec.from_json(Open, {"known": 1, "later": [1], "also": None}, "x")
    assert found == Open(1, {"later": [1], "also": None})
    assert list(codec.to_json(found)) == ["known", "later", "also"]


def test_arrays_pass_through_and_a_field_decodes_its_own() -> None:
    values = np.arange(4)
    data = codec.to_json(WithArray(values, np.ones(2)))
    assert data["values"] is values
    found = codec.from_json(WithArray, {"values": values, "scaled": [1, 2]}, "x")
    assert found.values is values and found.scaled.dtype == np.float32
    with pytest.raises(ValueError, match="where: values: expected an array, got \\[1\\]"):
        codec.from_json(WithArray, {"values": [1]}, "where")
    with pytest.raises(ValueError, match="where: scaled: could not convert"):
        codec.from_json(WithArray, {"values": values, "scaled": ["x"]}, "where")


# ------------------------------------------------------------------ properties

_text = st.text(max_size=8)
_inner = st.builds(Inner, st.integers(), st.none() | st.floats(allow_nan=False) | st.integers())
_outer = st.builds(Outer, _text, _inner, st.lists(_inner, max_size=3),
                   st.lists(st.integers() | _text | st.none(), max_size=4).map(tuple),
                   st.dictionaries(_text, st.integers(), max_size=3), st.sampled_from(Colour),
                   st.none() | st.sampled_from(Level), st.booleans(),
                   st.recursive(st.none() | st.integers() | _text, lambda c: st.lists(c) | st.dictionaries(_text, c),
                                max_leaves=8),
                   st.none() | st.tuples(_text, st.integers()))


@given(_outer)
def test_round_trip_through_json_text(value: Outer) -> None:
    assert codec.from_json(Outer, json.loads(json.dumps(codec.to_json(value))), "x") == value


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | _text,
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(_text, c, max_size=4), max_leaves=20)


@given(st.dictionaries(st.sampled_from(["name", "inner", "inners", "shape", "counts", "colour", "level", "flag",
                                        "pair", "other"]), _json) | _json)
def test_arbitrary_json_reads_or_is_one_value_error(data: Any) -> None:
    try:
        codec.from_json(Outer, data, "where")
    except ValueError as exc:
        assert str(exc).startswith("where: ")


# ------------------------------------------------------------------ lenient classes (a stored block kept for the gate)

@codec.layout(lenient=True)
@dataclass(frozen=True)
class Process:
    figure: float | None = None
    runs: list[float] | None = None


@codec.layout(lenient=True, order=("tool", "checked", "figure"), computed={"checked": lambda m: False})
@dataclass
class Stored:
    tool: str = ""
    figure: float | None = None
    cache: dict[str, float] | None = codec.json_field(default=None, omit=lambda v: not v)
    processes: tuple[Process, ...] = ()
    inner: Inner | None = None
    elsewhere: str = codec.json_field(default="", skip=True)


def test_a_lenient_class_reads_what_fits_and_defaults_the_rest() -> None:
    value = Stored("t", 1.5, {"r": 2}, (Process(3, [3, 4.0]), Process()), Inner(2, 0.5))
    data = codec.to_json(value)
    assert list(data) == ["tool", "checked", "figure", "cache", "processes", "inner"]
    assert codec.from_json(Stored, json.loads(json.dumps(data)), "x") == value
    assert json.dumps(codec.to_json(codec.from_json(Stored, json.loads(json.dumps(data)), "x"))) == json.dumps(data)
    # missing keys, unknown keys and computed ones: defaults, ignored
    assert codec.from_json(Stored, {"newer": 1, "checked": True}, "x") == Stored()
    # given fields (kept elsewhere) as for any class
    assert codec.from_json(Stored, {}, "x", given={"elsewhere": "e"}).elsewhere == "e"


@pytest.mark.parametrize("data, expected", [
    (None, Stored()),
    ([1, 2], Stored()),
    ("x" * 1000, Stored()),
    ({"tool": 3, "figure": "1.5"}, Stored()),
    ({"tool": "t", "figure": True}, Stored("t")),
    ({"figure": math.inf, "cache": {"r": "x"}}, Stored(figure=math.inf)),
    ({"cache": {1: 2.0}}, Stored()),
    ({"processes": "abc"}, Stored()),
    ({"processes": {"figure": 1}}, Stored()),
    ({"processes": [1, None, {"figure": "x", "runs": [1]}, {"runs": [1, "2"]}]},
     Stored(processes=(Process(), Process(), Process(runs=[1]), Process()))),
    ({"inner": {"total_ops": "x"}, "tool": "kept"}, Stored("kept")),
    ({"inner": {"ratio": 1.0}}, Stored()),  # a strict class inside: what does not fit is its field's default
])
def test_hostile_input_to_a_lenient_class_is_its_defaults_never_an_error(data: Any, expected: Stored) -> None:
    assert codec.from_json(Stored, data, "where") == expected


def test_a_lenient_class_needs_a_default_for_every_field() -> None:
    @codec.layout(lenient=True)
    @dataclass
    class Careless:
        figure: float

    with pytest.raises(TypeError, match="Careless.figure has no default"):
        codec.from_json(Careless, {"figure": 1.0}, "x")


def test_deep_nesting_in_a_lenient_class_is_a_default() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    found = codec.from_json(Stored, {"processes": deep, "inner": deep, "cache": deep, "tool": "t"}, "x")
    assert found == Stored("t", processes=(Process(),))  # a list of one element, which is no process: the defaults


def test_a_dict_of_any_keys_takes_the_frames_keys() -> None:
    @dataclass
    class Ids:
        names: dict[Any, str] = field(default_factory=dict)
        values: dict[Any, np.ndarray] = field(default_factory=dict)

    found = codec.from_json(Ids, {"names": {3: "a", (1, 2): "b"}, "values": {7: np.ones(2)}}, "x")
    assert found.names == {3: "a", (1, 2): "b"} and list(found.values) == [7]
    with pytest.raises(ValueError, match="where: names.3: expected a string, got 4"):
        codec.from_json(Ids, {"names": {3: 4}}, "where")
    with pytest.raises(ValueError, match="where: counts: expected string keys, got 1"):
        codec.from_json(Outer, {"name": "n", "inner": {"total_ops": 1}, "counts": {1: 1}}, "where")


_process = st.builds(Process, st.none() | st.floats(allow_nan=False) | st.integers(),
                     st.none() | st.lists(st.floats(allow_nan=False) | st.integers(), max_size=3))
_stored = st.builds(Stored, _text, st.none() | st.floats(allow_nan=False), st.none() | st.dictionaries(
    _text, st.floats(allow_nan=False), min_size=1, max_size=3), st.lists(_process, max_size=3).map(tuple),
    st.none() | _inner)


@given(_stored)
def test_lenient_round_trip_through_json_text(value: Stored) -> None:
    text = json.dumps(codec.to_json(value))
    back = codec.from_json(Stored, json.loads(text), "x")
    assert back == value and json.dumps(codec.to_json(back)) == text


@given(st.dictionaries(st.sampled_from(["tool", "figure", "cache", "processes", "inner", "other"]), _json) | _json)
def test_arbitrary_json_always_reads_as_a_lenient_class(data: Any) -> None:
    found = codec.from_json(Stored, data, "where")
    assert isinstance(found.processes, tuple) and all(isinstance(p, Process) for p in found.processes)
    assert found.figure is None or isinstance(found.figure, (int, float))
    json.dumps(codec.to_json(found))  # and writes back


def test_an_instance_made_by_another_import_of_its_module_is_read_from_its_json() -> None:
    """pytester restores sys.modules after an in-process run, so a module imported again makes new
    classes of the same name: an instance of the old one, handed on where the new one is read, is
    read from its JSON, never taken for "no object" (a lenient class's defaults)."""
    namespace: dict[str, Any] = {"dataclass": dataclass, "codec": codec, "__name__": __name__}
    source = ("@codec.layout(lenient=True)\n@dataclass\nclass Stored:\n"
              "    count: int | None = None\n    label: str = ''\n")
    exec(source, namespace)  # the first import's class
    again: dict[str, Any] = dict(namespace)
    exec(source, again)  # the same module imported again: a new class of the same name
    old = namespace["Stored"](count=3, label="x")
    assert type(old) is not again["Stored"]
    read = codec.from_json(again["Stored"], old, "a stored block")
    assert (type(read), read.count, read.label) == (again["Stored"], 3, "x")
