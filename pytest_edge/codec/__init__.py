"""One codec between the package's dataclasses and JSON (docs/architecture.md, "The codec").

``to_json(obj)`` writes a value JSON can carry: a dataclass as an object of its fields by name, an
enum as its value, a tuple as a list, a NumPy array unchanged (the worker's frame codec carries
arrays), None as null. ``from_json(cls, data, where)`` reads one back as ``cls``, driven by the
dataclass's type hints; what does not fit (a missing field, a wrong type, an unknown enum value) is
one ``ValueError`` (or the boundary's own ``error``) naming ``where`` and the dotted field path:
``a report's record: coverage.total_ops: expected an integer, got 'x'``. Keys the class does not
know are ignored (a report of another version), or kept in the field a :func:`layout` names. A
class a layout marks ``lenient`` (a stored block kept for the gate to judge) reads anything: a
missing key, or a value that does not fit, is the field's default.

Where a format differs from the attribute (a renamed key, a rounded float, a key left out when
empty) a field says so in its metadata (:func:`json_field`); where it writes more than its fields
(a computed figure) or in another order, the class says so (:func:`layout`). Each class's plan is
built once and cached. The readers of each type hint are :mod:`pytest_edge.codec.readers`; this
module declares formats, encodes, and reads a dataclass by its plan. A leaf, as its readers are: no
third-party import (a worker runs it on a device's own Python), NumPy only where a hint names an
array, nothing of the package outside ``codec``.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .readers import Invalid, Reader, finite, join, read_dataclasses_with, reader, shown

T = TypeVar("T")
_META = "pytest_edge.codec"
_LAYOUT = "__json_layout__"


class FieldFormat:
    """How one field is written and read, where not as its type says (:func:`json_field`). A plain
    class, not a dataclass: the codec's own import stays under a millisecond."""

    __slots__ = ("key", "encode", "decode", "omit", "skip", "finite")

    def __init__(self, key: str | None = None, encode: Callable[[Any], Any] | None = None,
                 decode: Callable[[Any], Any] | None = None, omit: Callable[[Any], bool] | None = None,
                 skip: bool = False, finite: bool = False) -> None:
        self.key = key  # the JSON key, where it is not the attribute's name
        self.encode = encode  # attribute -> JSON (a rounded float, a sentence)
        self.decode = decode  # JSON -> attribute; a ValueError says why not (the path is added)
        self.omit = omit  # the key is left out where this holds of the value
        self.skip = skip  # neither written nor read (a block the report keeps elsewhere)
        self.finite = finite  # a number that must be finite (NaN and infinities refused)


def json_field(*, key: str | None = None, encode: Callable[[Any], Any] | None = None,
               decode: Callable[[Any], Any] | None = None, omit: Callable[[Any], bool] | None = None,
               skip: bool = False, finite: bool = False, **field_args: Any) -> Any:
    """``dataclasses.field(**field_args)`` with the field's JSON format in its metadata."""
    return dataclasses.field(metadata={_META: FieldFormat(key, encode, decode, omit, skip, finite)}, **field_args)


def _is_none(value: Any) -> bool:
    return value is None


def optional(**format_args: Any) -> Any:
    """A field that defaults to None and whose key is written only where it is not None: a figure
    a block has only where it was measured, a key a stored block had only where its writer wrote it
    (read back, it is written back the same)."""
    return json_field(default=None, omit=_is_none, **format_args)


def omitted(f: "dataclasses.Field[Any]", value: Any) -> bool:
    """Whether ``f``'s format leaves ``value`` out (:func:`optional`'s None): for a writer of a
    dataclass's fields that is not :func:`to_json` (the worker's requests)."""
    spec = f.metadata.get(_META)
    return spec is not None and spec.omit is not None and spec.omit(value)


class Layout:
    """A class's keys beyond and around its fields, and how strictly it is read (:func:`layout`)."""

    __slots__ = ("order", "computed", "rest", "lenient")

    def __init__(self, order: tuple[str, ...] = (), computed: Mapping[str, Callable[[Any], Any]] | None = None,
                 rest: str | None = None, lenient: bool = False) -> None:
        self.order = order  # the keys in the order written (fields' and computed ones), where not the fields'
        self.computed = dict(computed or {})  # written, never read
        self.rest = rest  # a dict field that takes the keys no field names, written back flat
        self.lenient = lenient  # a missing key or a value that does not fit: the field's default, never an error


