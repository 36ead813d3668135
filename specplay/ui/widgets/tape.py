"""The draft tape: per round, the drafted tokens with rejected ones struck through, with its drafter
and size; a rejected token carries, as a superscript, the correction's rank among the drafter's
tokens. Every round is drawn as a tree (a chain is the tree of width 1): its trunk on its first
line and, below each of its tokens, the siblings that lost to it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from specplay.display.text import visible
from specplay.engine.correction_rank import OTHER, RANK_TOP_N, rank_key
from specplay.engine.events import DraftPosition, RoundEvent, draft_size
from specplay.engine.layout import ROOT, depths, siblings_under
from specplay.engine.tree import kept_nodes
from specplay.runner.host import unknown_text
from specplay.ui.tokens import source_style
from specplay.ui.widgets.steady import show_in_view

_OUTCOME_STYLES = {
    "accepted": source_style("accepted"),
    "relaxed": source_style("relaxed"),
    "rejected": "strike $spec-corrected",
    "unreached": "strike dim",
}
_SUPERSCRIPT = str.maketrans("0123456789+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺")
MAX_ROUNDS = 200
"""Older rounds scroll away: the tape shows the recent behaviour, the session keeps every round."""


KEY = f"²…{f'{RANK_TOP_N + 1}+'.translate(_SUPERSCRIPT)}: rank of the correction among the drafter's picks"
"""The tape's marks, said on its border: what a learner would otherwise look up in the docs."""
TITLE = "draft tape  (╰ lost to the token above; ∅ no text of its own)"
"""A tree's losing siblings are drawn under the token they lost to; ∅ is a token with no text of its own."""


def rank_mark(position: DraftPosition) -> str:
    """A rejection's correction rank as a superscript: "²" its drafter's second choice, "⁵⁺"
    outside the drafter's top RANK_TOP_N; "" where not known (engine/correction_rank.py)."""
    if position.correction_rank is None:
        return ""
    key = rank_key(position.correction_rank)
    return (f"{RANK_TOP_N + 1}+" if key == OTHER else key).translate(_SUPERSCRIPT)


def _shown(text: str) -> str:
    return visible(text).replace("\n", "⏎") or "∅"


def round_line(event: RoundEvent, drafted_text: tuple[str, ...]) -> Content:
    """A round, labelled by what it drafted (`draft_size`), drawn as a tree (a chain is the tree of
    width 1): its `trunk` on the first line (kept, struck where rejected, dim where never reached),
    then `→` the round's own token; below, each depth's other nodes under the token they lost to
    (`╰`: the trunk's node at that depth, or the round's own token past the trunk), the nodes
    beneath losing ones further right. A chain is all trunk: its whole draft on one line."""
    head = f"#{event.index:<4} {event.drafter} {draft_size(event)} │ "
    first: list[Content | str] = [Content.styled(head, "dim")]
    if not event.positions:  # route none, or prompt lookup found no match: the round was one target step
        return Content.assemble(*first, Content.styled("nothing drafted ", "dim"), *_round_end(event))
    levels = depths(event.parents)
    line = trunk(event)
    columns: list[int] = []
    """Where each depth's token starts on the first line, after the head: the trunk's, then the round's own."""
    width = 0
    for node in line:
        cell = Content.assemble(*_drafted(event.positions[node], _text(drafted_text, node)))
        columns.append(width)
        first.append(cell)
        width += cell.cell_length
    end = _round_end(event)
    if end:
        columns.append(width + 2)  # after "→ "
    lines = [Content.assemble(*first, *end)]
    margin = Content.styled(" " * (len(head) - 2) + "│ ", "dim")
    for depth in range(1, event.depth + 1):
        lost = [n for n, d in enumerate(levels[: len(event.positions)]) if d == depth and n not in line]
        if not lost:
            continue
        # Beneath a losing node, past the round's own token: indented one step a depth further.
        at = (
            columns[depth - 1]
            if depth <= len(columns)
            else (columns[-1] if columns else 0) + 2 * (depth - len(columns))
        )
        below: list[Content | str] = [margin, " " * at, Content.styled("╰ ", "dim")]
        for node in lost:
            below += _drafted(event.positions[node], _text(drafted_text, node))
        lines.append(Content.assemble(*below))
    return Content("\n").join(lines)


