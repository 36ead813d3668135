"""Every JSON file specplay writes is JSON: NaN and infinities (a diverged loss, an empty mean)
become null instead of the bare NaN that JSON readers refuse."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from specplay.fidelity.measure import write_report
from specplay.files.json_text import dump_json

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=10,
)


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@given(VALUES, st.sampled_from([None, 1, 2]))
def test_dump_json_is_always_strict_json_with_non_finite_numbers_as_null(value: Any, indent: int | None) -> None:
    assert _strict(dump_json(value, indent=indent)) == _finite(value)


def test_a_report_holding_nan_is_written_as_json(tmp_path: Path) -> None:
    path = write_report({"tv": [0.5, float("nan")], "speedup": float("inf"), "kl": -math.inf}, tmp_path / "r.json")
    assert _strict(path.read_text()) == {"tv": [0.5, None], "speedup": None, "kl": None}
