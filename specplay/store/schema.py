"""JSON values back into typed records, checked against the types the records declare.

The event and settings dataclasses are the session format's schema: `build(cls, value)` accepts
a value only if it has their shape (a list where a token id belongs, a header without a prompt,
a number that is not finite are all refused) and says where it is wrong. Fields a newer specplay
added are dropped; fields an older one lacked take their defaults.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, TypeVar, Union

from specplay.errors import SpecplayError

T = TypeVar("T")


class SchemaError(SpecplayError):
    """A value that does not have the declared shape; the message says where and what."""


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build(cls: type[T], value: Any, where: str = "") -> T:
    """An instance of dataclass `cls` from JSON `value`, or a SchemaError naming the field."""
    return _convert(cls, value, where or cls.__name__)


def _convert(kind: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if kind is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _convert(option, value, where)
            except SchemaError as error:
                errors.append(str(error))
        raise SchemaError(errors[0] if len(errors) == 1 else f"{where} has none of the allowed shapes")
    if origin is Literal:
        if value not in typing.get_args(kind):
            raise SchemaError(f"{where} is {_show(value)}, not one of {', '.join(map(repr, typing.get_args(kind)))}")
        return value
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(value, list | tuple):
            raise SchemaError(f"{where} is {_show(value)}, not a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
        if len(value) != len(args):
            raise SchemaError(f"{where} holds {len(value)} items, not {len(args)}")
        pairs = enumerate(zip(args, value, strict=True))
        return tuple(_convert(arg, item, f"{where}[{i}]") for i, (arg, item) in pairs)
    if origin is dict or kind is dict:
        if not isinstance(value, dict):
            raise SchemaError(f"{where} is {_show(value)}, not an object")
        key_kind, value_kind = typing.get_args(kind) or (str, Any)
        return {
            _convert(key_kind, key, f"{where} key"): _convert(value_kind, item, f"{where}[{key!r}]")
            for key, item in value.items()
        }
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, value, where)
    if kind is bool:
        if not isinstance(value, bool):
            raise SchemaError(f"{where} is {_show(value)}, not true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{where} is {_show(value)}, not a whole number")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise SchemaError(f"{where} is {_show(value)}, not a finite number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise SchemaError(f"{where} is {_show(value)}, not text")
        return value
    raise TypeError(f"no schema rule for {kind!r}")  # a record type this module does not know yet


def _dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, Mapping):
        raise SchemaError(f"{where} is {_show(value)}, not an object")
    hints = _hints(cls)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in value:
            fields[field.name] = _convert(hints[field.name], value[field.name], f"{where}.{field.name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SchemaError(f"{where} lacks {field.name!r}")
    try:
        return cls(**fields)
    except (ValueError, TypeError) as error:  # the record's own checks (a k of 0, a TV budget of 2)
        raise SchemaError(f"{where}: {error}") from None


def _show(value: Any) -> str:
    """A short description of a wrong value for an error line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