def layout(*, order: Sequence[str] = (), computed: Mapping[str, Callable[[Any], Any]] | None = None,
           rest: str | None = None, lenient: bool = False) -> Callable[[type[T]], type[T]]:
    """A class decorator (above ``@dataclass``): keys computed from the object (written after the
    fields unless ``order`` places them; ignored when read), the written order, the field that
    keeps unknown keys, and ``lenient``: a stored block read as far as it fits (a key missing, a
    value of another type, or no object at all: the field's default; every field has one)."""
    def mark(cls: type[T]) -> type[T]:
        setattr(cls, _LAYOUT, Layout(tuple(order), dict(computed or {}), rest, lenient))
        return cls
    return mark


@layout(rest="unknown", lenient=True)
@dataclasses.dataclass(frozen=True)
class StoredBlock:
    """A block of a stored record (a report's, a baseline's, the history's): read ``lenient`` (a
    key missing or of another type: the field's default), and another version's keys kept in
    ``unknown`` and written back after the block's own, so a report read and written again is the
    same JSON. A subclass is a frozen dataclass of its fields; ``unknown`` is keyword-only, so the
    fields keep their places in ``__init__``."""

    unknown: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True)


# ------------------------------------------------------------------ encoding

_PLAIN = (str, int, float, bool, type(None))


