"""Prompt files: the shipped library (specplay/data/prompts.jsonl) and the user's own, one JSON
object per line with a category, a text and optionally a name and a note.

The library opens with prompts that show each route at its best and at its worst (their notes
say how); the first is the playground's prompt until the user types another."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specplay.errors import ConfigError
from specplay.files.inputs import DATA_LIMIT, InputError, read_input_text
from specplay.files.json_text import JsonError, parse_json


@dataclass(frozen=True, slots=True)
class Prompt:
    category: str
    name: str
    text: str
    note: str = ""
    """What the prompt shows, for the library's list."""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.category}) · {self.note}" if self.note else f"{self.name} ({self.category})"


def library_prompts() -> list[Prompt]:
    """Every prompt of the shipped library, in file order."""
    text = resources.files("specplay.data").joinpath("prompts.jsonl").read_text(encoding="utf-8")
    return parse_prompts(text, "the shipped prompt library", "prompts")


def read_prompts(path: Path, field: str = "prompts") -> list[Prompt]:
    """A user's prompt file; `field` names the flag that gave it, for the error."""
    try:
        text = read_input_text(path, "file", DATA_LIMIT)
    except InputError as error:
        raise ConfigError(field, f"{str(path)!r} cannot be read: {error.detail}") from None
    return parse_prompts(text, str(path), field)


def parse_prompts(text: str, source: str, field: str) -> list[Prompt]:
    prompts = []
    for number, line in enumerate(text.split("\n"), 1):  # JSON Lines end at "\n" only
        if not line.strip():
            continue
        try:
            row = parse_json(line, f"line {number} of {source}")
            name = str(row.get("name", f"line {number}"))
            prompt = Prompt(str(row["category"]), name, str(row["text"]), str(row.get("note", "")))
        except (JsonError, KeyError, TypeError, AttributeError):
            raise ConfigError(field, f"line {number} of {source} is not a {{category, text}} object") from None
        if not prompt.text.strip():  # found here, not mid-run as "--prompt encodes to no tokens"
            raise ConfigError(field, f"line {number} of {source} has an empty text; give each prompt its text")
        prompts.append(prompt)
    return prompts
