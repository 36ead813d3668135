"""A run of the playground's lanes saved as one session, event by event, as the run goes.

The session opens at the run's first start event, takes each lane's events in the order the
screen shows them, and is flushed once per batch. A write that fails (a full disk) stops the
saving for the rest of the run, never the run: what was written is kept, and `unsaved` says why
the rest was not. Closing without finishing (the app quits mid-run) leaves an incomplete but
readable session.
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
from specplay.errors import SpecplayError, error_line
from specplay.runner.session_run import open_writer
from specplay.store import SessionWriter


class RunRecorder:
    """One run's session. `on_unsaved` hears, once, why the run will not be (fully) saved."""

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
    ) -> None:
        self.config, self.prompt, self.lanes = config, prompt, lanes
        self.identity, self.capabilities, self.route_map = dict(identity), capabilities, dict(route_map)
        self.token_text, self.on_unsaved = token_text, on_unsaved
        self.writer: SessionWriter | None = None
        self.saving = True
        """False once this run's session could not be written: no later lane opens another."""
        self.unsaved: str | None = None
        """Why this run's session could not be written, said again when the run ends."""

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

    def finish(self, error: BaseException | None) -> tuple[Path | None, str, bool]:
        """The run ended (`error`: how it failed): the saved session, if any, the words for the
        status line ("; saved NAME", "; not saved: why", "; NOT saved: why", or nothing; a failed
        run says only the last) and whether saving failed."""
        saved, path = "", None
        if self.writer is not None:
            try:
                if error is None:
                    path = self.writer.finalize()
                    saved = f"; saved {path.name}"
            except SpecplayError as failure:
                saved = f"; not saved: {error_line(failure)}"
            self.writer.close()
            self.writer = None
        if self.unsaved is not None:
            saved = f"; NOT saved: {self.unsaved}"
        return path, saved, self.unsaved is not None or saved.startswith("; not saved")

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
