"""What other threads tell the app. Posted from the model thread: Textual's post_message is thread-safe."""

from __future__ import annotations

from collections.abc import Callable

from textual.message import Message


class Call(Message):
    """Run `fn` on the UI thread (the controller's `schedule`)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        super().__init__()
        self.fn = fn
