"""The top-K acceptance math of the vLLM backend, and native mode's pure parts; no servers."""

from __future__ import annotations

import numpy as np
import pytest

from specplay.backends.vllm.native import counter_delta, parse_prometheus, recolour
from specplay.backends.vllm.topk import (
    TopK,
    apply_filters,
    from_logprobs,
    processed,
    residual,
    residual_error_bound,
    temper,
    tv_bracket,
)
from specplay.config.urls import named_url, server_root
from specplay.engine.rules import Mentored, mentored_theta
from specplay.engine.settings import SamplingParams
from specplay.errors import ConfigError
from tests.support.checks import every
from tests.support.distributions import truncated
from tests.support.engine_runs import chunk_sources


def test_worked_example_of_the_research_note() -> None:
    # vllm-api.md §7, position 2 of the verify example
    p_target = from_logprobs({975: -2.99, 701: -0.07, 322: -5.0})
    p_draft = from_logprobs({975: -0.051, 701: -3.4, 322: -5.1})
    assert p_target.tail == pytest.approx(0.0106, abs=1e-3)
    lo, hi = tv_bracket(p_target, p_draft)
    assert lo == pytest.approx(0.900, abs=2e-3) and hi == pytest.approx(0.910, abs=2e-3)
    theta = mentored_theta(hi, 0.3)
    assert theta == pytest.approx(0.330, abs=2e-3)
    accept = Mentored(tv_budget=0.3).accept_probability(p_target.probs[975], p_draft.probs[975], {"tv": hi})
    assert accept == pytest.approx(0.365, abs=2e-3)
    assert residual(p_target, p_draft)[701] == pytest.approx(0.9993, abs=1e-3)
    assert residual_error_bound(p_target, p_draft) == pytest.approx(0.0106, abs=1e-3)


@pytest.mark.parametrize("k", [1, 3, 8, 20])
def test_tv_bracket_and_residual_bound_hold_under_truncation(k: int) -> None:
    rng = np.random.default_rng(k)
    for trial in range(300):
        vocab = 40
        alpha = [0.05, 0.3, 1.0][trial % 3]
        p = rng.dirichlet([alpha] * vocab)
        q = 0.5 * p + 0.5 * rng.dirichlet([alpha] * vocab) if trial % 2 else rng.dirichlet([alpha] * vocab)
        tv = 0.5 * np.abs(p - q).sum()
        # the sampled or actual token is listed too, often far below the top-k
        p_k, q_k = truncated(p, k, int(rng.integers(vocab))), truncated(q, k, int(rng.choice(vocab, p=q)))
        assert every(p[v] <= p_k.unlisted_max + 1e-12 for v in range(vocab) if v not in p_k.probs)
        lo, hi = tv_bracket(p_k, q_k)
        assert lo - 1e-12 <= tv <= hi + 1e-12
        # theta from the upper end keeps the budget guaranteed: the output moves theta * TV <= D
        for budget in (0.05, 0.3):
            assert mentored_theta(hi, budget) * tv <= budget + 1e-12
        # the residual from top-K changes the emitted distribution by at most the bound
        exact = np.maximum(p - q, 0)
        exact = exact / exact.sum() if exact.sum() > 0 else p
        approx = np.zeros(vocab)
        for token, mass in residual(p_k, q_k).items():
            approx[token] = mass
        emitted_error = tv * 0.5 * np.abs(exact - approx).sum()  # rejection probability x TV of the residuals
        assert emitted_error <= residual_error_bound(p_k, q_k) + 1e-9


def test_full_distributions_are_exact() -> None:
    p = {0: 0.5, 1: 0.3, 2: 0.2}
    q = {0: 0.2, 1: 0.3, 2: 0.5}
    lo, hi = tv_bracket(TopK(p, 0.0), TopK(q, 0.0))
    assert lo == pytest.approx(0.3) and hi == pytest.approx(0.3)
    assert residual_error_bound(TopK(p, 0.0), TopK(q, 0.0)) == 0.0


def test_tempering_and_filters() -> None:
    full = TopK({0: 0.6, 1: 0.3, 2: 0.1}, 0.0)
    cooled, exact = temper(full, 0.5, 3)
    assert exact and cooled.probs[0] == pytest.approx(0.36 / 0.46)
    listed = TopK({0: 0.6, 1: 0.3}, 0.1)
    _, exact = temper(listed, 0.5, 100)
    assert not exact
    kept, exact = apply_filters(listed, SamplingParams(1.0, top_k=1))
    assert exact and kept.probs == {0: 1.0} and kept.tail == 0
    kept, exact = apply_filters(listed, SamplingParams(1.0, top_p=0.5))
    assert exact and set(kept.probs) == {0} and kept.tail == 0
    kept, exact = apply_filters(listed, SamplingParams(1.0, top_p=0.95))
    assert not exact and kept.tail > 0
    kept, exact = processed(listed, SamplingParams(1.0), 100, raw=True)
    assert exact and kept == listed


def test_recolour_from_per_step_arrays() -> None:
    # vllm-api.md §7(c): k = 2, seven tokens: prefill, acc, acc, bonus, corrected, acc, corrected
    sources = recolour(7, [2, 0, 1], [2, 2, 2])
    assert sources == ["target", "accepted", "accepted", "bonus", "corrected", "accepted", "corrected"]
    assert recolour(5, [2, 0, 1], [2, 2, 2]) == sources[:5]  # max_tokens cut the last step
    assert chunk_sources([1, 3, 1, 2], 2) == [
        "target",
        "accepted",
        "accepted",
        "bonus",
        "corrected",
        "accepted",
        "corrected",
    ]


def test_prometheus_labels_parsed_by_name() -> None:
    text = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{model_name="t",engine="0"} 3.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="t"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="t",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0",model_name="t",engine="0"} 2.0
vllm:generation_tokens_total{engine="0",model_name="t"} 7.0
"""
    parsed = parse_prometheus(text)
    assert parsed["vllm:spec_decode_num_drafts_total"] == 5.0
    assert parsed["vllm:spec_decode_num_accepted_tokens_per_pos_total[0]"] == 2.0
    delta = counter_delta({"vllm:generation_tokens_total": 2.0}, parsed)
    assert delta["vllm:generation_tokens_total"] == 5.0


def test_urls_with_or_without_v1() -> None:
    assert server_root("http://gpu:8000/v1") == server_root("http://gpu:8000/") == "http://gpu:8000"
    assert named_url("code=http://gpu:8001/v1") == ("code", "http://gpu:8001")
    assert named_url("http://gpu:8001") == (None, "http://gpu:8001")
    with pytest.raises(ConfigError, match="http://"):
        server_root("gpu:8000")
