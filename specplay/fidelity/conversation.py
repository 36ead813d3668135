"""Fidelity over a saved conversation: each turn sampled after one and the same earlier turns.

Turn i of a conversation is asked after turns 0..i-1. For its rows to compare fairly, every row
and every seed of turn i samples after the same prefix: the session's main (speculative) lane's
earlier exchanges, its prompts and its own answers, the conversation that lane saw. No row's
own earlier samples are fed back: they differ by row and seed, and the turn's rows would then be
answering different conversations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specplay.engine.conversation import Exchange
from specplay.fidelity.measure import FidelityReport
from specplay.store.format import Session


@dataclass(frozen=True, slots=True)
class FidelityTurn:
    """One turn a sweep samples: its prompt, asked after `earlier`."""

    index: int
    """0 for the first, as the session file counts."""
    prompt: str
    earlier: tuple[Exchange, ...]
    lane: str
    """The session's lane whose answers `earlier` holds."""
    recorded_prompt_token_ids: tuple[int, ...] | None
    """The prompt tokens that lane answered this turn after, where it did."""


def session_turns(session: Session) -> list[FidelityTurn]:
    """Every turn of the session's conversation, each after its main lane's earlier exchanges as
    recorded (a turn it was stopped in holds the answer it had, which is what the next turn followed)."""
    turns, earlier = [], []
    for turn in session.turns:
        lane = turn.main
        recorded = tuple(lane.start.prompt_token_ids) if lane.start is not None else None
        turns.append(FidelityTurn(turn.index, turn.prompt, tuple(earlier), lane.name, recorded))
        earlier.append(Exchange(turn.prompt, lane.text))
    return turns


def compared(session: Session, turns: Sequence[FidelityTurn]) -> str:
    """What a conversation's sweep compared, in words, for the report and the page."""
    return (
        f"Turn by turn over session {session.id}'s {len(turns)} turns: every row and seed of a turn samples "
        f"that turn's prompt after the session's {turns[0].lane} lane's earlier turns (their prompts and that "
        "lane's own answers), the same conversation for all, so each turn's rows answer one prompt; "
        "log-likelihood is scored after that same conversation."
    )


def turn_record(turn: FidelityTurn, total: int, token_ids: Sequence[int], report: FidelityReport) -> dict[str, Any]:
    """One turn of the report file: what was asked after what, and the turn's rows."""
    return {
        "turn": turn.index,
        "of": total,
        "prompt": turn.prompt,
        "earlier_turns_from": turn.lane,
        "earlier_turns": [{"prompt": e.prompt, "answer": e.answer} for e in turn.earlier],
        "prompt_token_ids": list(token_ids),
        # False where other models re-encode the conversation: its text is the same, its tokens are theirs
        "prompt_tokens_as_recorded": turn.recorded_prompt_token_ids == tuple(token_ids),
    } | report.to_dict()
