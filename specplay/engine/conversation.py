"""A conversation: the turns before the prompt, each a user prompt and the lane's own answer.

A single prompt is the conversation with no earlier turns. Each lane of a run continues its own
conversation (under sampling or a relaxed rule its answers may differ from the other lane's), so
a turn's prompt is encoded after that lane's earlier exchanges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Exchange:
    """One earlier turn: what the user asked and what the lane answered."""

    prompt: str
    answer: str


def chat_messages(prompt: str, earlier: Sequence[Exchange] = ()) -> list[dict[str, str]]:
    """The conversation as chat messages, the prompt the last user message."""
    messages = []
    for exchange in earlier:
        messages += [{"role": "user", "content": exchange.prompt}, {"role": "assistant", "content": exchange.answer}]
    return [*messages, {"role": "user", "content": prompt}]


def raw_text(prompt: str, earlier: Sequence[Exchange] = ()) -> str:
    """The conversation as one text, as written (`--raw`): each prompt followed by its answer,
    the new prompt last; a raw conversation is a text the user keeps extending."""
    return "".join(exchange.prompt + exchange.answer for exchange in earlier) + prompt


def shared_prefix(held: Sequence[int], wanted: Sequence[int]) -> int:
    """How many leading tokens the two have in common: what a cache holding `held` keeps when it
    goes on with `wanted`."""
    count = 0
    for a, b in zip(held, wanted, strict=False):
        if a != b:
            break
        count += 1
    return count
