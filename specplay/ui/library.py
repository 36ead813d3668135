"""The shipped prompt library (specplay/data/prompts.jsonl), for the playground's prompt picker."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, slots=True)
class LibraryPrompt:
    category: str
    name: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.name} ({self.category})"


def library_prompts() -> list[LibraryPrompt]:
    """Every prompt of the library, in file order; a malformed line is skipped (the picker is a convenience)."""
    text = resources.files("specplay.data").joinpath("prompts.jsonl").read_text(encoding="utf-8")
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(line)
            prompts.append(LibraryPrompt(str(row["category"]), str(row.get("name", f"line {number}")), row["text"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return prompts
