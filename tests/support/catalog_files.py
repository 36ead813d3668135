"""The specplay cache as `specplay fetch` leaves it, without downloading anything."""

from __future__ import annotations

from pathlib import Path

from specplay.catalog.models import CATALOG


def fetched_smollm2(cache: Path) -> Path:
    """A cache that holds SmolLM2's file as `specplay fetch` leaves it: whole (a sparse file of the
    right size; these tests never load it)."""
    path = cache / "models" / CATALOG["smollm2"].file_name
    path.parent.mkdir(parents=True)
    with path.open("wb") as out:
        out.truncate(CATALOG["smollm2"].size)
    return path
