"""Conversations saved as sessions from real engine events: each turn's speculative lane, then its
target-only lane, each lane after its own earlier answers with its caches kept across turns.

What the diff, export and fidelity tests of conversations read, and what wrote the conversation
fixture in tests/data/saved_sessions (`python -m tests.support.conversations DIR`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from specplay.cli.configure import run_config
from specplay.config.run_config import RunConfig
from specplay.engine.conversation import Exchange
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.stream import EventStream
from specplay.runner.session_run import local_token_text, open_writer, stream_lane

LANES = ("speculative", "target")

FIXTURE_PROMPTS = ("def fib(n):", "\n\ndef fact(n):", "\n\nclass Stack:")
"""The conversation fixture's turns: raw text the demo models continue, each turn a new function."""
FIXTURE_FLAGS: dict[str, Any] = {
    "target": "demo",
    "raw": True,
    "max_tokens": 16,
    "temperature": 0.8,
    "tv_budget": 0.4,
    "seed": 0,
}
"""The fixture's run: sampled, mentored D 0.4, so its lanes hold every token source and part."""


def record_conversation(
    stream: EventStream,
    config: RunConfig,
    prompts: Sequence[str],
    lanes: Sequence[str] = LANES,
    identity: Mapping[str, Any] | None = None,
) -> Path:
    """Run `prompts` as one conversation in each of `lanes` and save it in `config`'s sessions
    folder, as a run saves a sample; returns the finished session's path."""
    request = config.request
    earlier: dict[str, list[Exchange]] = {lane: [] for lane in lanes}
    writer = None
    try:
        for turn, prompt in enumerate(prompts):
            for lane in lanes:
                ids = tuple(stream.encode(prompt, request.raw, earlier[lane]))
                if writer is None:
                    writer = open_writer(
                        config,
                        replace(request, prompt=prompt, mode=lanes[0]),
                        prompt_token_ids=ids,
                        lanes=list(lanes),
                        identity=dict(identity if identity is not None else stream.describe()),
                        capabilities=stream.capabilities,
                        route_map=stream.routing.route_map,
                        token_text=local_token_text(stream),
                    )
                elif lane == lanes[0] and turn == writer.turns:
                    writer.start_turn(prompt)
                asked = Request(
                    prompt,
                    ids,
                    lane,  # type: ignore[arg-type]
                    request.seed,
                    request.max_tokens,
                    request.ignore_eos,
                    continues=turn > 0,
                )
                drafters = stream.drafters if lane != "target" else ()
                record = stream_lane(
                    stream,
                    asked,
                    controls=LiveControls(config.settings, drafters),
                    on_event=lambda _lane, _event: None,
                    writer=writer,
                )
                earlier[lane].append(Exchange(prompt, record.text))
        assert writer is not None
        return writer.finalize()
    finally:
        if writer is not None:
            writer.close()


def fixture_config(sessions_dir: Path, **flags: Any) -> RunConfig:
    return run_config(FIXTURE_FLAGS | {"sessions_dir": str(sessions_dir)} | flags)


if __name__ == "__main__":
    import sys

    import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core, as the CLI does)
    from specplay.backends import open_stream

    folder = Path(sys.argv[1])
    config = fixture_config(folder)
    stream = open_stream(config)
    try:
        print(record_conversation(stream, config, FIXTURE_PROMPTS))
    finally:
        stream.close()
