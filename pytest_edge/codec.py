"""One codec between the package's dataclasses and JSON (docs/architecture.md, "The codec").

``to_json(obj)`` writes a value JSON can carry: a dataclass as an object of its fields by name, an
enum as its value, a tuple as a list, a NumPy array unchanged (the worker's frame codec carries
arrays), None as null. ``from_json(cls, data, where)`` reads one back as ``cls``, driven by the
dataclass's type hints; what does not fit (a missing field, a wrong type, an unknown enum value) is
one ``ValueError`` (or the boundary's own ``error``) naming ``where`` and the dotted field path:
``a report's record: coverage.total_ops: expected an integer, got 'x'``. Keys the class does not
know are ignored (a report of another version), or kept in the field a :func:`layout` names.

Where a format differs from the attribute (a renamed key, a rounded float, a key left out when
empty) a field says so in its metadata (:func:`json_field`); where it writes more than its fields
(a computed figure) or in another order, the class says so (:func:`layout`). Each class's plan is
built once and cached. A leaf: no third-party import (a worker runs it on a device's own Python),
NumPy only where a hint names an array.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

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


class Layout:
    """A class's keys beyond and around its fields (:func:`layout`)."""

    __slots__ = ("order", "computed", "rest")

    def __init__(self, order: tuple[str, ...] = (), computed: Mapping[str, Callable[[Any], Any]] | None = None,
                 rest: str | None = None) -> None:
        self.order = order  # the keys in the order written (fields' and computed ones), where not the fields'
        self.computed = dict(computed or {})  # written, never read
        self.rest = rest  # a dict field that takes the keys no field names, written back flat


def layout(*, order: Sequence[str] = (), computed: Mapping[str, Callable[[Any], Any]] | None = None,
           rest: str | None = None) -> Callable[[type[T]], type[T]]:
    """A class decorator (above ``@dataclass``): keys computed from the object (written after the
    fields unless ``order`` places them; ignored when read), the written order, and the field that
    keeps unknown keys."""
    def mark(cls: type[T]) -> type[T]:
        setattr(cls, _LAYOUT, Layout(tuple(order), dict(computed or {}), rest))
        return cls
    return mark


