"""A target server that misreports what it computed (the fake server's `rewrite`, over real HTTP):
no token where one was asked for, or token ids its own logprobs contradict. Whatever the verify
strategy, the run ends in one line naming the server; its output never follows the lie."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from specplay.cli import main
from tests.support.fake_vllm import FakeVllm
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

Lie = Callable[[dict[str, Any]], None]
"""What the target says instead, told in each choice of a reply."""

ARGS = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "8", "--ignore-eos", "--timeout", "60"]
STRATEGIES = {
    "prompt-logprobs": ["--vllm-strategy", "prompt-logprobs", "--temperature", "0"],
    "prefixes": ["--vllm-strategy", "prefixes", "--temperature", "0"],
    "prefixes, exact corrections": ["--vllm-strategy", "prefixes", "--vllm-exact-correction", "--temperature", "1"],
}


def _top(choice: dict[str, Any]) -> dict[int, float]:
    """The choice's first listing, by token id."""
    return {int(key.removeprefix("token_id:")): lp for key, lp in choice["logprobs"]["top_logprobs"][0].items()}


def no_token(choice: dict[str, Any]) -> None:
    choice["token_ids"] = []


def an_unlisted_token(choice: dict[str, Any]) -> None:
    listed = _top(choice)
    choice["token_ids"][0] = next(t for t in range(len(listed) + 1) if t not in listed)


def a_less_likely_token(choice: dict[str, Any]) -> None:
    """Listed, but below the most likely: never a greedy choice."""
    listed = _top(choice)
    choice["token_ids"][0] = min(listed, key=listed.__getitem__)


def a_lower_token_ranked_first(choice: dict[str, Any]) -> None:
    """Each prompt row's rank 1 moved to its least likely listed token."""
    for row in choice.get("prompt_logprobs") or []:
        if row and len(row) > 1:
            first = next(key for key, value in row.items() if value["rank"] == 1)
            last = min(row, key=lambda key: row[key]["logprob"])
            row[first]["rank"], row[last]["rank"] = row[last]["rank"], 1


@pytest.fixture
def lying(servers: tuple[FakeVllm, FakeVllm]) -> Iterator[Callable[[Lie], None]]:
    """Makes the target tell `lie` in every completion after connecting's two probes."""
    target, _ = servers

    def tell(lie: Lie) -> None:
        told = [0]

        def rewrite(body: dict[str, Any], reply: dict[str, Any]) -> None:
            told[0] += 1
            if told[0] > 2 and body.get("logprobs") is not None:
                for choice in reply["choices"]:
                    lie(choice)

        target.rewrite = rewrite

    yield tell
    target.rewrite = None


def _run(servers: tuple[FakeVllm, FakeVllm], flags: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    target, near = servers
    code = main(
        ["run", "--backend", "vllm", "--target-url", target.url, "--draft-url", f"near={near.url}", *ARGS, *flags]
    )
    return code, capsys.readouterr().err


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_target_that_sends_no_token_ends_the_run_in_one_line(
    strategy: str,
    tiny: TinyModels,
    servers: tuple[FakeVllm, FakeVllm],
    lying: Callable[[Lie], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    lying(no_token)
    code, err = _run(servers, STRATEGIES[strategy], capsys)
    assert code == 2 and err.count("\n") == 1, err[-2000:]
    assert "vLLM server 'target'" in err and "no token" in err, err


LIES = {
    "an unlisted token": (an_unlisted_token, list(STRATEGIES), "its token_ids and its logprobs disagree"),
    "a less likely token at temperature 0": (
        a_less_likely_token,
        ["prompt-logprobs", "prefixes"],
        "its token_ids and its logprobs disagree",
    ),
    "a lower token ranked first": (
        a_lower_token_ranked_first,
        ["prompt-logprobs"],
        "its prompt_logprobs ranks and logprobs disagree",
    ),
}


@pytest.mark.parametrize(
    ("lie", "strategy"), [(lie, strategy) for lie, (_, strategies, _) in LIES.items() for strategy in strategies]
)
def test_a_target_whose_token_ids_its_logprobs_contradict_ends_the_run_in_one_line(
    lie: str,
    strategy: str,
    tiny: TinyModels,
    servers: tuple[FakeVllm, FakeVllm],
    lying: Callable[[Lie], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    tell, _, message = LIES[lie]
    lying(tell)
    code, err = _run(servers, STRATEGIES[strategy], capsys)
    assert code == 2 and err.count("\n") == 1, err[-2000:]
    assert "vLLM server 'target'" in err and message in err, err


def test_an_honest_target_runs_every_strategy(
    tiny: TinyModels, servers: tuple[FakeVllm, FakeVllm], capsys: pytest.CaptureFixture[str]
) -> None:
    for flags in STRATEGIES.values():
        code, err = _run(servers, flags, capsys)
        assert code == 0, err[-2000:]
