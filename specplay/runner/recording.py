"""A conversation's runs in the playground saved as one session, event by event, as each goes.

The session opens at the first run's first start event, takes each lane's events in the order the
screen shows them, and is flushed once per batch. Each run that ends finishes it (complete on
disk); a follow-up opens it again behind a turn record, so every turn of the conversation is in
the one file. A write that fails (a full disk) stops the saving for the rest of the
conversation, never the run: what was written is kept, and `unsaved` says why the rest was not.
Closing without finishing (the app quits mid-run) leaves an incomplete but readable session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from specplay.backends import blas_threads
from specplay.config.run_config import RunConfig
from specplay.engine.capabilities import Capabilities
from specplay.engine.events import Event, StartEvent
from specplay.engine.routers.routing import RouteChoice
from specplay.errors import SpecplayError, error_line
from specplay.runner.session_run import open_writer
from specplay.store import SessionWriter


class RunRecorder:
    """One conversation's session (a single prompt is a conversation of one turn). `on_unsaved`
    hears, once, why it will not be (fully) saved."""

    def __init__(
        self,
        config: RunConfig,
        *,
        prompt: str,
        lanes: tuple[str, ...],
        identity: Mapping[str, Any],
        capabilities: Capabilities,
        route_map: Mapping[str, str],
        token_text: Callable[[int], str] | None,
        on_unsaved: Callable[[str], None],
        route_choice: RouteChoice | None = None,
    ) -> None:
        """`route_choice`: where the route setting sent the first turn's prompt and why, recorded in
        the request as `specplay run --save` records it."""
        self.config, self.prompt, self.lanes = config, prompt, lanes
        self.route_choice = route_choice
        self.identity, self.capabilities, self.route_map = dict(identity), capabilities, dict(route_map)
        self.token_text, self.on_unsaved = token_text, on_unsaved
        self.writer: SessionWriter | None = None
        self.saving = True
        """False once this session could not be written: no later lane or turn opens another."""
        self.unsaved: str | None = None
        """Why this session could not be written, said again when each run ends."""

    def record(self, lane: str, event: Event) -> None:
        """Write an event, opening the session at the run's first start."""
        if self.saving and self.writer is None and isinstance(event, StartEvent):
            self.writer = self._open(event)
        if self.writer is not None:
            try:
                self.writer.write_event(lane, event, flush=False)
            except SpecplayError as error:  # a full disk: the run goes on, what was written is kept
                self._drop(error)

    def flush(self) -> None:
        """Once per batch, not per event: the batch is what a redraw shows."""
        if self.writer is not None:
            try:
                self.writer.flush()
            except SpecplayError as error:
                self._drop(error)

    def start_turn(self, prompt: str, route_choice: RouteChoice | None = None) -> None:
        """A follow-up begins: the session, finished by the run before, goes on with a turn record
        for `prompt` (and where the route setting sent it: `route_choice`); the lanes' events from
        here answer it."""
        if self.writer is None:  # never opened, or given up: said when the run began or ended
            return
        try:
            self.writer.reopen()
            self.writer.start_turn(prompt, route_choice.record() if route_choice is not None else None)
        except SpecplayError as error:
            self._drop(error)

    def finish(self, error: BaseException | None) -> tuple[Path | None, str, bool]:
        """A run ended (`error`: how it failed): the saved session, if any, the words for the
        status line ("; saved NAME", "; not saved: why", "; NOT saved: why", or nothing; a failed
        run says only the last) and whether saving failed. A finished session stays open to a
        follow-up (`start_turn`); a failed run's is left incomplete, and no turn follows it."""
        saved, path = "", None
        if self.writer is not None:
            try:
                if error is None:
                    path = self.writer.finalize()
                    saved = f"; saved {path.name}"
            except SpecplayError as failure:
                self.unsaved = error_line(failure)  # what a later turn says
                saved = f"; not saved: {self.unsaved}"
            if path is None:  # failed, or not finished: the session is kept as it is, and no turn follows
                self.writer.close()
                self.writer, self.saving = None, False
                return None, saved, bool(saved)
        if self.unsaved is not None:
            saved = f"; NOT saved: {self.unsaved}"
        return path, saved, self.unsaved is not None

    def close(self) -> None:
        """Stop writing: incomplete, but every event so far is on disk."""
        if self.writer is not None:
            self.writer.close()
        self.writer, self.saving = None, False

    def _open(self, start: StartEvent) -> SessionWriter | None:
        request = replace(self.config.request, prompt=self.prompt, seed=start.seed, mode="speculative")
        identity, threads = self.identity, blas_threads(self.config)
        if "blas_threads" in identity and threads is not None:  # as the host fitted it for this run
            identity = identity | {"blas_threads": threads}
        try:
            return open_writer(
                self.config,
                request,
                prompt_token_ids=start.prompt_token_ids,
                lanes=list(self.lanes),
                identity=identity,
                capabilities=self.capabilities,
                route_map=self.route_map,
                token_text=self.token_text,
                source="tui",
                lanes_run_side_by_side=True,
                **({"route_choice": self.route_choice.record()} if self.route_choice is not None else {}),
            )
        except SpecplayError as error:  # the run goes on unsaved
            self._not_saving(error)
            return None

    def _drop(self, error: SpecplayError) -> None:
        assert self.writer is not None
        self.writer.close()
        self.writer = None
        self._not_saving(error)

    def _not_saving(self, error: SpecplayError) -> None:
        self.saving, self.unsaved = False, error_line(error)
        self.on_unsaved(self.unsaved)