def to_json(obj: Any) -> Any:
    """``obj`` as JSON can carry it: dataclasses by field name (their formats applied), enums by
    value, tuples as lists, dicts and lists element by element; arrays and plain values unchanged."""
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    if kind is list or kind is tuple:
        return [to_json(item) for item in obj]
    if kind is dict:
        return {key: to_json(value) for key, value in obj.items()}
    plan = _plans.get(kind)
    if plan is None and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        plan = _plan(kind)
    if plan is not None:
        return plan.encode(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [to_json(item) for item in obj]
    if isinstance(obj, Mapping):
        return {key: to_json(value) for key, value in obj.items()}
    return obj  # an array, a NumPy scalar, anything the frame codec or json takes as it is


# ------------------------------------------------------------------ decoding

def from_json(cls: type[T], data: Any, where: str, *, error: type[Exception] = ValueError,
              given: Mapping[str, Any] | None = None) -> T:
    """``data`` (decoded JSON) read as ``cls``, a dataclass or any type :func:`reader` knows;
    ``error`` (ValueError unless the boundary has its own) naming ``where`` and the field's path
    for anything that does not fit. ``given``: the values of a dataclass's fields the JSON does not
    hold (``skip`` ones: a reply's request, a block the report keeps elsewhere)."""
    try:
        if given is not None:
            return _plan(cls).decode(data, given)
        return reader(cls)(data)
    except Invalid as exc:
        raise error(f"{where}: {exc.path}: {exc.message}" if exc.path else f"{where}: {exc.message}") from None
    except RecursionError:  # a type nested deeper than the stack: said, not raised raw
        raise error(f"{where}: nested too deeply") from None


# ------------------------------------------------------------------ a class's plan

class _Field:
    __slots__ = ("name", "key", "read", "required", "encode", "omit", "default")

    def __init__(self, name: str, key: str, read: Reader, required: bool, encode: Callable[[Any], Any] | None,
                 omit: Callable[[Any], bool] | None, default: Callable[[], Any] | None = None) -> None:
        self.name, self.key, self.read, self.required, self.encode, self.omit = name, key, read, required, encode, omit
        self.default = default  # a lenient class's: the value where the JSON's does not fit


class _Plan:
    """What one dataclass's fields are, read once: encode and decode walk this, not the hints."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        shape: Layout = getattr(cls, _LAYOUT, None) or Layout()  # its own, or a StoredBlock's
        hints = typing.get_type_hints(cls)  # resolves ``from __future__ import annotations``
        self.fields: list[_Field] = []
        self.rest = shape.rest
        self.computed = dict(shape.computed)
        self.lenient = shape.lenient
        for f in dataclasses.fields(cls):
            spec: FieldFormat = f.metadata.get(_META) or FieldFormat()
            if spec.skip or not f.init or f.name == shape.rest:
                continue
            read = _own(spec.decode) if spec.decode is not None else reader(hints[f.name])
            if spec.finite:
                read = finite(read)
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
            if required and self.lenient:  # a programming error, met at the class's first read or write
                raise TypeError(f"pytest_edge.codec: {cls.__name__}.{f.name} has no default, which a lenient "
                                "class reads where the JSON's value does not fit")
            self.fields.append(_Field(f.name, spec.key or f.name, read, required, spec.encode, spec.omit,
                                      _default_of(f) if self.lenient else None))
        self.required = [f.key for f in self.fields if f.required]
        self.known = {f.key for f in self.fields} | set(self.computed)
        written = [f.key for f in self.fields] + [k for k in self.computed if k not in {f.key for f in self.fields}]
        self.order = list(shape.order) + [k for k in written if k not in shape.order]

    def encode(self, obj: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for f in self.fields:
            value = getattr(obj, f.name)
            if f.omit is not None and f.omit(value):
                continue
            found[f.key] = f.encode(value) if f.encode is not None else to_json(value)
        for key, compute in self.computed.items():
            found[key] = compute(obj)
        if self.order and list(found) != self.order:
            found = {key: found[key] for key in self.order if key in found}
        if self.rest is not None:
            found.update(to_json(getattr(obj, self.rest)))
        return found

    def decode(self, data: Any, given: Mapping[str, Any] | None = None) -> Any:
        if _imported_again(data, self.cls):
            data = to_json(data)
        if self.lenient:
            return self.lenient_decode(data, given)
        if type(data) is not dict and not isinstance(data, Mapping):
            missing = f"no {', '.join(self.required)}: " if self.required else ""
            raise Invalid("", f"{missing}expected an object, got {shown(data)}")
        missing = [key for key in self.required if key not in data]
        if missing:
            raise Invalid("", f"no {', '.join(missing)}")
        values: dict[str, Any] = {}
        for f in self.fields:
            if f.key not in data:
                continue
            try:
                values[f.name] = f.read(data[f.key])
            except Invalid as exc:
                raise Invalid(join(f.key, exc.path), exc.message) from None
        if self.rest is not None:
            values[self.rest] = {k: v for k, v in data.items() if k not in self.known}
        if given:
            values.update(given)
        return self.cls(**values)

    def lenient_decode(self, data: Any, given: Mapping[str, Any] | None = None) -> Any:
        """What fits of ``data``, each field that does not (or is missing) at its default; never raises
        Invalid (a value that is no object: the class's defaults)."""
        if _imported_again(data, self.cls):
            data = to_json(data)
        values: dict[str, Any] = {}
        mapping = type(data) is dict or isinstance(data, Mapping)
        for f in self.fields:
            if mapping and f.key in data:
                try:
                    values[f.name] = f.read(data[f.key])
                    continue
                except Invalid:
                    pass
            values[f.name] = f.default()  # type: ignore[misc]
        if self.rest is not None:
            values[self.rest] = {k: v for k, v in data.items() if k not in self.known and isinstance(k, str)} \
                if mapping else {}
        if given:
            values.update(given)
        return self.cls(**values)


def _imported_again(data: Any, cls: type) -> bool:
    """``data`` is an instance of ``cls`` as another import of its module made it: pytester restores
    ``sys.modules`` after an in-process run, and a module imported again makes new classes. Read
    from its JSON, not as "no object" (which a lenient class would take for its defaults)."""
    kind = type(data)
    return kind is not cls and kind.__qualname__ == cls.__qualname__ and kind.__module__ == cls.__module__ \
        and dataclasses.is_dataclass(kind)


def _default_of(f: dataclasses.Field) -> Callable[[], Any]:  # type: ignore[type-arg]
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory  # type: ignore[misc,return-value]
    value = f.default
    return lambda: value


def _own(decode: Callable[[Any], Any]) -> Reader:
    # A field's own decode says what is wrong with a ValueError; the plan adds the path.
    def read(value: Any) -> Any:
        try:
            return decode(value)
        except Invalid:
            raise
        except (ValueError, TypeError) as exc:
            raise Invalid("", str(exc)) from None
    return read


_plans: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    found = _plans.get(cls)
    if found is None:
        found = _plans[cls] = _Plan(cls)
    return found


read_dataclasses_with(lambda cls: _plan(cls).decode)


__all__ = ["FieldFormat", "Layout", "StoredBlock", "from_json", "json_field", "layout", "omitted", "optional", "reader", "to_json"]
