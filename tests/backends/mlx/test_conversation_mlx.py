"""A conversation on real MLX caches: each turn continues the last one's caches, and at temperature
0 every turn equals target-only's and a run of the same turn from empty caches."""

from __future__ import annotations

import pytest

from specplay.backends.mlx import load_mlx_backend
from specplay.engine.loop import SpecEngine
from tests.support.checks import every
from tests.support.drafters import lookup
from tests.support.engine_runs import converse
from tests.support.observed import Observed
from tests.support.prompts import CONVERSATION
from tests.support.tiny_models import TinyModels


@pytest.mark.parametrize("chat", [True, False], ids=["chat-template", "raw-model"])
def test_every_turn_of_a_greedy_conversation_equals_target_only_with_the_caches_kept(
    tiny: TinyModels, chat: bool
) -> None:
    target = tiny.chat_target if chat else tiny.target
    drafter = tiny.chat_target if chat else tiny.near
    backend = Observed(load_mlx_backend(str(target), [("model", str(drafter)), ("lookup", lookup())]))
    for route in ("model", "lookup"):
        engine = SpecEngine(backend)
        speculative = converse(engine, CONVERSATION, "speculative", route=route)
        target_only = converse(engine, CONVERSATION, "target")
        fresh = converse(SpecEngine(backend), CONVERSATION, "speculative", keep=False, route=route)
        for turn in range(len(CONVERSATION)):
            ids = [events[-1].token_ids for events in (speculative[turn], target_only[turn], fresh[turn])]  # type: ignore[union-attr]
            assert ids[0] == ids[1] == ids[2], (route, turn)
            assert ids[0], "every turn answers"
    generation = backend.generations[-1]
    assert every(length <= len(generation.tokens) - 1 for length in generation.cache_lengths().values())
    # Each lane went on with its own generation; the fresh runs opened one a turn.
    assert len({id(g) for g in backend.generations}) == 2 * 2 + 2 * len(CONVERSATION)
