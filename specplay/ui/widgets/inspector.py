"""Token drill-down: what the verifier knew and decided about one token of the speculative lane."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.content import Content
from textual.widgets import Static

from specplay.display.source_styles import SOURCE_WHY
from specplay.display.text import token_repr
from specplay.engine.events import Candidate, DraftPosition, RoundEvent, draft_size
from specplay.engine.layout import siblings_under
from specplay.engine.tree import judged_at
from specplay.ui.tokens import source_style
from specplay.ui.widgets.lane_view import Pick

Decode = Callable[[int], str]


def _quote(text: str) -> str:
    return token_repr(text, limit=12)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _tops(target: Sequence[Candidate] | None, draft: Sequence[Candidate] | None, decode: Decode) -> list[str]:
    if target is None and draft is None:
        return ["top 5: not reported (the run did not inspect, or the backend cannot)"]
    columns = [list(target or ()), list(draft or ())]
    lines = [f"{'top p_target':<22}  {'top p_draft':<22}"]
    for i in range(max(map(len, columns))):
        cells = [f"{_quote(decode(c[i][0])):<15} {c[i][1]:.3f}" if i < len(c) else "" for c in columns]
        lines.append(f"{cells[0]:<22}  {cells[1]:<22}".rstrip())
    return lines


def describe(pick: Pick, decode: Decode) -> Content:
    """The drill-down text for one picked token."""
    token, round = pick.token, pick.round
    head = Content.assemble(
        Content.styled(_quote(token.text), f"bold {source_style(token.source)}"),
        f"  {token.source} #{pick.index}  ",
        Content.styled(SOURCE_WHY.get(token.source, token.source), "dim"),
    )
    lines: list[Content | str] = [head]
    if round is None:
        return Content("\n").join(lines)
    asked = f" of {round.k_asked} asked" if round.k_asked is not None and round.k_asked != round.depth else ""
    drafted = f"k={round.depth}{asked}" if round.nodes == round.depth else f"{draft_size(round)}{asked}"
    lines.append(f"round {round.index}  route {round.drafter}  {drafted}  accepted {round.num_accepted}")
    if round.origin is not None:  # the drafter's own word on where its draft came from
        lines.append(Content.styled(f"draft from: {round.origin}", "italic"))
    position = judged_at(round, pick.slot)
    if position is None and not round.positions and token.source != "bonus":
        lines.append(Content.styled("how its draft was judged is not recorded (a speculating server's round)", "dim"))
        return Content("\n").join(lines)
    if position is None:  # the bonus: drawn from p_target after the last drafted token
        lines += ["p_target(x) " + _num(_prob(round.bonus_top_target, token.token_id))]
        lines += _tops(round.bonus_top_target, None, decode)
        return Content("\n").join(lines)
    x = position.token_id
    if token.source == "corrected":
        lines.append(f"x = drafted {_quote(decode(x))}, rejected")
    ratio = position.p_target / position.p_draft if position.p_draft > 0 else float("inf")
    lines.append(f"p_target(x) {_num(position.p_target)}  p_draft(x) {_num(position.p_draft)}")
    lines.append(f"u {_num(position.uniform)}  min(1, p_target/p_draft) {_num(min(1.0, ratio))}")
    if position.tv_lower is None:
        lines.append(f"d = TV {_num(position.tv_distance)}  θ {_num(position.theta)}  outcome {position.outcome}")
    else:  # top-K only: θ comes from the bracket's upper end, so the budget still holds
        lines.append(
            f"d = TV in [{_num(position.tv_lower)}, {_num(position.tv_distance)}]  θ {_num(position.theta)}"
            f"  outcome {position.outcome}"
        )
    if position.accept_probability is not None:
        spent = f"  TV spent {_num(position.tv_spent)}" if position.tv_spent is not None else ""
        lines.append(f"the rule keeps x with probability {_num(position.accept_probability)}{spent}")
    if position.error_bound is not None:
        lines.append(f"approximate: this token's distribution within TV {_num(position.error_bound)} of the rule's")
    lines += _siblings(round, position, decode)
    lines += _tops(position.top_target, position.top_draft, decode)
    return Content("\n").join(lines)


def _siblings(round: RoundEvent, position: DraftPosition, decode: Decode) -> list[str]:
    """A node's siblings, where it has any, tried in this order: each one's p_target and p_draft
    where they branched, and its fate."""
    node = round.positions.index(position)
    siblings = siblings_under(round.parents, round.parents[node])
    if len(siblings) < 2:
        return []
    lines = [f"{'siblings, in turn':<18}p_target p_draft"]
    for sibling in siblings:
        at = round.positions[sibling]
        mark = "→ " if sibling == node else "  "
        lines.append(f"{mark}{_quote(decode(at.token_id)):<16}{at.p_target:>8.3f}{at.p_draft:>8.3f} {at.outcome}")
    return lines


def _prob(top: Sequence[Candidate] | None, token_id: int) -> float | None:
    return next((p for t, p in top or () if t == token_id), None)


class Inspector(Static):
    DEFAULT_CSS = """
    Inspector { border: round $spec-border; padding: 0 1; width: 56; height: 100%; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(self.hint(), id=id)
        self.border_title = "token"
        self.pick: Pick | None = None

    @staticmethod
    def hint() -> Content:
        return Content.styled("click a token of the speculative lane, or focus it (tab) and use ← →", "dim")

    def show(self, pick: Pick | None, decode: Decode) -> None:
        self.pick = pick
        self.update(self.hint() if pick is None else describe(pick, decode))

    def refresh_texts(self, decode: Decode) -> None:
        """The same pick again, with token texts that were still on their way."""
        if self.pick is not None:
            self.update(describe(self.pick, decode))
