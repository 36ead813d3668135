"""Token drill-down: what the verifier knew and decided about one token of the speculative lane.

Its lines are made of phrases (ui/phrased.py) and wrap only between them at the width it has: a
formula stays whole with its value ("min(1, p_target/p_draft) 0.456", "TV spent 0.000")."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Static

from specplay.display.source_styles import SOURCE_WHY
from specplay.display.text import token_repr
from specplay.engine.events import Candidate, DraftPosition, RoundEvent, draft_size
from specplay.engine.layout import siblings_under
from specplay.engine.tree import judged_at
from specplay.ui.phrased import Line, phrases, prose, wrap_styled
from specplay.ui.tokens import source_style
from specplay.ui.widgets.lane_view import Pick
from specplay.ui.widgets.scroll_box import ScrollBox

Decode = Callable[[int], str]
Row = tuple[Content, ...]
"""A drill-down line: its phrases, styled."""


def _row(line: Line, style: str = "") -> Row:
    return tuple(Content.styled(phrase, style) if style else Content(phrase) for phrase in line)


def _quote(text: str) -> str:
    return token_repr(text, limit=12)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _tops(target: Sequence[Candidate] | None, draft: Sequence[Candidate] | None, decode: Decode) -> list[Row]:
    """Two columns, a candidate and its probability a phrase: a narrow view puts p_draft's under p_target's."""
    if target is None and draft is None:
        return [_row(prose("top 5: not reported (the run did not inspect, or the backend cannot)"))]
    columns = [list(target or ()), list(draft or ())]
    rows = [_row(phrases(f"{'top p_target':<22}", f"{'top p_draft':<22}"))]
    for i in range(max(map(len, columns))):
        cells = [f"{_quote(decode(c[i][0])):<15} {c[i][1]:.3f}" if i < len(c) else "" for c in columns]
        rows.append(_row(phrases(f"{cells[0]:<22}", cells[1]) if cells[1] else (cells[0],)))
    return rows


def describe(pick: Pick, decode: Decode) -> list[Row]:
    """The drill-down's lines for one picked token."""
    token, round = pick.token, pick.round
    head = (
        Content.styled(_quote(token.text), f"bold {source_style(token.source)}"),
        Content(f"  {token.source} #{pick.index}"),
        Content.assemble("  ", Content.styled(SOURCE_WHY.get(token.source, token.source), "dim")),
    )
    rows: list[Row] = [head]
    if round is None:
        return rows
    asked = f" of {round.k_asked} asked" if round.k_asked is not None and round.k_asked != round.depth else ""
    drafted = f"k={round.depth}{asked}" if round.nodes == round.depth else f"{draft_size(round)}{asked}"
    rows.append(
        _row(phrases(f"round {round.index}", f"route {round.drafter}", drafted, f"accepted {round.num_accepted}"))
    )
    if round.origin is not None:  # the drafter's own word on where its draft came from
        rows.append(_row(prose(f"draft from: {round.origin}"), "italic"))
    position = judged_at(round, pick.slot)
    if position is None and not round.positions and token.source != "bonus":
        rows.append(_row(prose("how its draft was judged is not recorded (a speculating server's round)"), "dim"))
        return rows
    if position is None:  # the bonus: drawn from p_target after the last drafted token
        rows.append(_row((f"p_target(x) {_num(_prob(round.bonus_top_target, token.token_id))}",)))
        return rows + _tops(round.bonus_top_target, None, decode)
    x = position.token_id
    if token.source == "corrected":
        rows.append(_row(prose(f"x = drafted {_quote(decode(x))}, rejected")))
    ratio = position.p_target / position.p_draft if position.p_draft > 0 else float("inf")
    rows.append(_row(phrases(f"p_target(x) {_num(position.p_target)}", f"p_draft(x) {_num(position.p_draft)}")))
    rows.append(_row(phrases(f"u {_num(position.uniform)}", f"min(1, p_target/p_draft) {_num(min(1.0, ratio))}")))
    if position.tv_lower is None:
        tv = f"d = TV {_num(position.tv_distance)}"
    else:  # top-K only: θ comes from the bracket's upper end, so the budget still holds
        tv = f"d = TV in [{_num(position.tv_lower)}, {_num(position.tv_distance)}]"
    rows.append(_row(phrases(tv, f"θ {_num(position.theta)}", f"outcome {position.outcome}")))
    if position.accept_probability is not None:
        spent = f"TV spent {_num(position.tv_spent)}" if position.tv_spent is not None else ""
        rows.append(_row(phrases(f"the rule keeps x with probability {_num(position.accept_probability)}", spent)))
    if position.error_bound is not None:
        bound = f"approximate: this token's distribution within TV {_num(position.error_bound)} of the rule's"
        rows.append(_row(prose(bound)))
    rows += _siblings(round, position, decode)
    return rows + _tops(position.top_target, position.top_draft, decode)


