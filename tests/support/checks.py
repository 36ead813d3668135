"""Checks over collections that cannot pass on nothing."""

from __future__ import annotations

from collections.abc import Iterable


def every(checks: Iterable[object]) -> bool:
    """`all`, where "all of them" is meant: an empty collection is a failure (the check would
    otherwise pass without checking anything), said as such."""
    checked = 0
    for ok in checks:
        if not ok:
            return False
        checked += 1
    assert checked, "nothing to check: the collection is empty"
    return True
