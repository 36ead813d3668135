"""How token sources look, shared by the terminal, exported transcripts and the playground."""

from __future__ import annotations

SOURCE_STYLES = {
    "accepted": "green",
    "relaxed": "yellow",
    "corrected": "red",
    "bonus": "bold blue",
    "target": "",
    "draft": "",
}
"""Rich styles per token source (see specplay.engine.events.TokenSource)."""

SOURCE_WHY = {
    "accepted": "u < min(1, p_target/p_draft): kept",
    "relaxed": "kept only thanks to a relaxed rule (the TV budget, typical, lenience, cascade)",
    "corrected": "drawn from the residual after a rejection",
    "bonus": "drawn from p_target: all k accepted",
    "target": "a target-only step",
    "draft": "a draft-only step",
}
"""Why a token of each source is there, in a line: for drill-down views."""
