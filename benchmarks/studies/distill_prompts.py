"""Instruction prompts for distilling a drafter for a chat target: creative writing and code
editing, like the study's prompts, made from the texts every specplay install ships
(specplay/data/*.jsonl). Deterministic, so the training data can be rebuilt exactly.

    python benchmarks/studies/distill_prompts.py OUT.jsonl
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

CODE_TASKS = (
    "Rewrite this code with clearer names and a docstring:\n\n{text}",
    "Finish this code and explain it in two sentences:\n\n{text}",
    "Refactor this function to be shorter, keeping what it does:\n\n{text}",
    "Add type hints and comments to this code:\n\n{text}",
)
PROSE_TASKS = (
    "Write a short story that begins like this:\n\n{text}",
    "Continue this text in the same voice for a paragraph:\n\n{text}",
    "Rewrite this as a short poem:\n\n{text}",
    "Explain this to a ten-year-old:\n\n{text}",
)


def texts() -> list[tuple[str, str]]:
    """(category, text) of every shipped prompt: the library's and the router set's."""
    out = []
    for name in ("prompts.jsonl", "router_prompts.jsonl"):
        for line in resources.files("specplay.data").joinpath(name).read_text(encoding="utf-8").split("\n"):
            if line.strip():
                row = json.loads(line)
                out.append((row.get("category") or row.get("label") or "prose", row["text"].strip()))
    return out


def prompts() -> list[str]:
    """Two instructions per text, taken in turn from the code or the prose tasks."""
    out = []
    for i, (category, text) in enumerate(texts()):
        tasks = CODE_TASKS if category == "code" else PROSE_TASKS
        out += [tasks[i % len(tasks)].format(text=text), tasks[(i + 1) % len(tasks)].format(text=text)]
    return out


if __name__ == "__main__":
    path = Path(sys.argv[1])
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts()), encoding="utf-8")
    print(f"{len(prompts())} prompts written to {path}")
