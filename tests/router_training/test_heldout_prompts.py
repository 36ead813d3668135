"""The routing benchmarks' held-out prompts stay held out: none is a library prompt or one of the
router's test prompts, by name or by text, and the set covers every category with 12 or more."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from pathlib import Path

from specplay.data.library import library_prompts, read_prompts

HELD_OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "heldout_prompts.jsonl"


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
