"""Prompt files: the shipped library (specplay/data/prompts.jsonl) and the user's own, one JSON
object per line with a category, a text and optionally a name and a note; or Spec-Bench's
question file as it is (data/spec_bench.py), told apart by its first line.

The library opens with prompts that show each route at its best and at its worst (their notes
say how); the first is the playground's prompt until the user types another."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specplay.data import spec_bench
from specplay.data.prompt import Prompt
from specplay.errors import ConfigError
from specplay.files.inputs import DATA_LIMIT, InputError, read_input_text
from specplay.files.json_text import JsonError, parse_json

__all__ = ["Prompt", "PromptFile", "library_prompts", "parse_prompts", "read_prompt_file", "read_prompts"]


@dataclass(frozen=True, slots=True)
class PromptFile:
    prompts: list[Prompt]
    spec_bench: bool = False
    """Spec-Bench's questions: each prompt's category is its task, its follow-ups its later turns."""


def library_prompts() -> list[Prompt]:
    """Every prompt of the shipped library, in file order."""
    text = resources.files("specplay.data").joinpath("prompts.jsonl").read_text(encoding="utf-8")
    return parse_prompts(text, "the shipped prompt library", "prompts").prompts


def read_prompt_file(path: Path, field: str = "prompts") -> PromptFile:
    """A user's prompt file, either format; `field` names the flag that gave it, for the error."""
    try:
        text = read_input_text(path, "file", DATA_LIMIT)
    except InputError as error:
        raise ConfigError(field, f"{str(path)!r} cannot be read: {error.detail}") from None
    return parse_prompts(text, str(path), field)


def read_prompts(path: Path, field: str = "prompts") -> list[Prompt]:
    return read_prompt_file(path, field).prompts


def parse_prompts(text: str, what: str, field: str) -> PromptFile:
    """Every line of one format, the first line's: {category, text} prompts, or Spec-Bench's
    {question_id, category, turns} questions. A line of the other format, or of neither, is
    refused in one line naming it and the fix."""
    prompts: list[Prompt] = []
    questions: bool | None = None  # the file's format, once its first line is read
    first_ids: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), 1):  # JSON Lines end at "\n" only
        if not line.strip():
            continue
        where = f"line {number} of {what}"
        try:
            row = parse_json(line, where)
        except JsonError:
            row = None  # not JSON: refused below in the file's format
        if questions is None:
            questions = spec_bench.is_question(row)
        if questions:
            prompt = _question(row, where, field)
            if prompt.name in first_ids:
                raise ConfigError(
                    field,
                    f"{where} repeats question_id {prompt.name} (line {first_ids[prompt.name]}); "
                    "give each question its own id",
                )
            first_ids[prompt.name] = number
        else:
            prompt = _prompt(row, number, where, field)
        prompts.append(prompt)
    return PromptFile(prompts, spec_bench=bool(questions))


def _question(row: Any, where: str, field: str) -> Prompt:
    if isinstance(row, dict) and "text" in row and not spec_bench.is_question(row):
        raise ConfigError(
            field,
            f"{where} is a {{category, text}} prompt in a file of Spec-Bench questions "
            f"{spec_bench.FORMAT}; keep one format per file",
        )
    try:
        return spec_bench.question(row)
    except spec_bench.QuestionError as error:
        raise ConfigError(field, f"{where} {error}; {spec_bench.FIX}") from None


def _prompt(row: Any, number: int, where: str, field: str) -> Prompt:
    if spec_bench.is_question(row):
        raise ConfigError(
            field,
            f"{where} is a Spec-Bench question {spec_bench.FORMAT} in a file of {{category, text}} "
            "prompts; keep one format per file",
        )
    try:
        name, note = str(row.get("name", f"line {number}")), str(row.get("note", ""))
        prompt = Prompt(str(row["category"]), name, str(row["text"]), note)
    except (KeyError, TypeError, AttributeError):
        raise ConfigError(field, f"{where} is not a {{category, text}} object") from None
    if not prompt.text.strip():  # found here, not mid-run as "--prompt encodes to no tokens"
        raise ConfigError(field, f"{where} has an empty text; give each prompt its text")
    return prompt
