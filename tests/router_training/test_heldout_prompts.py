"""The routing benchmarks' held-out prompts stay held out: none is a library prompt or one of the
router's test prompts, by name or by text, and each set covers its categories: the first every
library category with 12 or more, issue 60's (specplay/data/routing_heldout.jsonl) mixed code and
prose, long copy-heavy edits and short chat, three each."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from pathlib import Path

from specplay.data.library import library_prompts, read_prompts

HELD_OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "heldout_prompts.jsonl"
ROUTING_HELD_OUT = Path(__file__).resolve().parents[2] / "specplay" / "data" / "routing_heldout.jsonl"


def _tuned_on() -> set[str]:
    """The texts the heuristic and the learned router's defaults were tuned or tested on."""
    router_text = resources.files("specplay.data").joinpath("router_prompts.jsonl").read_text(encoding="utf-8")
    return {p.text for p in library_prompts()} | {json.loads(line)["text"] for line in router_text.splitlines() if line}


def test_no_held_out_prompt_is_one_the_routers_were_tuned_on() -> None:
    held_out = read_prompts(HELD_OUT)
    library = library_prompts()
    router_text = resources.files("specplay.data").joinpath("router_prompts.jsonl").read_text(encoding="utf-8")
    router_prompts = [json.loads(line)["text"] for line in router_text.splitlines() if line.strip()]
    seen_texts = {p.text for p in library} | set(router_prompts)
    assert not {p.name for p in held_out} & {p.name for p in library}
    assert not {p.text for p in held_out} & seen_texts
    # Nor a prompt's first line: a near copy of a tuned prompt is not held out either.
    first_lines = {text.splitlines()[0] for text in seen_texts if text.strip()}
    assert not {p.text.splitlines()[0] for p in held_out} & first_lines
    counts = Counter(p.category for p in held_out)
    assert len(held_out) >= 12 and set(counts) == {"code", "prose", "mixed", "editing"} and min(counts.values()) >= 3


def test_the_routing_held_out_set_is_unlike_the_library_and_the_other_held_out_set() -> None:
    held_out = read_prompts(ROUTING_HELD_OUT)
    seen = _tuned_on() | {p.text for p in read_prompts(HELD_OUT)}
    first_lines = {text.splitlines()[0] for text in seen if text.strip()}
    assert not {p.text for p in held_out} & seen
    assert not {p.text.splitlines()[0] for p in held_out} & first_lines
    assert not {p.name for p in held_out} & {p.name for p in [*library_prompts(), *read_prompts(HELD_OUT)]}
    assert Counter(p.category for p in held_out) == {"mixed": 3, "copy-edit": 3, "chat": 3}
    copy_edits = [p for p in held_out if p.category == "copy-edit"]
    assert min(len(p.text) for p in copy_edits) >= 300  # long: what is copied outweighs what is asked
    assert max(len(p.text) for p in held_out if p.category == "chat") <= 60
