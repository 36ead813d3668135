"""Exact corrections in vLLM inspection mode (--vllm-exact-correction): the rejection sampler's
distribution, its bound, and the lane against fake servers (tests/support/fake_vllm.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from specplay.backends.vllm import VllmBackend, connect_vllm_backend
from specplay.backends.vllm import local as vllm_local
from specplay.backends.vllm.exact import (
    SAMPLE_CAP,
    ExactDraw,
    LazyCorrections,
    Sample,
    capped_bound,
    p_draft_range,
    rejection_draw,
)
from specplay.backends.vllm.generation import Strategy, VllmGeneration
from specplay.backends.vllm.protocol import completion_body
from specplay.backends.vllm.report import inspection_report, report_line
from specplay.backends.vllm.topk import TopK, residual, residual_error_bound, tv_bracket
from specplay.cli import main
from specplay.engine.events import Event
from specplay.engine.settings import SamplingParams
from tests.support.checks import every
from tests.support.distributions import truncated
from tests.support.engine_runs import done, rounds, run
from tests.support.fake_vllm import FakeVllm
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

PROMPT = "def parse(path):\n    with open(path) as f:\n        return"
DRAWS = 20_000
TV_TOLERANCE = 0.02
WORST_CAPPED = capped_bound(1.0, 0.0, 1.0)
"""An exact position's error bound at worst: max over TV of TV (1 - TV)^64, 0.0057."""
CHI2_999 = {4: 18.467}
"""The chi-square distribution's 0.999 quantile by degrees of freedom (a 1-in-1000 false alarm)."""

# Fabricated exact distributions over 8 tokens: the residual has 5 tokens of support, TV = 0.41.
P_TARGET = np.array([0.30, 0.20, 0.15, 0.12, 0.10, 0.08, 0.04, 0.01])
P_DRAFT = np.array([0.10, 0.35, 0.05, 0.05, 0.20, 0.05, 0.03, 0.17])


def server_sampler(p_target: np.ndarray, seed: int) -> Callable[[int, int], list[Sample]]:
    """Stands in for the target's server: n fresh draws y ~ p_target with p_target(y)."""
    rng, cdf = np.random.default_rng(seed), np.cumsum(p_target)

    def sample(first: int, n: int) -> list[Sample]:
        ys = np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), len(cdf) - 1)
        return [(int(y), float(p_target[y])) for y in ys]

    return sample


def exact_residual(p_target: np.ndarray, p_draft: np.ndarray) -> np.ndarray:
    excess = np.maximum(p_target - p_draft, 0.0)
    return excess / excess.sum()


def goodness_of_fit(counts: np.ndarray, expected: np.ndarray) -> tuple[float, float, int]:
    """(TV between empirical and expected, chi-square statistic, degrees of freedom) over the
    expected support; counts outside it fail the test on their own."""
    total = counts.sum()
    support = expected > 0
    assert counts[~support].sum() == 0, "drew a token with no residual mass"
    tv = 0.5 * float(np.abs(counts / total - expected).sum())
    chi2 = float((((counts - total * expected)[support] ** 2) / (total * expected[support])).sum())
    return tv, chi2, int(support.sum()) - 1


TV = float(np.maximum(P_TARGET - P_DRAFT, 0).sum())


def draw_many(
    p_draft_of: Callable[[int], tuple[float, float]],
    look_up: Callable[[Sequence[int]], dict[int, float]],
    tv_lower: float = TV,
) -> tuple[np.ndarray, list[ExactDraw]]:
    """DRAWS corrections, each by rejection_draw, and how often each token came out."""
    sample = server_sampler(P_TARGET, seed=11)
    accept_rng = np.random.default_rng(12)
    counts = np.zeros(len(P_TARGET))
    draws = [rejection_draw(sample, p_draft_of, look_up, accept_rng, tv_lower) for _ in range(DRAWS)]
    for draw in draws:
        assert draw.token is not None  # at TV 0.41 the cap (64 draws) is never reached: 0.59^64 = 2e-15
        counts[draw.token] += 1
    return counts, draws


