"""Sessions written from hand-made engine events: what the export, review, diff and fault tests read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specplay.engine.events import (
    ControlEvent,
    DoneEvent,
    DraftPosition,
    Event,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
)
from specplay.engine.layout import chain
from specplay.engine.metrics import Metrics
from specplay.engine.rules import RuleParams
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.store import SessionWriter
from specplay.store.codec import capabilities_from_header
from tests.support.mutations import nested_arrays

PROMPT_IDS = (5, 6, 7)
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
# Spoken-for speculative output: one round of two accepted drafts and a bonus, one with a budget
# token and a correction.
ROUNDS = [
    [Token(10, "def", "accepted"), Token(11, " fib", "accepted"), Token(12, "(", "bonus")],
    [Token(13, "n", "relaxed"), Token(14, "):", "corrected")],
]


def settings(temperature: float = 0.0, tv_budget: float = 0.0) -> SpecSettings:
    return SpecSettings(rule_params=RuleParams(tv_budget=tv_budget), sampling=SamplingParams(temperature))


def _position(token: Token) -> DraftPosition:
    outcome = "rejected" if token.source == "corrected" else token.source
    return DraftPosition(token.token_id, 0.5, 0.5, 0.1, 0.2, 0.0, outcome)  # type: ignore[arg-type]


def _metrics(speculative: bool, rounds: list[RoundEvent], sources: list[str], seconds: float) -> dict:
    metrics = Metrics(speculative)
    for event in rounds:
        metrics.add_round(event)
    # First token at 0 s, the rest at `seconds`: tokens_per_s = (n - 1) / seconds.
    metrics.add_tokens(sources[:1], 0.0)  # type: ignore[arg-type]
    metrics.add_tokens(sources[1:], seconds)  # type: ignore[arg-type]
    return metrics.to_dict()


def speculative_events(
    rounds: Sequence[Sequence[Token]] = ROUNDS,
    temperature: float = 0.0,
    tv_budget: float = 0.0,
    changes: Sequence[ControlEvent] = (),
    finish: str | None = "length",
    seconds: float = 1.0,
    routes: Sequence[str] = (),
) -> list[Event]:
    """A speculative lane; `changes` go in before the round that starts at their token index;
    `routes`: each round's drafter (default: near)."""
    events: list[Event] = [StartEvent("speculative", "near", "near", PROMPT_IDS, 0, settings(temperature, tv_budget))]
    round_events, tokens = [], []
    for index, round_tokens in enumerate(rounds):
        events += [c for c in changes if c.token_index == len(tokens)]
        drafted = [t for t in round_tokens if t.source != "bonus"]
        accepted = sum(t.source in ("accepted", "relaxed") for t in round_tokens)
        event = RoundEvent(
            index,
            len(tokens),
            routes[index] if index < len(routes) else "near",
            tuple(t.token_id for t in drafted),
            chain(len(drafted)),
            tuple(_position(t) for t in drafted),
            accepted,
            tuple(round_tokens),
            1.0,
            2.0,
            0.1,
        )
        events.append(event)
        round_events.append(event)
        tokens += round_tokens
    if finish is not None:
        metrics = _metrics(True, round_events, [t.source for t in tokens], seconds)
        events.append(DoneEvent(finish, tuple(t.token_id for t in tokens), "".join(t.text for t in tokens), metrics))  # type: ignore[arg-type]
    return events


def target_events(
    tokens: Sequence[tuple[int, str]], temperature: float = 0.0, finish: str | None = "length", seconds: float = 2.0
) -> list[Event]:
    events: list[Event] = [StartEvent("target", None, "near", PROMPT_IDS, 0, settings(temperature))]
    events += [StepEvent(i, None, Token(token_id, text, "target"), 1.0) for i, (token_id, text) in enumerate(tokens)]
    if finish is not None:
        metrics = _metrics(False, [], ["target"] * len(tokens), seconds)
        events.append(DoneEvent(finish, tuple(i for i, _ in tokens), "".join(t for _, t in tokens), metrics))  # type: ignore[arg-type]
    return events


def same_as_rounds(rounds: Sequence[Sequence[Token]] = ROUNDS) -> list[tuple[int, str]]:
    return [(t.token_id, t.text) for r in rounds for t in r]


def write_session(
    directory: Path,
    lanes: dict[str, list[Event]],
    prompt: str = "def fib(n):",
    finalize: bool = True,
    source: str = "models/target",
    backend: dict[str, Any] | None = None,
    later_turns: Sequence[tuple[str, dict[str, list[Event]]]] = (),
) -> Path:
    """`backend`: the header's description of the models (default: MLX models at `source`);
    `later_turns`: a conversation's later turns, each its prompt and its lanes' events."""
    identity = {"source": source, "path": source, "weights_sha256": "ab" * 32, "weights_hash": "full"}
    if backend is None:
        models = {"target": identity, "near": identity | {"source": "near"}}
        backend = {"backend": "mlx", "device": "cpu", "models": models}
    request = {"mode": next(iter(lanes)), "seed": 0, "max_tokens": 5, "ignore_eos": False, "raw": True}
    capabilities = capabilities_from_header({"backend": backend})  # what a source on this backend says
    writer = SessionWriter(
        directory,
        prompt=prompt,
        prompt_token_ids=list(PROMPT_IDS),
        lanes=list(lanes),
        backend=backend,
        request=request,
        capabilities=capabilities,
    )
    for index, (turn_prompt, turn_lanes) in enumerate([(prompt, lanes), *later_turns]):
        if index:
            writer.start_turn(turn_prompt)
        for name, events in turn_lanes.items():
            for event in events:
                writer.write_event(name, event)
    if finalize:
        return writer.finalize()
    writer.close()
    return writer.path


def write_deep_session(directory: Path, depth: int = 100_000, prompt: str = "deep") -> Path:
    """A finished session whose second record holds data nested `depth` arrays deep."""
    path = write_session(
        directory, {"speculative": speculative_events(), "target": target_events(same_as_rounds())}, prompt=prompt
    )
    lines = path.read_text(encoding="utf-8").split("\n")
    deep = '{"type": "event", "lane": "speculative", "kind": "round", "data": ' + nested_arrays(depth) + "}"
    path.write_text("\n".join([lines[0], deep, *lines[1:]]), encoding="utf-8")
    return path
