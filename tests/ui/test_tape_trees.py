"""The draft tape draws every round as a tree: each round labelled by what it drafted
(`draft_size`), a tree's kept path on its first line and each losing sibling below, under the
token it lost to; a chain (prompt lookup at any width, a round with nothing to draft), the tree of
width 1, through the same path, on one line."""

from __future__ import annotations

from textual.content import Content

from specplay.display.text import visible
from specplay.engine.events import Event, RoundEvent, draft_size
from specplay.engine.layout import ROOT, depths, is_chain, siblings_under
from specplay.engine.tree import kept_nodes
from specplay.ui.tokens import source_style
from specplay.ui.widgets.tape import TITLE, rank_mark, round_line, trunk
from tests.support.engine_runs import run
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.scripted import ScriptedBackend, scripted_backend


def _rounds(backend: ScriptedBackend, route: str, prompt: str, width: int) -> list[RoundEvent]:
    events: list[Event] = run(backend, prompt, route=route, k=3, width=width, max_tokens=60)
    return [e for e in events if isinstance(e, RoundEvent)]


def _drawn(backend: ScriptedBackend, event: RoundEvent) -> list[str]:
    return round_line(event, tuple(backend.token_text(t) for t in event.drafted)).plain.splitlines()


def test_a_trees_losing_siblings_are_drawn_under_the_kept_token_they_lost_to() -> None:
    backend = scripted_backend()
    trees = [e for e in _rounds(backend, "near", PROSE_PROMPT, width=2) if not is_chain(e.parents)]
    assert trees
    checked = 0
    for event in trees:
        lines = _drawn(backend, event)
        head, path = lines[0].split(" │ ")[0], kept_nodes(event)
        assert head.endswith(f"near {draft_size(event)}") and "nodes" in head
        bar = lines[0].index("│ ") + 2
        # The first line is the kept path and the round's own token: no sibling on it.
        texts = [backend.token_text(event.drafted[n]) for n in path]
        assert lines[0][bar:].split("→")[0].split() == [t for t in texts if t.strip()]
        levels = depths(event.parents)
        lost_depths = sorted({levels[n] for n in range(event.nodes) if n not in path})
        assert len(lines) == 1 + len(lost_depths)
        for line, depth in zip(lines[1:], lost_depths, strict=True):
            assert line.index("│") == bar - 2 and line[bar:].lstrip().startswith("╰ ")
            if depth <= len(path):  # a kept node's sibling: its ╰ starts under that node
                column = sum(len(backend.token_text(event.drafted[n]) or "∅") + 1 for n in path[: depth - 1])
                assert line[bar:].index("╰") == column, (lines, depth)
                checked += 1
    assert checked  # some sibling lost to a kept token
    assert "╰ lost to the token above" in TITLE


def test_prompt_lookup_at_width_2_drafts_chains_and_says_k() -> None:
    backend = scripted_backend(drafters=("near", "lookup"))
    rounds = _rounds(backend, "lookup", CODE_PROMPT, width=2)
    assert {e.nodes > 0 for e in rounds} == {True, False}  # rounds that drafted, and rounds that found nothing
    for event in rounds:
        lines = _drawn(backend, event)
        assert len(lines) == 1 and "tree" not in lines[0]
        assert lines[0].startswith(f"#{event.index:<4} lookup k {event.nodes} │ ")
        if event.nodes == 0:
            assert "k 0 │ nothing drafted → " in lines[0]


OUTCOMES = {
    "accepted": source_style("accepted"),
    "relaxed": source_style("relaxed"),
    "rejected": "strike $spec-corrected",
    "unreached": "strike dim",
}
"""How a chain's line styles each drafted token, as users have seen it."""


def _chain_line(backend: ScriptedBackend, event: RoundEvent) -> Content:
    """A chain's line as the tape drew it before trees: the head, every drafted token in order with
    its correction's rank, then `→` the round's own token."""
    parts: list[Content | str] = [Content.styled(f"#{event.index:<4} {event.drafter} k {event.nodes} │ ", "dim")]
    for position, token_id in zip(event.positions, event.drafted, strict=True):
        parts.append(
            Content.styled(visible(backend.token_text(token_id)).replace("\n", "⏎") or "∅", OUTCOMES[position.outcome])
        )
        if mark := rank_mark(position):
            parts.append(Content.styled(mark, "$spec-corrected"))
        parts.append(" ")
    own = event.tokens[-1]
    if own.source in ("corrected", "bonus"):
        parts += ["→ ", Content.styled(visible(own.text).replace("\n", "⏎") or "∅", source_style(own.source))]
    return Content.assemble(*parts)


def test_a_chain_drawn_as_a_tree_of_width_one_is_the_chain_line() -> None:
    backend = scripted_backend(drafters=("near", "far"))
    chains = [e for e in _rounds(backend, "far", PROSE_PROMPT, width=1) if e.positions]
    assert chains and all(is_chain(e.parents) for e in chains)
    assert {p.outcome for e in chains for p in e.positions} >= {"accepted", "rejected", "unreached"}
    assert any(rank_mark(p) for e in chains for p in e.positions)
    for event in chains:
        # its trunk, the first line's nodes, is its whole draft: no loser is left to draw below
        assert trunk(event) == list(range(event.nodes))
        drawn = round_line(event, tuple(backend.token_text(t) for t in event.drafted))
        expected = _chain_line(backend, event)
        assert drawn.plain == expected.plain and "\n" not in drawn.plain
        assert drawn.markup == expected.markup, (drawn.markup, expected.markup)
    capped = run(backend, PROSE_PROMPT, route="far", k=3, width=2, tree_nodes=4, max_tokens=60)
    rounds = [*_rounds(backend, "near", PROSE_PROMPT, width=2), *(e for e in capped if isinstance(e, RoundEvent))]
    trees = [e for e in rounds if not is_chain(e.parents)]
    # capped trees hold lone children past the kept path: drawn on the first line, as a chain's
    assert trees and any(len(trunk(e)) > len(kept_nodes(e)) for e in trees)
    for event in trees:
        # a tree's trunk: its kept path, then on through lone children, never past a branch
        line, kept = trunk(event), kept_nodes(event)
        assert line[: len(kept)] == kept
        for above, node in zip([ROOT, *line], line, strict=False):
            if node not in kept:
                assert siblings_under(event.parents, above) == [node]
        end = siblings_under(event.parents, line[-1] if line else ROOT)
        assert len(end) != 1
