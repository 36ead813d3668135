"""Sampled output with the suffix drafter follows the target exactly, in chains and in trees whose
siblings are certain (chosen by count, not drawn): at the drafted position and the next.

The drafter remembers two earlier outputs in which the prompt's last token was followed by the
target's two likeliest tokens, each then by its own likeliest: its chain drafts one branch, its tree
both (siblings at the root, each with a child). Fixed seeds make each test deterministic;
tolerance as tests/backends/mlx/test_statistical.py: every token the reference gives at least 2%
lands within 4.5 standard errors of its probability, and a negative control (the output does not
follow the target with a drafted token's mass doubled) shows the check can fail.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.drafters import EarlierOutput, EarlierOutputs, parse_model
from specplay.engine.events import RoundEvent
from specplay.engine.layout import children
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from tests.support.distributions import follows
from tests.support.engine_runs import done
from tests.support.prompts import PROSE_PROMPT
from tests.support.tiny_models import TinyModels

SAMPLES = 2500


def probs_after(backend: MlxBackend, prefixes: list[list[int]]) -> np.ndarray:
    model = backend.models["target"].model
    logits = model(mx.array(prefixes))[:, -1, :].astype(mx.float32)
    return np.array(mx.softmax(logits, axis=-1)).astype(np.float64)[:, : backend.vocab_size]


@pytest.fixture
def setup(tiny: TinyModels) -> tuple[MlxBackend, list[int], list[int]]:
    """The backend, the prompt's ids, and the two remembered branches' first tokens. A fresh one
    each test: the drafter remembers every sampled output (a two-token one may add a branch)."""
    plain = load_mlx_backend(str(tiny.target))
    base = plain.encode(PROSE_PROMPT, raw=True)
    # The prompt ends with the token the target is least likely to write again after it: an output
    # that starts with it would give the drafter one more branch to remember (it learns from each).
    again = probs_after(plain, [[*base, t] for t in range(plain.vocab_size)])
    prompt = [*base, int(np.argmin(np.diagonal(again)))]
    first = probs_after(plain, [prompt])[0]
    b, c = (int(t) for t in np.argsort(-first)[:2])
    after = probs_after(plain, [[*prompt, b], [*prompt, c]])
    d, f = int(np.argmax(after[0])), int(np.argmax(after[1]))
    # Each remembered output has the prompt's last token after a token the prompt does not have there.
    other = next(t for t in range(plain.vocab_size) if t != prompt[-2])
    outputs = (
        EarlierOutput((other, prompt[-1], b, d), "session a"),
        EarlierOutput((other, prompt[-1], c, f), "session b"),
    )
    earlier = EarlierOutputs(folder=Path("sessions"), outputs=outputs, sessions=2)
    drafter = parse_model("mem", "drafter", "suffix:factor=4", "draft")
    return load_mlx_backend(str(tiny.target), [("mem", drafter)], earlier=earlier), prompt, [b, c]


def sample(
    backend: MlxBackend, prompt: list[int], position: int, **settings: object
) -> tuple[np.ndarray, list[RoundEvent]]:
    """The token at `position` of SAMPLES seeded generations at temperature 1, and each one's first round."""
    engine = SpecEngine(backend)
    controls = LiveControls(
        SpecSettings(sampling=SamplingParams(1.0)).changed(route="mem", **settings), backend.drafters
    )
    counts, firsts = np.zeros(backend.vocab_size), []
    for seed in range(SAMPLES):
        request = Request(PROSE_PROMPT, tuple(prompt), "speculative", seed, position + 1, ignore_eos=True)
        events = list(engine.generate(request, controls))
        counts[done(events).token_ids[position]] += 1
        firsts.append(next(e for e in events if isinstance(e, RoundEvent)))
    return counts, firsts


def boosted(p: np.ndarray, token: int) -> np.ndarray:
    """The control: the target with a drafted token's mass doubled (what keeping drafts too often gives)."""
    out = p.copy()
    out[token] *= 2
    return out / out.sum()


@pytest.mark.parametrize("width", [1, 3], ids=["chain", "tree"])
def test_sampled_output_follows_the_target(setup: tuple[MlxBackend, list[int], list[int]], width: int) -> None:
    backend, prompt, (b, c) = setup
    p_first = probs_after(backend, [prompt])[0]
    # One token to go: a draft of one level (the root's children).
    first, rounds = sample(backend, prompt, 0, k=2, width=width)
    assert follows(first, p_first)
    assert not follows(first, boosted(p_first, c))
    roots = {tuple(r.drafted[n] for n in children(r.parents)[0]) for r in rounds}
    assert roots == ({(c, b)} if width > 1 else {(c,)})  # by count, ties to the latest occurrence
    kept = sum(r.num_accepted > 0 for r in rounds) / SAMPLES
    assert kept == pytest.approx(p_first[c] + (p_first[b] if width > 1 else 0), abs=0.03)

    # Two to go: each branch with its child (a one-token output adds no branch to remember).
    after_each = probs_after(backend, [[*prompt, t] for t in range(backend.vocab_size)])
    second, rounds = sample(backend, prompt, 1, k=2, width=width)
    assert follows(second, p_first @ after_each)
    shape = (4, 2) if width > 1 else (2, 2)
    assert sum((r.nodes, r.depth) == shape for r in rounds) > 0.99 * SAMPLES
