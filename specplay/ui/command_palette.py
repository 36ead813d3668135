"""The command palette's entries: every action, each control's choices, library prompts, exports
and recent sessions, searchable by the words the panel and the docs use."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from textual.app import SystemCommand
from textual.markup import escape as escape_markup

from specplay.display.text import one_line
from specplay.review import reviews_dir
from specplay.store import SessionError, list_session_files, session_prompt
from specplay.ui.opened import open_saved
from specplay.ui.screenshot import screenshots_dir
from specplay.ui.widgets.controls_panel import ControlsPanel

if TYPE_CHECKING:
    from specplay.ui.app import PlaygroundApp

RECENT_SESSIONS = 10
"""Sessions the command palette offers to open."""


def palette_commands(app: PlaygroundApp) -> Iterable[SystemCommand]:
    """specplay's own entries (Textual adds its own beside them)."""
    folder = screenshots_dir(app.playground.config.sessions_dir)
    yield SystemCommand("Screenshot", f"Save the screen as SVG (and PNG) in {folder} (f12)", app.action_screenshot)
    yield SystemCommand("Run", "Generate in every lane (ctrl+r)", app.action_run)
    yield SystemCommand("Stop", "Stop the lanes at the next round (escape)", app.action_stop)
    yield SystemCommand(
        "New conversation",
        "Forget the turns so far: the next run starts over, its prompt the first turn (ctrl+n)",
        app.action_new_conversation,
    )
    yield SystemCommand("Next theme", "Cycle the specplay themes (ctrl+t)", app.action_next_theme)
    yield SystemCommand("Draft-only lane", "Show or hide the drafter-alone lane (f2)", app.action_toggle_draft_lane)
    yield SystemCommand("Inspect a token", "Drill into the speculative lane's last token (f3)", app.action_inspect_last)
    yield SystemCommand("Prompt library", "Pick a prompt from the shipped library (f4)", app.action_pick_prompt)
    yield SystemCommand(
        "Measure round costs",
        "Time the verify pass by rows and each drafter's rounds here: the lane's stats then say which k would pay",
        app.playground.measure_costs,
    )
    for i, prompt in enumerate(app.main.library):
        yield SystemCommand(
            f"Prompt: {prompt.label}", "Put this library prompt in the editor", partial(app.use_prompt, i)
        )
    for title, help, action in app.main.query_one(ControlsPanel).choices():
        yield SystemCommand(f"Set {title}", help, action)
    if app.session_to_export() is not None:
        folder = reviews_dir(app.playground.config.sessions_dir)
        for fmt, what in (("html", "review page"), ("md", "Markdown transcript")):
            yield SystemCommand(
                f"Export a {what}",
                f"The last run (or the opened session) as a {what} in {folder}",
                partial(app.export_review, fmt),
            )
    if app.playground.opened is not None:
        yield SystemCommand(
            "Re-run the opened session",
            "Its prompt, seed and settings, on the loaded models",
            app.action_rerun_session,
        )
    try:
        recent = list_session_files(app.playground.config.sessions_dir)[-RECENT_SESSIONS:]
    except SessionError:  # an unreadable folder offers none; saving says why, in the status line
        recent = []
    for path in reversed(recent):
        prompt = one_line(session_prompt(path) or "(unreadable)")
        snippet = prompt[:48] + ("…" if len(prompt) > 48 else "")
        yield SystemCommand(
            escape_markup(f"Open session {path.stem}: {snippet}"),  # the palette reads titles as markup
            "Show a saved session read-only",
            partial(open_saved, app.playground, path),
        )