def test_rejection_from_target_samples_draws_the_residual_exactly() -> None:
    counts, draws = draw_many(lambda y: (float(P_DRAFT[y]), float(P_DRAFT[y])), lambda ys: {})
    tv, chi2, dof = goodness_of_fit(counts, exact_residual(P_TARGET, P_DRAFT))
    print(f"exact p_draft: TV {tv:.4f}, chi2 {chi2:.2f} (dof {dof}), {DRAWS} draws")
    assert tv < TV_TOLERANCE
    assert chi2 < CHI2_999[dof]
    # a batch is sized to hold an accepted draw 99% of the time at this TV
    assert np.mean([d.batches for d in draws]) < 1.05
    assert every(d.lookups == 0 for d in draws)

    # The drafter listed its top 3 only; the rest of p_draft is bracketed and looked up when the
    # bracket leaves a decision open. Same seeds, so every decision must come out as above.
    listed = TopK({i: float(P_DRAFT[i]) for i in (1, 4, 7)}, 1.0 - float(P_DRAFT[[1, 4, 7]].sum()))
    asked: list[int] = []

    def look_up(ys: Sequence[int]) -> dict[int, float]:
        asked.extend(ys)
        return {y: float(P_DRAFT[y]) for y in ys}

    _, bracketed = draw_many(lambda y: p_draft_range(listed, y), look_up)
    assert [d.token for d in bracketed] == [d.token for d in draws]
    assert asked and set(asked) <= {0, 2, 3, 5, 6}  # never a listed token
    assert every(d.lookups <= d.batches for d in bracketed)  # one look-up per batch at most


def test_small_batches_chain_without_bias() -> None:
    # Batches of 2 (sized as if TV were 0.95): many corrections take several requests, each batch
    # seeded after the samples before it; the tokens must still follow the residual.
    counts, draws = draw_many(lambda y: (float(P_DRAFT[y]), float(P_DRAFT[y])), lambda ys: {}, tv_lower=0.95)
    tv, chi2, dof = goodness_of_fit(counts, exact_residual(P_TARGET, P_DRAFT))
    batches = np.mean([d.batches for d in draws])
    print(f"batches of 2: TV {tv:.4f}, chi2 {chi2:.2f} (dof {dof}), {batches:.2f} requests per correction")
    assert tv < TV_TOLERANCE
    assert chi2 < CHI2_999[dof]
    assert batches > 1.2 and every(d.requested == 2 * d.batches for d in draws)


def test_the_cap_falls_back_and_counts_its_draws() -> None:
    p_target = np.array([0.5, 0.3, 0.2])
    p_draft = np.array([0.499, 0.301, 0.2])  # TV 0.001: 64 draws are almost never enough
    free: list[Sample] = [(1, 0.3)]  # a draw in hand counts to the cap
    draw = rejection_draw(
        server_sampler(p_target, 3),
        lambda y: (float(p_draft[y]), float(p_draft[y])),
        lambda ys: {},
        np.random.default_rng(4),
        0.001,
        SAMPLE_CAP,
        free,
    )
    assert draw.token is None and draw.requested == SAMPLE_CAP - 1 and draw.batches == 1


@pytest.mark.parametrize("k", [2, 5, 20])
def test_capped_bound_and_safe_brackets_hold(k: int) -> None:
    rng = np.random.default_rng(k)
    for trial in range(200):
        vocab = 40
        alpha = [0.05, 0.3, 1.0][trial % 3]
        p_target = rng.dirichlet([alpha] * vocab)
        other = rng.dirichlet([alpha] * vocab)
        p_draft = 0.5 * p_target + 0.5 * other if trial % 2 else other
        tv = 0.5 * np.abs(p_target - p_draft).sum()
        sampled = int(rng.choice(vocab, p=p_draft))
        listed_target, listed_draft = truncated(p_target, k), truncated(p_draft, k, sampled)
        unlisted = [v for v in range(vocab) if v not in listed_draft.probs]
        assert every(p_draft[v] <= listed_draft.unlisted_max + 1e-12 for v in unlisted)
        lower, upper = tv_bracket(listed_target, listed_draft)
        assert lower - 1e-12 <= tv <= upper + 1e-12
        # Position error with the cap: P(reject) = TV, then (1 - TV)^cap of falling back to the
        # top-K residual, whose error against the exact one is at most the residual's bound / TV.
        exact = np.maximum(p_target - p_draft, 0) / max(tv, 1e-300)
        approx = np.zeros(vocab)
        for token, mass in residual(listed_target, listed_draft).items():
            approx[token] = mass
        bound = residual_error_bound(listed_target, listed_draft)
        for cap in (1, 4, SAMPLE_CAP):
            error = tv * (1 - tv) ** cap * 0.5 * np.abs(exact - approx).sum()
            assert error <= capped_bound(bound, lower, upper, cap) + 1e-12


def test_an_exact_positions_bound_is_small_whatever_the_bracket() -> None:
    worst = capped_bound(1.0, 0.0, 1.0)  # the top-K residual's bound at its largest, TV unknown
    assert worst == pytest.approx((1 / 65) * (64 / 65) ** 64) and worst < 0.0058
    assert capped_bound(0.05, 0.3, 0.5) < 1e-11  # a typical rejection: TV at least 0.3


