"""The engine over the real MLX backend, on tiny models built by the tests: what only real models
show (KV caches rewound, sliding windows, chat templates, padded vocabularies, the argmax fast
path). The engine's own logic is tested on the scripted backend (tests/engine/test_engine.py)."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.backends.mlx.generation import _verify_argmax, _verify_distributions
from specplay.engine.correction_rank import OTHER_RANK, correction_ranks
from specplay.engine.draws import RoundDraws
from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.rules import MENTORED
from specplay.engine.sampling import softmax
from specplay.engine.settings import POLICIES, SamplingParams
from specplay.engine.tree import tree_shape
from tests.support.engine_runs import assert_caches_hold_the_committed, done, run, sources
from tests.support.observed import Observed
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.tiny_models import TinyModels


@pytest.fixture(scope="module")
def greedy_reference(backend: MlxBackend) -> tuple[int, ...]:
    return done(run(backend, CODE_PROMPT, mode="target")).token_ids


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("route", ["near", "far"])
def test_greedy_speculative_equals_greedy_target_only(
    backend: MlxBackend, greedy_reference: tuple[int, ...], policy: str, route: str
) -> None:
    for k in (1, 2, 4, 7):
        events = run(backend, CODE_PROMPT, k=k, policy=policy, route=route)
        assert done(events).token_ids == greedy_reference, (k, policy, route)
    assert {"corrected"} <= set(sources(events))


def test_caches_hold_the_committed_tokens_after_every_round(backend: MlxBackend) -> None:
    observed = Observed(backend)

    def check(event: Event, controls: LiveControls) -> None:
        if not isinstance(event, RoundEvent):
            return
        assert_caches_hold_the_committed(observed.generations[-1], event)
        controls.update(route=["near", "far", "self"][event.index % 3], k=1 + event.index % 5)

    run(observed, CODE_PROMPT, k=3, route="near", max_tokens=50, on_event=check)


def test_sliding_window_target(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.swa_target), [("near", str(tiny.swa_near))])
    reference = done(run(backend, PROSE_PROMPT, mode="target", max_tokens=48)).token_ids
    for k in (2, 5):
        assert done(run(backend, PROSE_PROMPT, k=k, max_tokens=48)).token_ids == reference


def test_chat_template_is_applied_unless_raw(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.chat_target))
    chat = backend.encode("hello", raw=False)
    assert backend.tokenizer.decode(chat) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert backend.encode("hello", raw=True) == backend.tokenizer.encode("hello")


def test_a_drafter_with_padded_vocabulary_pairs_with_the_target(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.target), [("padded", str(tiny.padded))])
    reference = done(run(backend, CODE_PROMPT, mode="target")).token_ids
    assert done(run(backend, CODE_PROMPT, k=3)).token_ids == reference
    sampled = done(run(backend, CODE_PROMPT, k=3, temperature=1.0))
    assert max(sampled.token_ids) < backend.vocab_size


def test_greedy_lossless_verification_from_the_argmax_alone_matches_the_full_computation(
    backend: MlxBackend,
) -> None:
    # Greedy lossless verification reads only the target's argmax, a drill-down's top lists
    # included, and ranks it in the drafter's softmax; the full computation from the one-hot rows
    # (verify_rows) must hand the engine the same numbers, ranks included.
    greedy = SamplingParams(0.0)
    draws = RoundDraws(draft=[0.5] * 5, accept=[0.5] * 5, residual=[0.3] * 5, bonus=0.7)
    generation = backend.open_generation(backend.encode(CODE_PROMPT, raw=True), prefill=(None, "far"))
    committed = len(generation.tokens) - 1
    for drafter in ("near", "far", "self"):
        draft = generation.draft(drafter, tree_shape(1, 0, 5), greedy, [0.5] * 5, None)
        inputs = mx.concatenate([mx.array(generation.tokens[committed:]), draft.tokens.astype(mx.int32)])
        logits = generation.target.forward(inputs)[-6:]
        generation.target.trim_to(committed)
        for top_n in (0, 5):
            fast = _verify_argmax(draft, logits, top_n)
            ranks = fast.correction_rank
            assert ranks is not None and len(ranks) == 5 and all(1 <= r <= OTHER_RANK for r in ranks)
            # Ranked in the drafter's logits as in its softmax, the distribution the rule names.
            probs = softmax(np.array(draft.scores, dtype=np.float64), np)
            assert ranks == correction_ranks(probs, np.array(fast.row_tokens[:5]), np).tolist()
            # Where the target disagrees, its token is not the drafter's argmax (ties aside): rank 2 or more.
            assert all(r >= 2 for r, x, y in zip(ranks, fast.drafted, fast.target_argmax, strict=True) if x != y)
            full = _verify_distributions(draft, logits, sampling=greedy, rule=MENTORED, draws=draws, top_n=top_n)
            if top_n:  # a one-hot's other entries are filler (the engine drops them)
                assert full.top_target is not None and full.top_draft is not None
                full = replace(
                    full,
                    top_target=[[c for c in row if c[1] > 0] for row in full.top_target],
                    top_draft=[[c for c in row if c[1] > 0] for row in full.top_draft],
                )
                assert len(fast.top_target or ()) == 6 and len(fast.top_draft or ()) == 5
            assert full == fast
        assert generation.verify(draft, greedy, MENTORED, draws, top_n=5) == fast
        generation.target.trim_to(committed)
        generation.drafters[drafter].trim_to(committed)
