"""Mutating real JSON for fuzz tests: every place inside a value, and any JSON value to put there."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)


def paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a JSON value, as a path of keys and indices."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, (*path, i))
    return out


def replace_at(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = replace_at(value[head], rest, new)
    return copy


def nested_arrays(depth: int) -> str:
    """JSON text of `depth` arrays inside each other: a parser that recurses runs out of stack."""
    return "[" * depth + "]" * depth
