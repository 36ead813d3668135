"""Earlier outputs for the drafters that remember (drafters/memory.py): the target's answers saved in
a sessions folder, read once as a command starts.

Newest sessions first, until the tokens asked for are read, within bounds on files and bytes so
a folder of years of sessions starts about as quickly as a fresh one. Of each session only what
the outputs need is read, with the session reader's own checks: the header (its target must be
this run's, or its token ids would be other words) and each lane's done event per turn. A file
that cannot be read so is left out and counted, never an error.
"""

from __future__ import annotations

import time
from pathlib import Path

from specplay.drafters import EarlierOutput, EarlierOutputs, ModelConfig, kind_of
from specplay.engine.events import DoneEvent
from specplay.errors import SpecplayError
from specplay.files.inputs import SESSION_LIMIT, MiB, read_input
from specplay.store.codec import check_header, decode_event
from specplay.store.format import SUFFIX, SessionError, _parse_line
from specplay.store.location import list_session_files
from specplay.store.schema import SchemaError

RECALL_FILES = 2000
"""Session files looked at, at most (the newest)."""
RECALL_BYTES = 64 * MiB
"""Bytes of session files read, at most: seconds of reading on a slow machine."""
TARGET_LANES = ("speculative", "target")
"""Lanes whose text the target wrote (a draft-only lane's is the drafter's)."""
_DONE = '"kind": "done"'
"""How the writer files a done event, near the start of its line: the only events read."""
_TURN = '"type": "turn"'


def earlier_outputs(folder: Path, target: ModelConfig, tokens: int) -> EarlierOutputs:
    """Up to about `tokens` tokens of `target`'s outputs saved in `folder`, newest sessions first
    (the last session read may bring more; the drafter keeps what it holds); what was left out
    is counted. A folder that does not exist or cannot be listed holds none."""
    began = time.perf_counter()
    try:
        files = list_session_files(folder)
    except SessionError:
        files = []
    outputs: list[EarlierOutput] = []
    read = bytes_read = sessions = skipped = other = 0
    stopped = None
    for count, path in enumerate(reversed(files)):
        if read >= tokens:
            break
        if count == RECALL_FILES:
            stopped = f"the newest {RECALL_FILES} sessions"
            break
        try:
            size = path.stat().st_size
        except OSError:
            skipped += 1
            continue
        if bytes_read + size > RECALL_BYTES:
            stopped = f"{RECALL_BYTES // MiB} MiB of sessions"
            break
        bytes_read += size
        try:
            found = session_outputs(path, target)
        except (SpecplayError, OSError):
            skipped += 1
            continue
        if found is None:
            other += 1
            continue
        sessions += bool(found)
        for output in reversed(found):  # newest first, as the sessions are
            outputs.append(output)
            read += len(output.token_ids)
    return EarlierOutputs(
        folder=folder,
        outputs=tuple(reversed(outputs)),
        sessions=sessions,
        skipped=skipped,
        other_targets=other,
        stopped=stopped,
        elapsed_s=time.perf_counter() - began,
    )


def session_outputs(path: Path, target: ModelConfig) -> list[EarlierOutput] | None:
    """The outputs of a session's target lanes, turn by turn (each lane's done event; lanes that
    gave the same answer, once); None where the session's target is not `target`. A SessionError
    where the file is damaged."""
    try:
        text = read_input(path, "session", SESSION_LIMIT).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SessionError(f"session {path} cannot be read: {exc}") from None
    lines = text.split("\n")
    if lines and not lines[-1].strip():
        lines.pop()
    header = _parse_line(path, 1, lines[0], last=len(lines) == 1) if lines else None
    if header is None or header.get("type") != "header":
        raise SessionError(f"session {path} is corrupt: it does not start with a header")
    try:
        check_header(header)
    except SchemaError as error:
        raise SessionError(f"session {path} is corrupt: {error}") from None
    record = (header.get("backend") or {}).get("models", {}).get("target")
    if not isinstance(record, dict) or not kind_of(target).matches(target, record):
        return None
    name = path.name.removesuffix(SUFFIX)
    turn, found = 0, []
    answers: set[tuple[int, ...]] = set()
    """This turn's answers so far: at temperature 0 both lanes give the same one, read once."""
    for number, line in enumerate(lines[1:], 2):
        start = line[:200]
        if _TURN in start:
            turn += 1
            answers.clear()
        elif _DONE in start:
            done = _parse_line(path, number, line, last=number == len(lines))
            if done is None or done.get("lane") not in TARGET_LANES:
                continue
            try:
                event = decode_event("done", done.get("data"), f"record {number}")
            except SchemaError as error:
                raise SessionError(f"session {path} is corrupt: {error}") from None
            assert isinstance(event, DoneEvent)
            if event.token_ids and event.token_ids not in answers:
                answers.add(event.token_ids)
                where = f"session {name}" + (f", turn {turn + 1}" if turn else "")
                found.append(EarlierOutput(event.token_ids, where))
    return found