class _Invalid(Exception):
    """A value that does not fit, with the path below the point that raised it."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message


_repr = reprlib.Repr()  # bounded in depth and length: a hostile value's repr is neither deep nor long
_repr.maxlevel, _repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict = 3, 40, 40, 4, 4


def _shown(value: Any) -> str:
    text = _repr.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, below: str) -> str:
    if not below:
        return path
    return path + below if below.startswith("[") else f"{path}.{below}"


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

Reader = Callable[[Any], Any]  # raises _Invalid


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
    except _Invalid as exc:
        raise error(f"{where}: {exc.path}: {exc.message}" if exc.path else f"{where}: {exc.message}") from None
    except RecursionError:  # a type nested deeper than the stack: said, not raised raw
        raise error(f"{where}: nested too deeply") from None


_readers: dict[Any, Reader] = {}


def reader(hint: Any) -> Reader:
    """The cached reader of one type hint."""
    try:
        return _readers[hint]
    except KeyError:
        pass
    except TypeError:  # an unhashable hint: built each time
        return _build(hint)
    found = _readers[hint] = _build(hint)
    return found


def _int(value: Any) -> Any:
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _Invalid("", f"expected an integer, got {_shown(value)}")


def _float(value: Any) -> Any:
    # An int is a float's value (PEP 484) and is kept as written, so a report reads back byte for byte.
    if (type(value) is float or type(value) is int
            or (isinstance(value, (int, float)) and not isinstance(value, bool))):
        return value
    raise _Invalid("", f"expected a number, got {_shown(value)}")


def _str(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise _Invalid("", f"expected a string, got {_shown(value)}")


def _bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise _Invalid("", f"expected true or false, got {_shown(value)}")


def _none(value: Any) -> Any:
    if value is None:
        return None
    raise _Invalid("", f"expected null, got {_shown(value)}")


def _any(value: Any) -> Any:
    return value


def _finite(read: Reader) -> Reader:
    def finite(value: Any) -> Any:
        value = read(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid("", f"expected a finite number, got {value!r}")
        return value
    return finite


_SIMPLE: dict[Any, Reader] = {int: _int, float: _float, str: _str, bool: _bool, type(None): _none, None: _none,
                              Any: _any, object: _any}
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null"}
_UNIONS = (typing.Union, types.UnionType) if sys.version_info >= (3, 10) else (typing.Union,)


def _build(hint: Any) -> Reader:
    if hint in _SIMPLE:
        return _SIMPLE[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        return _union(args)
    if hint in (list, dict, tuple):
        return _container(hint)
    if origin in (list, Sequence):
        return _list(reader(args[0]) if args else _any)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _tuple(reader(args[0]))
        return _fixed_tuple(tuple(reader(a) for a in args))
    if origin in (dict, Mapping):
        return _dict(reader(args[1]) if len(args) == 2 else _any)
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return _plan(hint).decode
        if issubclass(hint, enum.Enum):
            return _enum(hint)
        if hint.__module__ == "numpy" and hint.__name__ == "ndarray":
            return _array(hint)
    raise TypeError(f"pytest_edge.codec: no reader for {hint!r}")  # a programming error, met at the first read


def _union(args: tuple[Any, ...]) -> Reader:
    optional = type(None) in args
    arms = [a for a in args if a is not type(None)]
    if len(arms) == 1:
        only = reader(arms[0])

        def maybe(value: Any) -> Any:
            return None if value is None else only(value)
        return maybe if optional else only
    readers = [reader(a) for a in arms]
    said = " or ".join(_NAMES.get(a, getattr(a, "__name__", str(a))) for a in args)
    # Plain arms (a dimension: int | str | None): one type test, the value kept as it is.
    plain = (set().union(*(_EXACT[r] for r in readers)) | ({type(None)} if optional else set())
             if all(r in _EXACT for r in readers) else set())

    def either(value: Any) -> Any:
        if type(value) in plain or (value is None and optional):
            return value
        for read in readers:
            try:
                return read(value)
            except _Invalid:
                continue
        raise _Invalid("", f"expected {said}, got {_shown(value)}")
    return either


def _container(kind: Any) -> Reader:
    wanted = {list: (list, tuple), tuple: (list, tuple), dict: (Mapping,)}.get(kind, (list, tuple))
    name = "an object" if kind is dict else "a list"

    def plain(value: Any) -> Any:
        if not isinstance(value, wanted):
            raise _Invalid("", f"expected {name}, got {_shown(value)}")
        return dict(value) if kind is dict else (tuple(value) if kind is tuple else list(value))
    return plain


def _items(value: Any, read: Reader) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise _Invalid("", f"expected a list, got {_shown(value)}")
    found = []
    for index, item in enumerate(value):
        try:
            found.append(read(item))
        except _Invalid as exc:
            raise _Invalid(_join(f"[{index}]", exc.path), exc.message) from None
    return found


# Plain element types, checked in one pass (a list of 100 operator names is one comprehension, not
# 100 calls); a list that fails it is read item by item for the message.
_EXACT = {_str: (str,), _int: (int,), _float: (int, float), _bool: (bool,)}


def _list(read: Reader) -> Reader:
    exact = _EXACT.get(read)
    if read is _any:
        return lambda value: list(value) if isinstance(value, (list, tuple)) else _items(value, read)
    if exact is not None:
        def plain(value: Any) -> Any:
            if type(value) is list and all(type(item) in exact for item in value):
                return list(value)
            return _items(value, read)
        return plain
    return lambda value: _items(value, read)


def _tuple(read: Reader) -> Reader:
    listed = _list(read)
    return lambda value: tuple(listed(value))


def _fixed_tuple(readers: tuple[Reader, ...]) -> Reader:
    def fixed(value: Any) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != len(readers):
            raise _Invalid("", f"expected a list of {len(readers)}, got {_shown(value)}")
        found = []
        for index, (read, item) in enumerate(zip(readers, value)):
            try:
                found.append(read(item))
            except _Invalid as exc:
                raise _Invalid(_join(f"[{index}]", exc.path), exc.message) from None
        return tuple(found)
    return fixed


def _dict(read: Reader) -> Reader:
    exact = _EXACT.get(read)

    def mapping(value: Any) -> Any:
        if type(value) is dict:  # the one-pass check first, item by item only for the message
            if read is _any and all(type(k) is str for k in value):
                return dict(value)
            if exact is not None and all(type(k) is str and type(v) in exact for k, v in value.items()):
                return dict(value)
        if not isinstance(value, Mapping):
            raise _Invalid("", f"expected an object, got {_shown(value)}")
        found = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid("", f"expected string keys, got {_shown(key)}")
            try:
                found[key] = read(item)
            except _Invalid as exc:
                raise _Invalid(_join(key, exc.path), exc.message) from None
        return found
    return mapping


def _enum(kind: type[enum.Enum]) -> Reader:
    def member(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        try:
            return kind(value)
        except (ValueError, TypeError):
            known = ", ".join(repr(m.value) for m in kind)
            raise _Invalid("", f"unknown {kind.__name__} {_shown(value)} (known: {known})") from None
    return member


def _array(kind: type) -> Reader:
    def array(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        raise _Invalid("", f"expected an array, got {_shown(value)}")
    return array


# ------------------------------------------------------------------ a class's plan

class _Field:
    __slots__ = ("name", "key", "read", "required", "encode", "omit")

    def __init__(self, name: str, key: str, read: Reader, required: bool, encode: Callable[[Any], Any] | None,
                 omit: Callable[[Any], bool] | None) -> None:
        self.name, self.key, self.read, self.required, self.encode, self.omit = name, key, read, required, encode, omit


class _Plan:
    """What one dataclass's fields are, read once: encode and decode walk this, not the hints."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        shape: Layout = cls.__dict__.get(_LAYOUT) or Layout()
        hints = typing.get_type_hints(cls)  # resolves ``from __future__ import annotations``
        self.fields: list[_Field] = []
        self.rest = shape.rest
        self.computed = dict(shape.computed)
        for f in dataclasses.fields(cls):
            spec: FieldFormat = f.metadata.get(_META) or FieldFormat()
            if spec.skip or not f.init or f.name == shape.rest:
                continue
            read = _own(spec.decode) if spec.decode is not None else reader(hints[f.name])
            if spec.finite:
                read = _finite(read)
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
            self.fields.append(_Field(f.name, spec.key or f.name, read, required, spec.encode, spec.omit))
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
        if type(data) is not dict and not isinstance(data, Mapping):
            missing = f"no {', '.join(self.required)}: " if self.required else ""
            raise _Invalid("", f"{missing}expected an object, got {_shown(data)}")
        missing = [key for key in self.required if key not in data]
        if missing:
            raise _Invalid("", f"no {', '.join(missing)}")
        values: dict[str, Any] = {}
        for f in self.fields:
            if f.key not in data:
                continue
            try:
                values[f.name] = f.read(data[f.key])
            except _Invalid as exc:
                raise _Invalid(_join(f.key, exc.path), exc.message) from None
        if self.rest is not None:
            values[self.rest] = {k: v for k, v in data.items() if k not in self.known}
        if given:
            values.update(given)
        return self.cls(**values)


def _own(decode: Callable[[Any], Any]) -> Reader:
    # A field's own decode says what is wrong with a ValueError; the plan adds the path.
    def read(value: Any) -> Any:
        try:
            return decode(value)
        except _Invalid:
            raise
        except (ValueError, TypeError) as exc:
            raise _Invalid("", str(exc)) from None
    return read


_plans: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    found = _plans.get(cls)
    if found is None:
        found = _plans[cls] = _Plan(cls)
    return found


__all__ = ["FieldFormat", "Layout", "from_json", "json_field", "layout", "reader", "to_json"]