def _siblings(round: RoundEvent, position: DraftPosition, decode: Decode) -> list[Row]:
    """A node's siblings, where it has any, tried in this order: each one's p_target and p_draft
    where they branched, and its fate."""
    node = round.positions.index(position)
    siblings = siblings_under(round.parents, round.parents[node])
    if len(siblings) < 2:
        return []
    rows = [_row((f"{'siblings, in turn':<18}p_target p_draft",))]
    for sibling in siblings:
        at = round.positions[sibling]
        mark = "→ " if sibling == node else "  "
        numbers = f"{at.p_target:>8.3f}{at.p_draft:>8.3f} {at.outcome}"
        rows.append(_row((f"{mark}{_quote(decode(at.token_id)):<16}{numbers}",)))
    return rows


def _prob(top: Sequence[Candidate] | None, token_id: int) -> float | None:
    return next((p for t, p in top or () if t == token_id), None)


class Inspector(Static):
    """The drill-down, wrapped between phrases at the width it has, and again when that changes
    (narrower by the scrollbar's column while its box scrolls)."""

    def __init__(self) -> None:
        super().__init__(self.hint())
        self.pick: Pick | None = None
        self._rows: list[Row] = [(self.hint(),)]
        self._width = 0

    @staticmethod
    def hint() -> Content:
        return Content.styled("click a token of the speculative lane, or focus it (tab) and use ← →", "dim")

    def show(self, pick: Pick | None, decode: Decode) -> None:
        """Another token's drill-down, from its first line."""
        self.pick = pick
        self._show([(self.hint(),)] if pick is None else describe(pick, decode))
        if isinstance(self.parent, InspectorBox):
            self.parent.scroll_home(animate=False, immediate=True)

    def refresh_texts(self, decode: Decode) -> None:
        """The same pick again, with token texts that were still on their way."""
        if self.pick is not None:
            self._show(describe(self.pick, decode))

    def _show(self, rows: list[Row]) -> None:
        self._rows = rows
        self._width = self.content_size.width
        self.update(Content("\n").join(shown for row in rows for shown in wrap_styled(row, self._width)))

    def on_resize(self) -> None:
        if self.content_size.width != self._width:
            self._show(self._rows)


class InspectorBox(ScrollBox):
    """The drill-down's bordered box, as tall as the bottom row: a longer drill-down (a tree's
    siblings over the top-5 table, at 80 columns most of them) scrolls in it, every line read."""

    # Beside a narrow tape it narrows rather than running under the controls: at 80 columns (the
    # screen scrolled, or not) it keeps 30 cells or more beside its scrollbar, "min(1,
    # p_target/p_draft) 0.456" whole.
    DEFAULT_CSS = """
    InspectorBox {
        border: round $spec-border; padding: 0 1; width: 56; max-width: 82%; height: 100%;
        scrollbar-size-vertical: 1;
    }
    InspectorBox:focus { border: round $primary; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "token"

    def compose(self) -> ComposeResult:
        yield Inspector()
