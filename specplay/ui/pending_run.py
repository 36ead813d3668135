"""A run asked for while the models load: kept for when they are loaded, or taken back."""

from __future__ import annotations


class PendingRun:
    """ctrl+r pressed while the models load (even before the screen's first frame): the run starts
    once they are loaded; ctrl+r again or escape takes it back."""

    def __init__(self) -> None:
        self.kept = False

    def toggle(self, keep: bool) -> str:
        """Keep the run or take it back; the status line's words for what was done."""
        self.kept = keep
        return self.words(cancelled=not keep)

    def words(self, cancelled: bool = False) -> str:
        if self.kept:
            return "loading models…; the run starts once they are loaded (ctrl+r again or escape cancels it)"
        return "loading models…; run cancelled (ctrl+r runs once they are loaded)" if cancelled else "loading models…"

    def take(self) -> bool:
        """Whether a run was kept; from now on none is."""
        kept, self.kept = self.kept, False
        return kept
