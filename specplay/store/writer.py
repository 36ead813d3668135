"""Writing a session so that nothing is lost.

Records are appended and flushed as the run goes, so a crash, Ctrl-C or SIGKILL leaves a file
every command can read (as incomplete). Finishing rewrites the whole file beside it and renames
it into place, so a reader sees either the growing file or the final one, never a mix. Files are
created exclusively: an existing session is never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from specplay.engine.capabilities import Capabilities
from specplay.engine.events import Event, RoundEvent
from specplay.store.codec import event_record, header_record, texts_record
from specplay.store.format import SUFFIX, SessionError
from specplay.store.location import ENV_VAR, check_sessions_folder

# json.dumps escapes "\n" and the C0 controls; these other Unicode line boundaries it leaves raw,
# and a reader splitting lines on them would tear the record apart.
_LINE_BOUNDARIES = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def record_line(record: dict[str, Any]) -> str:
    """One JSON Lines record: UTF-8 as written, every line boundary escaped."""
    return json.dumps(record, ensure_ascii=False, allow_nan=False).translate(_LINE_BOUNDARIES)


def round_token_ids(event: RoundEvent) -> list[int]:
    """Every token id a round names beyond its committed tokens: drafted ones and candidates."""
    ids = list(event.drafted)
    for position in event.positions:
        ids += [token_id for token_id, _ in (position.top_target or ()) + (position.top_draft or ())]
    ids += [token_id for token_id, _ in event.bonus_top_target or ()]
    return ids


_END = record_line({"type": "end"})


def _new_name(now: datetime) -> str:
    return f"{now.strftime('%Y-%m-%dT%H-%M-%S')}_{secrets.token_hex(3)}{SUFFIX}"


class SessionWriter:
    def __init__(
        self,
        directory: Path,
        *,
        prompt: str,
        prompt_token_ids: list[int],
        lanes: list[str],
        backend: dict[str, Any],
        request: dict[str, Any],
        capabilities: Capabilities,
        token_text: Callable[[int], str] | None = None,
    ) -> None:
        """`backend` is the event stream's description, `request` the codec's request record.
        `token_text`, where the tokenizer is at hand, records the text of every drafted and
        candidate token, so a review shows rejected drafts as text without loading a model."""
        now = datetime.now(UTC)
        check_sessions_folder(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory / _new_name(now)
            self._file = self.path.open("x", encoding="utf-8")
        except OSError as exc:
            raise SessionError(
                f"cannot write sessions to {directory}: {exc.strerror or exc}; "
                f"choose another folder with --sessions-dir or ${ENV_VAR}"
            ) from None
        self.lanes = list(lanes)
        self.turns = 1
        """Turns of the conversation begun so far; the header holds the first's prompt."""
        self._token_text = token_text
        self._known_texts: set[int] = set()
        self._lines: list[str] = []
        created = now.isoformat(timespec="seconds")
        header = header_record(
            prompt=prompt,
            prompt_token_ids=prompt_token_ids,
            lanes=lanes,
            backend=backend,
            request=request,
            capabilities=capabilities,
            created=created,
        )
        try:
            self._write(header)
        except SessionError:  # not even a header: leave no empty session behind
            self.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise

    def _write(self, record: dict[str, Any], flush: bool = True) -> None:
        try:
            line = record_line(record)
        except ValueError as exc:  # a NaN or infinity: never written (JSON has none)
            raise SessionError(f"a run produced a number JSON cannot hold ({exc}); the session stops here") from None
        self._lines.append(line)
        try:
            self._file.write(line + "\n")
        except OSError as exc:
            self._failed(exc)
        if flush:
            self.flush()

    def flush(self) -> None:
        """Hand what was written to the OS: from then on it survives the process being killed."""
        try:
            self._file.flush()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> NoReturn:
        self.close()
        raise SessionError(
            f"cannot write the session {self.path}: {exc.strerror or exc}; what was written before is kept"
        ) from None

    def start_turn(self, prompt: str, route_choice: Mapping[str, Any] | None = None) -> None:
        """Begin the conversation's next turn: the lanes' events from here on answer `prompt`;
        `route_choice`: where the route setting sent it and why (`RouteChoice.record()`), if it chose."""
        record: dict[str, Any] = {"type": "turn", "turn": self.turns, "prompt": prompt}
        if route_choice is not None:
            record["route_choice"] = dict(route_choice)
        self._write(record)
        self.turns += 1

    def write_event(self, lane: str, event: Event, flush: bool = True) -> None:
        """Append an event; `flush=False` leaves it buffered until the next `flush` (a caller that
        takes events in batches flushes once per batch)."""
        if isinstance(event, RoundEvent) and self._token_text is not None:
            self._write_texts(round_token_ids(event))
        self._write(event_record(lane, event), flush)

    def _write_texts(self, token_ids: list[int]) -> None:
        new = [token_id for token_id in dict.fromkeys(token_ids) if token_id not in self._known_texts]
        if not new or self._token_text is None:
            return
        self._known_texts.update(new)
        self._write(texts_record({token_id: self._token_text(token_id) for token_id in new}), flush=False)

    def finalize(self) -> Path:
        """Mark the session complete, atomically; if that cannot be written, the session stays as
        it is (readable, incomplete) and nothing else is left behind."""
        self.close()
        self._lines.append(_END)
        try:
            self._replace_file()
        except OSError as exc:
            raise SessionError(
                f"cannot finish the session {self.path}: {exc.strerror or exc}; it is kept, marked incomplete"
            ) from None
        return self.path

    def reopen(self) -> None:
        """Go on writing a finalized session (a conversation's next turn): it reads as incomplete
        again, every record kept, until the next `finalize`."""
        while self._lines and self._lines[-1] == _END:
            self._lines.pop()
        try:
            self._replace_file()
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise SessionError(
                f"cannot go on writing the session {self.path}: {exc.strerror or exc}; what it holds is kept"
            ) from None

    def _replace_file(self) -> None:
        """Put every record written into the session's place at once: a reader sees the old file
        or this one, never a mix."""
        partial = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        try:
            with partial.open("x", encoding="utf-8") as out:
                out.write("\n".join(self._lines) + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            raise

    def close(self) -> None:
        """Stop writing without finalizing: the session stays readable, marked incomplete."""
        if not self._file.closed:
            with contextlib.suppress(OSError):  # a full disk: what was flushed before is kept
                self._file.close()


def session_jsonl(records: list[dict[str, Any]]) -> str:
    """A session's records as its raw event log, one per line, header first; a record holding a
    number JSON cannot write (a damaged file's 1e999 reads as infinity) is refused in one line."""
    try:
        return "".join(record_line(record) + "\n" for record in records)
    except ValueError:
        raise SessionError(
            "the session holds a number that is not finite; it cannot be exported as JSON Lines"
        ) from None
