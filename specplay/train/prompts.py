"""Where `specplay distill` finds the user's traffic: a text file, a JSONL file or a sessions folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specplay.engine.conversation import Exchange
from specplay.errors import SpecplayError
from specplay.files.inputs import DATA_LIMIT, InputError, read_input_text
from specplay.files.json_text import JsonError, parse_json
from specplay.store.format import SessionError, load_session
from specplay.store.location import list_session_files

PROMPT_KEYS = ("prompt", "text")


@dataclass(frozen=True, slots=True)
class TrainingPrompt:
    """A prompt as the target will see it in a run: after the earlier exchanges of its
    conversation, where it is a conversation's later turn."""

    text: str
    earlier: tuple[Exchange, ...] = ()


def read_prompts(path: Path) -> list[TrainingPrompt]:
    """Prompts from a folder of saved sessions (every turn of each session, a conversation's later
    turns after its earlier exchanges), a .jsonl file (a "prompt" or "text" field per line) or a
    text file (prompts separated by blank lines)."""
    if not path.exists():
        raise SpecplayError(f"data {str(path)!r} not found: pass a prompt file (.txt or .jsonl) or a sessions folder")
    try:
        if path.is_dir():
            prompts = _session_prompts(path)
        elif path.suffix == ".jsonl":
            prompts = [TrainingPrompt(text) for text in _jsonl_prompts(path)]
        else:
            text = read_input_text(path, "data", DATA_LIMIT, errors="replace")
            prompts = [TrainingPrompt(block.strip("\n")) for block in text.split("\n\n")]
    except UnicodeDecodeError as exc:
        raise SpecplayError(f"data {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except InputError:
        raise  # already one line naming the file
    except OSError as exc:
        raise SpecplayError(f"data {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    prompts = [p for p in prompts if p.text.strip()]
    if not prompts:
        raise SpecplayError(f"data {str(path)!r} holds no prompts")
    return prompts


def _jsonl_prompts(path: Path) -> list[str]:
    prompts = []
    text = read_input_text(path, "data", DATA_LIMIT)
    for number, line in enumerate(text.split("\n"), start=1):  # JSON Lines: "\n" only
        if not line.strip():
            continue
        try:
            record = parse_json(line, f"{path} line {number}")
        except JsonError as error:
            raise SpecplayError(f"{error}; write one JSON object per line") from None
        key = next((k for k in PROMPT_KEYS if isinstance(record, dict) and isinstance(record.get(k), str)), None)
        if key is None:
            raise SpecplayError(f'{path}:{number}: no "prompt" or "text" string field')
        prompts.append(record[key])
    return prompts


def _session_prompts(directory: Path) -> list[TrainingPrompt]:
    """Every turn of every session, each after the earlier exchanges its main lane had."""
    files = list_session_files(directory)
    if not files:
        raise SpecplayError(f"folder {str(directory)!r} holds no saved sessions (*.jsonl)")
    prompts = []
    for path in files:
        try:
            session = load_session(path)
        except SessionError:
            continue  # a corrupt session costs one prompt, not the whole run
        earlier: list[Exchange] = []
        for turn in session.turns:
            prompts.append(TrainingPrompt(turn.prompt, tuple(earlier)))
            earlier.append(Exchange(turn.prompt, turn.main.text))
    return prompts
