"""Terminal and JSON output of a run, built from the engine's events."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.text import Text

from specplay.display.palette import SOURCE_STYLES, visible
from specplay.engine.events import (
    ControlEvent,
    DoneEvent,
    Event,
    RecolourEvent,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
)


@dataclass
class RunRecord:
    """Everything a run's events say, collected for the summary and the JSON line."""

    start: StartEvent | None = None
    tokens: list[Token] = field(default_factory=list)
    rounds: list[RoundEvent] = field(default_factory=list)
    changes: list[ControlEvent] = field(default_factory=list)
    done: DoneEvent | None = None
    session: str | None = None
    """The session file the run was saved to."""

    def add(self, event: Event) -> None:
        if isinstance(event, StartEvent):
            self.start = event
        elif isinstance(event, RoundEvent):
            self.rounds.append(event)
            self.tokens.extend(event.tokens)
        elif isinstance(event, StepEvent):
            self.tokens.append(event.token)
        elif isinstance(event, ControlEvent):
            self.changes.append(event)
        elif isinstance(event, RecolourEvent):
            recoloured = [replace(t, source=s) for t, s in zip(self.tokens, event.sources, strict=False)]
            self.tokens[: len(recoloured)] = recoloured
        elif isinstance(event, DoneEvent):
            self.done = event

    def to_json(self) -> dict[str, Any]:
        assert self.start is not None and self.done is not None
        return {
            "mode": self.start.mode,
            "route": self.start.route,
            "seed": self.start.seed,
            "settings": asdict(self.start.settings),
            "prompt_token_ids": list(self.start.prompt_token_ids),
            "token_ids": list(self.done.token_ids),
            "text": self.done.text,
            "sources": [t.source for t in self.tokens],
            "finish_reason": self.done.finish_reason,
            "rounds": [
                {
                    "route": r.route,
                    "k": r.k,
                    "drafted": list(r.drafted),
                    "num_accepted": r.num_accepted,
                    "token_index": r.token_index,
                    "tokens": [t.token_id for t in r.tokens],
                    "sources": [t.source for t in r.tokens],
                    "positions": [asdict(p) for p in r.positions],
                    "draft_ms": r.draft_ms,
                    "verify_ms": r.verify_ms,
                    "overhead_ms": r.overhead_ms,
                }
                for r in self.rounds
            ],
            "control_changes": [
                {"token_index": c.token_index, "changes": [list(change) for change in c.changes]} for c in self.changes
            ],
            "metrics": self.done.metrics,
        }


def json_line(record: RunRecord, baseline: RunRecord | None = None) -> str:
    out = record.to_json()
    if record.session:
        out["session"] = record.session
    if baseline is not None and baseline.done is not None:
        out["baseline"] = {"token_ids": list(baseline.done.token_ids), "metrics": baseline.done.metrics}
    return json.dumps(out, ensure_ascii=False)


def legend() -> Text:
    text = Text("sources: ")
    for source in ("accepted", "budget", "corrected", "bonus"):
        text.append(source, style=SOURCE_STYLES[source]).append(" ")
    return text


def token_text(token: Token) -> Text:
    return Text(visible(token.text), style=SOURCE_STYLES[token.source])


def summary(record: RunRecord, baseline: RunRecord | None = None) -> str:
    assert record.start is not None and record.done is not None
    m, s = record.done.metrics, record.start.settings
    parts = [record.start.mode]
    if record.start.route is not None:
        parts.append(f"route {record.start.route}")
    if record.start.mode == "speculative":
        parts += [f"k {s.k} {s.policy}", f"D {s.tv_budget:g}"]
    parts += [f"temperature {s.sampling.temperature:g}", f"seed {record.start.seed}", f"{m['num_tokens']} tokens"]
    if m["tokens_per_s"] is not None:
        parts.append(f"{m['tokens_per_s']:.1f} tokens/s")
    if m["num_spec_steps"]:
        parts += [
            f"mean acceptance length {m['mean_acceptance_length']:.2f}",
            f"draft acceptance rate {100 * m['draft_acceptance_rate']:.1f}%",
            f"{m['num_spec_steps']} rounds",
        ]
        if m["tv_spent"]:
            parts.append(f"TV spent {m['tv_spent']:.2f}")
    parts.append(record.done.finish_reason)
    if baseline is not None and baseline.done is not None:
        target_tps = baseline.done.metrics["tokens_per_s"]
        if target_tps and m["tokens_per_s"]:
            parts.append(f"target-only {target_tps:.1f} tokens/s, speedup {m['tokens_per_s'] / target_tps:.2f}x")
    return " · ".join(parts)


def make_console() -> Console:
    return Console(highlight=False, soft_wrap=True)