def test_lazy_corrections_draw_only_what_is_read() -> None:
    calls: list[int] = []

    def draw_at(i: int) -> Callable[[], int]:
        def draw() -> int:
            calls.append(i)
            return 100 + i

        return draw

    corrections = LazyCorrections([draw_at(i) for i in range(4)])
    assert len(corrections) == 4 and calls == []
    assert corrections[2] == 102 and corrections[2] == 102 and corrections[-1] == 103
    assert calls == [2, 3] and corrections.drawn == {2: 102, 3: 103}
    with pytest.raises(IndexError):
        corrections[4]


# --- against fake servers -------------------------------------------------------------------------


def full_probs(server: FakeVllm, prefix: Sequence[int]) -> np.ndarray:
    """The server's whole next-token distribution at temperature 1 (logprobs -1: every token)."""
    body = completion_body(
        server.served_name,
        prefix,
        max_tokens=1,
        sampling=SamplingParams(1.0),
        seed=0,
        logprobs=-1,
        return_tokens_as_token_ids=True,
    )
    (choice, *_), _, _ = server.completion(body)  # straight to the model, not through the request log
    out = np.zeros(server.vocab_size)
    for key, logprob in choice["logprobs"]["top_logprobs"][0].items():
        out[int(key.removeprefix("token_id:"))] = math.exp(logprob)
    return out


def rejections(events: list[Event], prompt_ids: Sequence[int]) -> list[tuple[list[int], int]]:
    """(prefix, corrected token) of every round that rejected a drafted token."""
    generated = list(done(events).token_ids)
    out = []
    for r in rounds(events):
        for i, position in enumerate(r.positions):
            if position.outcome == "rejected":
                assert r.tokens[i].source == "corrected"
                prefix = [*prompt_ids, *generated[: r.token_index], *r.drafted[:i]]
                out.append((prefix, r.tokens[i].token_id))
    return out


def completions_since(server: FakeVllm, since: int) -> list[dict[str, Any]]:
    return [body for path, body in server.requests[since:] if path == "/v1/completions"]


@pytest.mark.parametrize("strategy", ["prompt-logprobs", "prefixes"])
def test_exact_corrections_spend_requests_only_at_rejections(
    servers: tuple[FakeVllm, FakeVllm], strategy: Strategy
) -> None:
    target, near = servers
    vllm = connect_vllm_backend(
        target.url, remote_drafters=[("near", near.url)], strategy=strategy, exact_correction=True
    )
    prompt_ids = vllm.encode(PROMPT, raw=True)
    since_target, since_near = len(target.requests), len(near.requests)
    events = run(vllm, PROMPT, max_tokens=10, temperature=1.0, seed=7, k=4)
    rejected = rejections(events, prompt_ids)
    assert rejected, "pick a seed whose run rejects something"
    prefixes = [prefix for prefix, _ in rejected]
    sampling = [body for body in completions_since(target, since_target) if "n" in body]
    assert every(body["prompt"] in prefixes and body["max_tokens"] == 1 for body in sampling)
    if strategy == "prompt-logprobs":  # no free draw from verification: every rejection asks
        assert {tuple(prefix) for prefix in prefixes} <= {tuple(body["prompt"]) for body in sampling}
    lookups = [body for body in completions_since(near, since_near) if "logprob_token_ids" in body]
    assert every(body["prompt"] in prefixes for body in lookups)
    for prefix, corrected in rejected:  # the correction is where the target has more mass than the drafter
        p_target, p_draft = full_probs(target, prefix), full_probs(near, prefix)
        assert p_target[corrected] > p_draft[corrected]
    judged = [p for r in rounds(events) for p in r.positions if p.outcome != "unreached"]
    # bounds are computed before judging: only the cap's chance of a top-K fallback is left of them
    assert every(p.error_bound is not None and p.error_bound <= WORST_CAPPED for p in judged)
    report = inspection_report(done(events).metrics)
    exact = report["exact_correction"]
    assert exact["corrections"] + exact["capped"] == len(rejected) and exact["inexact"] == 0
    assert exact["target_requests"] == len(sampling) and exact["drafter_requests"] == len(lookups)
    assert exact["requests"] == len(sampling) + len(lookups)
    assert report["approximate"] is (exact["capped"] > 0)  # T = 1 with prompt or sample logprobs: exact
    assert "exact corrections" in report_line(report)
    assert vllm.describe()["exact_correction"] is True
    print(f"{strategy}: {len(rejected)} rejections, {exact}")
    vllm.close()


