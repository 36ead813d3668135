"""Draft trees on the MLX backend, tiny real models: the tree pass scores every node as a pass over
its own path would; greedy output equals target-only for widths 1-4 and node budgets up to 16;
a sampled chain drafted as a tree draws exactly as the chain; the caches hold the kept path.
The rules themselves: tests/engine/test_tree.py; sampled trees' output distribution:
tests/backends/mlx/test_statistical.py."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.backends.mlx.trees import NO_TREE_PASS, MlxTree, verify_pass
from specplay.engine.events import Event, RoundEvent
from specplay.engine.layout import ROOT, is_chain
from specplay.engine.tree import CHAINS_ONLY, drafted_as_chains
from specplay.ui.stats import LaneTally, compare
from specplay.ui.widgets.stats_view import speculative_stats
from tests.support.drafters import early_exit, lookup
from tests.support.engine_runs import done, rounds, run
from tests.support.observed import Observed
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.tiny_models import TinyModels


def test_a_tree_pass_scores_each_node_as_its_own_path_would(backend: MlxBackend) -> None:
    generation = backend.open_generation(backend.encode(PROSE_PROMPT, raw=True))
    context = list(generation.tokens)
    parents = [ROOT, ROOT, ROOT, 0, 0, 1, 3, 3, 5]
    tokens = [5, 9, 4, 11, 13, 17, 19, 2, 7]
    logits, _ = verify_pass(generation.target, context, MlxTree(tokens, parents, None))
    model = backend.target.model

    def path(node: int) -> list[int]:
        out = []
        while node != ROOT:
            out.append(tokens[node])
            node = parents[node]
        return out[::-1]

    for row in range(len(tokens) + 1):
        alone = model(mx.array([context + (path(row - 1) if row else [])]))[0, -1]
        np.testing.assert_allclose(np.array(logits[row]), np.array(alone), atol=1e-4)


@pytest.fixture(scope="module")
def greedy_reference(backend: MlxBackend) -> dict[str, tuple[int, ...]]:
    return {
        prompt: done(run(backend, prompt, mode="target", max_tokens=48)).token_ids
        for prompt in (CODE_PROMPT, PROSE_PROMPT)
    }


def check_caches(observed: Observed, event: Event, _: object) -> None:
    """After every tree round the target holds the committed tokens but the last, and no drafter more."""
    if isinstance(event, RoundEvent):
        generation = observed.generations[-1]
        lengths = generation.cache_lengths()
        assert lengths["target"] == len(generation.tokens) - 1
        assert max(lengths.values()) <= len(generation.tokens) - 1


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize("route", ["near", "far"])
def test_greedy_trees_equal_greedy_target_only(
    backend: MlxBackend, greedy_reference: dict[str, tuple[int, ...]], width: int, route: str
) -> None:
    observed = Observed(backend)
    branched = 0
    for prompt, expected in greedy_reference.items():
        for k, nodes in ((4, 0), (3, 5), (8, 16), (6, 16)):
            events = run(
                observed,
                prompt,
                route=route,
                k=k,
                width=width,
                tree_nodes=nodes,
                max_tokens=48,
                on_event=lambda event, _: check_caches(observed, event, None),
            )
            assert done(events).token_ids == expected, (prompt[:8], k, nodes)
            trees = [r for r in rounds(events) if r.nodes]  # every round's draft is a tree; a chain's of width 1
            assert trees
            assert all(r.nodes <= (nodes or width * k) for r in trees)
            assert all(sum(p.kept for p in r.positions) == r.num_accepted for r in trees)
            branched += sum(not is_chain(r.parents) for r in trees)
    assert (branched > 0) == (width > 1)  # wider trees do branch; a width of 1 stays a chain


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_a_sampled_chain_drafted_as_a_tree_draws_as_the_chain(backend: MlxBackend, temperature: float) -> None:
    for seed in range(4):
        chain = run(backend, PROSE_PROMPT, route="far", k=4, temperature=temperature, seed=seed)
        tree = run(backend, PROSE_PROMPT, route="far", k=4, tree_nodes=4, temperature=temperature, seed=seed)
        assert done(tree).token_ids == done(chain).token_ids
        assert all(is_chain(r.parents) for r in rounds(tree))


def test_early_exit_grows_trees_and_lookup_drafts_its_chain(tiny: TinyModels) -> None:
    drafters = [("exit", early_exit(1)), ("lookup", lookup())]
    backend = load_mlx_backend(str(tiny.target), drafters)
    expected = done(run(backend, CODE_PROMPT, mode="target", max_tokens=40)).token_ids
    for route in ("exit", "lookup"):
        events = run(backend, CODE_PROMPT, route=route, k=4, width=3, max_tokens=40)
        assert done(events).token_ids == expected, route
        shapes = [r.parents for r in rounds(events) if r.nodes]
        assert any(not is_chain(p or ()) for p in shapes) == (route == "exit")


@pytest.mark.parametrize("missing", ["drafter", "target"])
def test_a_model_that_cannot_take_a_tree_pass_drafts_chains_and_says_why(
    backend: MlxBackend, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    """As a model of another family would (its attention takes no tree mask): lossless chains,
    and the run's account names the model and why."""
    from specplay.backends.mlx import drafting, mlx_backend

    monkeypatch.setattr(drafting if missing == "drafter" else mlx_backend, "tree_pass", lambda *args: None)
    expected = done(run(backend, CODE_PROMPT, mode="target", max_tokens=32)).token_ids
    events = run(backend, CODE_PROMPT, route="far", k=4, width=3, max_tokens=32)
    assert done(events).token_ids == expected
    assert all(is_chain(r.parents or ()) for r in rounds(events))
    name = "far" if missing == "drafter" else "target"
    assert done(events).metrics["mlx"] == {CHAINS_ONLY: {name: NO_TREE_PASS}}
    assert drafted_as_chains(done(events).metrics) == {name: NO_TREE_PASS}
    # the playground's lane says so too, once the run's account arrives
    lane = LaneTally()
    for busy_s, event in enumerate(events):
        lane.add(event, busy_s=float(busy_s))
    lines = str(speculative_stats(lane, compare(lane, None))).splitlines()
    assert f"{name} drafted chains, not trees: {NO_TREE_PASS}" in lines
