"""JSON in and out, bounded and valid. Every JSON specplay reads (sessions, server replies, model
configs, its own caches, data files) is parsed by `parse_json`, which refuses nesting deeper than
MAX_DEPTH before the parser recurses; every JSON file it writes is made by `dump_json`, which
writes NaN and infinities as null (bare NaN is not JSON)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from specplay.errors import SpecplayError
from specplay.files.inputs import CONFIG_LIMIT, read_input

MAX_DEPTH = 100
"""Arrays and objects inside each other: real files nest a handful deep; Python's parser recurses."""

_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_EMPTY_PAIRS = re.compile(r"\[\]|\{\}")
_OPEN_RUN = re.compile(r"[\[{]{" + str(MAX_DEPTH + 1) + "}")


class JsonError(SpecplayError, ValueError):
    """Text that is not JSON specplay takes: malformed, or nested deeper than MAX_DEPTH (`deep`)."""

    def __init__(self, message: str, deep: bool = False) -> None:
        super().__init__(message)
        self.deep = deep


def parse_json(text: str | bytes, where: str) -> Any:
    """`text` parsed; `where` names where it came from in the one-line error ("session x line 3")."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode(json.detect_encoding(text))
        except UnicodeDecodeError:
            raise JsonError(f"{where} is not JSON: it is not UTF-8 text") from None
    if _too_deep(text):
        raise _deep(where)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonError(f"{where} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise JsonError(f"{where} is not JSON specplay reads ({exc})") from None
    except RecursionError:  # unbalanced brackets the depth check leaves to the parser
        raise _deep(where) from None


def _deep(where: str) -> JsonError:
    return JsonError(f"{where} nests JSON deeper than {MAX_DEPTH} levels (damaged or hostile)", deep=True)


def read_json(path: Path, what: str, limit: int = CONFIG_LIMIT) -> Any:
    """A JSON file, size-bounded (inputs.read_input) and depth-bounded."""
    return parse_json(read_input(path, what, limit), f"{what} {str(path)!r}")


def dump_json(value: Any, indent: int | None = None, ensure_ascii: bool = True, sort_keys: bool = False) -> str:
    """Valid JSON text of `value`: NaN and infinities become null."""
    return json.dumps(_finite(value), indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _too_deep(text: str) -> bool:
    """Whether `text` nests more than MAX_DEPTH deep, without recursing: strings are dropped, then
    innermost empty pairs are removed one level per pass."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    skeleton = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    if _OPEN_RUN.search(skeleton):
        return True
    for _ in range(MAX_DEPTH):
        skeleton, removed = _EMPTY_PAIRS.subn("", skeleton)
        if not skeleton or not removed:
            return False
    return bool(skeleton)
