"""A prompt of the library or of a user's file: a category, a name, the text, and for a
conversation (a Spec-Bench question) the user's later turns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prompt:
    category: str
    name: str
    text: str
    note: str = ""
    """What the prompt shows, for the library's list (a Spec-Bench question: the file's own category)."""
    follow_ups: tuple[str, ...] = ()
    """A conversation's later user turns, each answered after the earlier turns and answers."""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.category}) · {self.note}" if self.note else f"{self.name} ({self.category})"

    @property
    def turns(self) -> tuple[str, ...]:
        """Every user turn, the first one's text first."""
        return (self.text, *self.follow_ups)
