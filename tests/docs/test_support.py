"""The test suite's own helpers do what the tests rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.checks import every
from tests.support.tiers import SLOW


def test_every_fails_on_nothing_where_all_would_pass() -> None:
    assert all([]) and every([True, 1])
    assert not every(x > 1 for x in (3, 1))
    with pytest.raises(AssertionError, match="nothing to check"):
        every(x for x in ())


def test_each_slow_entry_names_tests_that_exist() -> None:
    """A mistyped entry in the slow table would leave its tests in the quick tier, unnoticed."""
    root = Path(__file__).resolve().parents[2]
    for prefix, why in SLOW.items():
        path, _, name = prefix.partition("::")
        assert why and (root / path).is_file(), prefix
        if name:
            assert f"def {name.partition('[')[0]}" in (root / path).read_text(encoding="utf-8"), prefix