def test_without_the_flag_nothing_changes(servers: tuple[FakeVllm, FakeVllm]) -> None:
    target, near = servers
    plain = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)])
    exact = connect_vllm_backend(target.url, remote_drafters=[("near", near.url)], exact_correction=True)
    since = len(target.requests)
    events = run(plain, PROMPT, max_tokens=6, temperature=1.0, seed=5, k=4)
    assert not any("n" in body for body in completions_since(target, since))
    report = inspection_report(done(events).metrics)
    assert report["exact_correction"] is None and "exact corrections" not in report_line(report)
    assert plain.describe()["exact_correction"] is False
    # the same seed drafts and verifies the first round alike; only the bounds (and corrections) differ
    first_plain = rounds(events)[0]
    first_exact = rounds(run(exact, PROMPT, max_tokens=6, temperature=1.0, seed=5, k=4))[0]
    assert first_exact.drafted == first_plain.drafted
    for a, b in zip(first_plain.positions, first_exact.positions, strict=True):
        assert (a.p_target, a.p_draft, a.tv_distance, a.tv_lower) == (b.p_target, b.p_draft, b.tv_distance, b.tv_lower)
        assert a.error_bound is not None and b.error_bound is not None and b.error_bound <= a.error_bound
    plain.close()
    exact.close()


def test_local_drafter_rows_cut_short_are_recomputed_exactly(
    tiny: TinyModels, servers: tuple[FakeVllm, FakeVllm], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, near = servers
    monkeypatch.setattr(vllm_local, "MAX_LISTED", 8)  # local rows list 8 tokens: the rest is bracketed
    looked_up: list[tuple[list[int], dict[int, float]]] = []
    original = VllmGeneration._local_p_draft

    def spy(self: VllmGeneration, at: Any, tokens: Sequence[int]) -> dict[int, float]:
        found = original(self, at, tokens)
        looked_up.append((list(at.prefix), found))
        return found

    monkeypatch.setattr(VllmGeneration, "_local_p_draft", spy)
    opened: list[VllmGeneration] = []
    open_generation = VllmBackend.open_generation
    monkeypatch.setattr(
        VllmBackend, "open_generation", lambda *a, **kw: opened.append(open_generation(*a, **kw)) or opened[-1]
    )
    mixed = connect_vllm_backend(target.url, local_drafters=[("near", str(tiny.near))], exact_correction=True)
    prompt_ids = mixed.encode(PROMPT, raw=True)
    events = run(mixed, PROMPT, max_tokens=10, temperature=1.0, seed=4, k=4)
    rejected = rejections(events, prompt_ids)
    local_lookups = done(events).metrics["vllm"]["exact_correction"]["local_lookups"]
    assert rejected and looked_up and local_lookups == len(looked_up)
    for prefix, found in looked_up:  # the recomputed row is the drafter's, whatever its cache held
        p_draft = full_probs(near, prefix)
        assert every(abs(found[t] - p_draft[t]) < 1e-4 for t in found)
    generation = opened[-1]
    cache = generation.local["near"].cache
    assert cache.length == cache.offset() and cache.length <= len(generation.tokens)
    mixed.close()


def test_cli_flag_reaches_the_backend_and_the_report(
    servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str]
) -> None:
    target, near = servers
    urls = ["--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}"]
    args = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "6", "--temperature", "1", "--no-baseline", "--json"]
    assert main(["run", *urls, *args, "--vllm-exact-correction"]) == 0
    exact = json.loads(capsys.readouterr().out)["vllm"]["exact_correction"]
    assert exact is not None and set(exact) >= {"corrections", "requests", "samples"}
    assert main(["run", *urls, *args]) == 0
    assert json.loads(capsys.readouterr().out)["vllm"]["exact_correction"] is None


def test_fake_server_honours_n(servers: tuple[FakeVllm, FakeVllm]) -> None:
    target, _ = servers
    prompts = [[1, 2, 3], [1, 2, 3, 4]]
    body = completion_body("target", prompts, max_tokens=1, sampling=SamplingParams(1.0), seed=7, logprobs=2, n=5)
    choices, _, _ = target.completion(body)
    assert [c["index"] for c in choices] == list(range(10))
    assert [c["prompt_token_ids"] for c in choices] == [prompts[0]] * 5 + [prompts[1]] * 5  # prompt-major
    again, _, _ = target.completion(body)
    assert [c["token_ids"] for c in again] == [c["token_ids"] for c in choices]  # the seed repeats them
    draws = [c["token_ids"][0] for c in choices[:5]]
    assert len(set(draws)) > 1  # each sample its own draw
    # sample j is seeded seed + j, as vLLM seeds its parallel samples
    single = target.completion(
        completion_body("target", prompts[0], max_tokens=1, sampling=SamplingParams(1.0), seed=9, logprobs=2)
    )[0]
    assert single[0]["token_ids"] == choices[2]["token_ids"]
