"""The token drill-down wraps between its phrases, never inside a formula: "min(1, p_target/p_draft)
0.828" and "TV spent 0.100" stay whole with their values, on a wide terminal and on a narrow one,
where the drill-down narrows beside the tape rather than running under the controls (and scrolls
to the lines its box has no rows for)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from specplay.engine.events import DraftPosition
from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.ui.app import PlaygroundApp
from specplay.ui.phrased import lines_of, phrases, prose
from specplay.ui.widgets.inspector import Inspector, InspectorBox
from specplay.ui.widgets.lane_view import LaneView
from tests.support.prompts import CODE_PROMPT
from tests.support.scripted import scripted_backend
from tests.support.ui_helpers import every_row, scripted_app, wait_for

SAMPLED = SpecSettings(k=4, route="near", rule_params=RuleParams(tv_budget=0.1), sampling=SamplingParams(0.7))
"""As the drill-down's snapshot: the TV budget adds the line of what the rule kept and spent."""


def _formulas(position: DraftPosition) -> list[str]:
    """The drill-down's numbers with what they are, in the order it shows them."""
    ratio = min(1.0, position.p_target / position.p_draft)
    assert position.accept_probability is not None and position.tv_spent is not None
    return [
        f"p_target(x) {position.p_target:.3f}",
        f"p_draft(x) {position.p_draft:.3f}",
        f"u {position.uniform:.3f}",
        f"min(1, p_target/p_draft) {ratio:.3f}",
        f"d = TV {position.tv_distance:.3f}",
        f"θ {position.theta:.3f}",
        f"probability {position.accept_probability:.3f}",
        f"TV spent {position.tv_spent:.3f}",
    ]


async def _pick_a_kept_draft(app: PlaygroundApp, pilot: Pilot[None]) -> DraftPosition:
    """Picks the first drafted token the rule kept with a probability (and says what it spent)."""
    lane = app.query_one("#speculative", LaneView)
    for pick in lane.picks:
        if pick.round is None or pick.slot >= len(pick.round.positions):
            continue
        position = pick.round.positions[pick.slot]
        if position.accept_probability is not None and position.tv_spent is not None and position.p_draft > 0:
            lane.select(pick.index)
            await pilot.pause()
            return position
    raise AssertionError("no drafted token kept by the rule")


@pytest.mark.parametrize("size", [(160, 50), (100, 50), (80, 50)])
async def test_a_formula_is_kept_whole_with_its_value(tmp_path: Path, size: tuple[int, int]) -> None:
    """Every formula, drawn whole, the drill-down scrolled from its top to its end (at 80 columns
    the last formulas are below its box's 12 rows)."""
    app = scripted_app(
        scripted_backend(drafters=("near", "far")),
        tmp_path,
        settings=SAMPLED,
        prompt=CODE_PROMPT,
        autorun=True,
        max_tokens=24,
        raw=True,
        seed=1,
    )
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the run to end")
        position = await _pick_a_kept_draft(app, pilot)
        inspector, box, side = app.query_one(Inspector), app.query_one(InspectorBox), app.query_one("#side")
        assert box.region.right <= side.region.x  # beside the controls, not under them
        width = inspector.content_size.width
        assert box.max_scroll_y > 0  # its top-5 table below the box's rows: read scrolled
        rows = await every_row(pilot, box)
        assert all(len(row) <= width for row in rows)
        for formula in _formulas(position):
            assert any(formula in row for row in rows), (formula, width, "\n".join(rows))
        if width < len("u 0.000  min(1, p_target/p_draft) 0.000"):  # the line breaks between its two formulas
            assert f"u {position.uniform:.3f}" in rows


def test_a_line_breaks_between_formulas_and_keeps_an_indent() -> None:
    line = phrases("u 0.828", "min(1, p_target/p_draft) 1.000")
    assert lines_of(line).wrap(39) == ["u 0.828  min(1, p_target/p_draft) 1.000"]
    assert lines_of(line).wrap(38) == ["u 0.828", "min(1, p_target/p_draft) 1.000"]
    # a table's row: its indent stays, and its padding may run past the width
    assert lines_of(("  ‹e›  0.003",)).wrap(20) == ["  ‹e›  0.003"]
    assert lines_of(phrases(f"{'top p_target':<22}", f"{'top p_draft':<22}")).wrap(45) == [
        f"{'top p_target':<22}  {'top p_draft':<22}"
    ]


def test_prose_keeps_a_call_with_its_arguments() -> None:
    assert prose("u < min(1, p_target/p_draft): kept") == ("u", " <", " min(1, p_target/p_draft):", " kept")
    assert lines_of(prose("u < min(1, p_target/p_draft): kept")).wrap(30) == ["u < min(1, p_target/p_draft):", "kept"]
    # a parenthesis that opens a word is an aside, broken as prose is
    assert prose("(per-token acceptance α 0.88,")[:2] == ("(per-token", " acceptance")
