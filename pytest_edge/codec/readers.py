"""The codec's readers (docs/architecture.md, "The codec"): one reader per type hint, built once and
cached, that checks a decoded JSON value against the hint and returns it as the hint says (a tuple
for ``tuple[...]``, an enum member for an enum, the value as written for a number), or raises
:class:`Invalid` with what is wrong and the path below the point that raised it. The field and class
declarations, encoding and each dataclass's plan are :mod:`pytest_edge.codec`'s; a dataclass hint is
read by the plan that module installs (:func:`read_dataclasses_with`). A leaf: no third-party import
(a worker runs it on a device's own Python), nothing of the package.
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
from typing import Any

class Invalid(Exception):
    """A value that does not fit, with the path below the point that raised it."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message


_repr = reprlib.Repr()  # bounded in depth and length: a hostile value's repr is neither deep nor long
_repr.maxlevel, _repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxdict = 3, 40, 40, 4, 4


def shown(value: Any) -> str:
    text = _repr.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def join(path: str, below: str) -> str:
    if not below:
        return path
    return path + below if below.startswith("[") else f"{path}.{below}"


Reader = Callable[[Any], Any]  # raises Invalid


_readers: dict[Any, Reader] = {}
_dataclass_reader: list[Callable[[type], Reader]] = []  # the plan's (pytest_edge.codec installs it)


def read_dataclasses_with(make: Callable[[type], Reader]) -> None:
    """Read a dataclass hint with ``make(cls)``: the codec's plan of the class (its fields' formats
    are the codec's, not this module's)."""
    _dataclass_reader[:] = [make]


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
    raise Invalid("", f"expected an integer, got {shown(value)}")


def _float(value: Any) -> Any:
    # An int is a float's value (PEP 484) and is kept as written, so a report reads back byte for byte.
    if (type(value) is float or type(value) is int
            or (isinstance(value, (int, float)) and not isinstance(value, bool))):
        return value
    raise Invalid("", f"expected a number, got {shown(value)}")


def _str(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise Invalid("", f"expected a string, got {shown(value)}")


def _bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise Invalid("", f"expected true or false, got {shown(value)}")


def _none(value: Any) -> Any:
    if value is None:
        return None
    raise Invalid("", f"expected null, got {shown(value)}")


def _any(value: Any) -> Any:
    return value


def finite(read: Reader) -> Reader:
    def finite(value: Any) -> Any:
        value = read(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise Invalid("", f"expected a finite number, got {value!r}")
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
        return _dict(reader(args[1]) if len(args) == 2 else _any, any_key=len(args) == 2 and args[0] in (Any, object))
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint) and _dataclass_reader:
            return _dataclass_reader[0](hint)
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
            except Invalid:
                continue
        raise Invalid("", f"expected {said}, got {shown(value)}")
    return either


def _container(kind: Any) -> Reader:
    wanted = {list: (list, tuple), tuple: (list, tuple), dict: (Mapping,)}.get(kind, (list, tuple))
    name = "an object" if kind is dict else "a list"

    def plain(value: Any) -> Any:
        if not isinstance(value, wanted):
            raise Invalid("", f"expected {name}, got {shown(value)}")
        return dict(value) if kind is dict else (tuple(value) if kind is tuple else list(value))
    return plain


def _items(value: Any, read: Reader) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise Invalid("", f"expected a list, got {shown(value)}")
    found = []
    for index, item in enumerate(value):
        try:
            found.append(read(item))
        except Invalid as exc:
            raise Invalid(join(f"[{index}]", exc.path), exc.message) from None
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
            raise Invalid("", f"expected a list of {len(readers)}, got {shown(value)}")
        found = []
        for index, (read, item) in enumerate(zip(readers, value)):
            try:
                found.append(read(item))
            except Invalid as exc:
                raise Invalid(join(f"[{index}]", exc.path), exc.message) from None
        return tuple(found)
    return fixed


def _dict(read: Reader, any_key: bool = False) -> Reader:
    """An object of string keys; ``any_key``: ``dict[Any, ...]``, whose keys may be anything the
    worker's frames carry (a runtime's integer tensor ids)."""
    exact = _EXACT.get(read)

    def mapping(value: Any) -> Any:
        if type(value) is dict:  # the one-pass check first, item by item only for the message
            if read is _any and (any_key or all(type(k) is str for k in value)):
                return dict(value)
            if exact is not None and all((any_key or type(k) is str) and type(v) in exact for k, v in value.items()):
                return dict(value)
        if not isinstance(value, Mapping):
            raise Invalid("", f"expected an object, got {shown(value)}")
        found = {}
        for key, item in value.items():
            if not any_key and not isinstance(key, str):
                raise Invalid("", f"expected string keys, got {shown(key)}")
            try:
                found[key] = read(item)
            except Invalid as exc:
                raise Invalid(join(str(key), exc.path), exc.message) from None
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
            raise Invalid("", f"unknown {kind.__name__} {shown(value)} (known: {known})") from None
    return member


def _array(kind: type) -> Reader:
    def array(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        raise Invalid("", f"expected an array, got {shown(value)}")
    return array


__all__ = ["Invalid", "Reader", "finite", "join", "read_dataclasses_with", "reader", "shown"]
