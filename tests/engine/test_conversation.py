"""A conversation's next turn: each mode's caches are kept for what they share with the longer
prompt, and the turn's output is the output a run from empty caches gives (on the scripted backend,
whose caches and clock follow the MLX backend's rules)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specplay.engine.conversation import Exchange, chat_messages, raw_text, shared_prefix
from specplay.engine.events import Event, RoundEvent, StepEvent
from tests.support.engine_runs import converse
from tests.support.prompts import CONVERSATION
from tests.support.scripted import ScriptedBackend, scripted_backend, scripted_engine


def _committed(events: list[Event]) -> list[tuple[int, str]]:
    tokens = [t for e in events if isinstance(e, RoundEvent) for t in e.tokens]
    tokens += [e.token for e in events if isinstance(e, StepEvent)]
    return [(t.token_id, t.source) for t in tokens]


def test_conversation_messages_and_raw_text() -> None:
    earlier = [Exchange("hi", "hello"), Exchange("more", "sure")]
    assert chat_messages("last", earlier) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "sure"},
        {"role": "user", "content": "last"},
    ]
    assert chat_messages("only") == [{"role": "user", "content": "only"}]
    assert raw_text("last", earlier) == "hihellomoresurelast"
    assert [shared_prefix(a, b) for a, b in (([1, 2, 3], [1, 2, 4]), ([], [1]), ([1, 2], [1, 2, 3]))] == [2, 0, 2]


@pytest.mark.parametrize("mode", ["speculative", "target"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_kept_turn_gives_what_fresh_caches_give_and_prefills_only_the_new_tokens(
    mode: str, temperature: float
) -> None:
    kept_backend, fresh_backend = scripted_backend(), scripted_backend()
    kept = converse(
        scripted_engine(kept_backend), CONVERSATION, mode, temperature=temperature, on_turn=_mark(kept_backend)
    )
    fresh = converse(
        scripted_engine(fresh_backend),
        CONVERSATION,
        mode,
        keep=False,
        temperature=temperature,
        on_turn=_mark(fresh_backend),
    )
    for turn_kept, turn_fresh in zip(kept, fresh, strict=True):
        assert _committed(turn_kept) == _committed(turn_fresh)  # same tokens, same sources
        assert turn_kept[-1].text == turn_fresh[-1].text  # type: ignore[union-attr]
    # Turn by turn, the target's prefill: the whole conversation from empty caches, the new part kept.
    prefills_kept = _target_prefills(kept_backend)
    prefills_fresh = _target_prefills(fresh_backend)
    assert prefills_kept[0] == prefills_fresh[0]
    for turn in (1, 2):
        prompt = kept[turn][0].prompt_token_ids  # type: ignore[union-attr]
        before = kept[turn - 1]
        held = [*before[0].prompt_token_ids, *before[-1].token_ids]  # type: ignore[union-attr]
        assert prefills_fresh[turn] == len(prompt) - 1
        cached = min(shared_prefix(held, prompt), len(held) - 1)  # a cache leaves the last token for the next pass
        assert prefills_kept[turn] == len(prompt) - 1 - cached < prefills_fresh[turn] / 2
    generation = kept_backend.generations[-1]
    assert max(generation.lengths.values()) <= len(generation.tokens) - 1


def _mark(backend: ScriptedBackend) -> Callable[[int], None]:
    return lambda index: backend.forwards.append(("turn", index))


def _target_prefills(backend: ScriptedBackend) -> list[int]:
    """Rows of each turn's first target pass: its prefill."""
    prefills: list[int] = []
    for i, (name, _) in enumerate(backend.forwards):
        if name == "turn":
            prefills.append(next(rows for model, rows in backend.forwards[i:] if model == "target"))
    return prefills