def trunk(event: RoundEvent) -> list[int]:
    """The nodes on a round's first line: its kept path, then on from its end while the draft does
    not branch there (a lone child: struck where rejected, dim where never reached). Siblings go
    under the token they lost to, so a chain, where no node has one, is all trunk."""
    drafted = len(event.positions)
    line = kept_nodes(event)
    while len(below := [n for n in siblings_under(event.parents, line[-1] if line else ROOT) if n < drafted]) == 1:
        line.append(below[0])
    return line


def _text(texts: tuple[str, ...], node: int) -> str:
    return texts[node] if node < len(texts) else ""


def _drafted(position: DraftPosition, text: str) -> list[Content | str]:
    parts: list[Content | str] = [Content.styled(_shown(text), _OUTCOME_STYLES[position.outcome])]
    if mark := rank_mark(position):
        parts.append(Content.styled(mark, "$spec-corrected"))
    return [*parts, " "]


def _round_end(event: RoundEvent) -> list[Content | str]:
    """The round's own token: after a rejection, all kept, or no draft."""
    ends = ("corrected", "bonus", "target")
    last = event.tokens[-1] if event.tokens and event.tokens[-1].source in ends else None
    if last is None:
        return []
    return ["→ ", Content.styled(_shown(last.text), source_style(last.source))]


class DraftTape(VerticalScroll):
    DEFAULT_CSS = """
    DraftTape { border: round $spec-border; height: 9; padding: 0 1; }
    DraftTape:focus { border: round $primary; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = TITLE
        self.border_subtitle = KEY
        self._rounds: deque[tuple[RoundEvent | None, tuple[str, ...]]] = deque(maxlen=MAX_ROUNDS)
        """Each line's round (None: where a conversation's turn begins)."""
        self._lines: deque[Content] = deque(maxlen=MAX_ROUNDS)
        self._changes = 0
        self._shown_in_full: int | None = None
        """The change count the full text shows (None: the running tail shows)."""

    def compose(self) -> ComposeResult:
        yield Static("")

    def clear(self) -> None:
        """Empty the tape for a run, already in its fixed-height form (see LaneView.clear)."""
        self._rounds.clear()
        self._lines.clear()
        self._changes += 1
        self._show_recent(Content(""))

    def add(self, event: RoundEvent, drafted_text: tuple[str, ...]) -> None:
        """Take a round; the tape shows it at the next `flush`."""
        self._rounds.append((event, drafted_text))
        self._lines.append(round_line(event, drafted_text))
        self._changes += 1

    def start_turn(self, index: int) -> None:
        """A conversation's turn `index` (from 0) begins: its rounds, numbered from 0 again, follow a line saying so."""
        self._rounds.append((None, ()))
        self._lines.append(Content.styled(f"── turn {index + 1} ──", "dim"))
        self._changes += 1

    def refresh_texts(self, decode: Callable[[int], str]) -> None:
        """Decode again the drafted tokens whose text was not known when their round came (a
        server's tokenizer answers later); shown at the next `flush`."""
        for i, (event, texts) in enumerate(self._rounds):
            if event is None:
                continue
            if any(text == unknown_text(token_id) for token_id, text in zip(event.drafted, texts, strict=False)):
                texts = tuple(map(decode, event.drafted))
                self._rounds[i] = (event, texts)
                self._lines[i] = round_line(event, texts)
                self._changes += 1

    def flush(self, full: bool = False) -> None:
        """Show all the rounds kept, or, while generating, the lines of the last ones that fit, in a
        text of fixed height (an update then needs no layout: see LaneView)."""
        if full:
            if self._shown_in_full == self._changes:  # shown already: leave it where the user scrolled it
                return
            self._shown_in_full = self._changes
            text = self.query_one(Static)
            text.styles.height = "auto"
            text.styles.min_height = "100%"  # never shorter than the view: anchored, it would sit below its top
            text.update(Content("\n").join(self._lines))
            # Anchored, the layout itself scrolls to the end (a scroll asked for now may read the
            # height from before that layout and stay at the top); a user's scroll releases it.
            self.anchor()
            return
        width, height = self.scrollable_content_region.size
        if width <= 0 or height <= 0:
            return
        recent = list(self._lines)[-height:]
        lines = [line for round in recent for line in round.wrap(width)][-height:]
        self._show_recent(Content("\n").join(lines))

    def _show_recent(self, recent: Content) -> None:
        self._shown_in_full = None
        show_in_view(self.query_one(Static), self, recent)
