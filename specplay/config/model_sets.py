"""The models a command runs when the user names none, and the one line that says which they are.

With no model flags specplay opens on a real model once one is fetched (`specplay fetch
smollm2`), with the drafters that show it at work; until then on the demo models that ship inside
the package. Either is also asked for by name: `--target smollm2`, `--target demo` (with no
--draft, each brings its own drafters and routes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplay.catalog.models import CATALOG, CatalogModel, cached_path, is_fetched
from specplay.config.demo import DEMO_DIR, demo_model_paths
from specplay.config.run_config import TARGET, RunConfig
from specplay.drafters import MODEL, ModelConfig, parse_model
from specplay.engine.settings import NONE_ROUTE

DEMO = "demo"
"""`--target demo`: the shipped demo target (with its drafters when no --draft is given)."""


@dataclass(frozen=True, slots=True)
class ModelSet:
    """A target with the drafters and routes it opens with."""

    name: str
    target: ModelConfig
    drafters: tuple[ModelConfig, ...]
    route_map: Mapping[str, str] = field(default_factory=dict)
    """Router class to drafter; empty: each class to the drafter of its name, else the first."""
    route_notes: Mapping[str, str] = field(default_factory=dict)
    """Why a class goes where the map sends it, where the set says."""


def demo_set() -> ModelSet:
    target, drafters = demo_model_paths()
    drafter_models = tuple(ModelConfig(name, "drafter", "mlx", str(path)) for name, path in drafters.items())
    return ModelSet(DEMO, ModelConfig(TARGET, "target", "mlx", str(target)), drafter_models)


def catalog_set(model: CatalogModel, field_name: str = "target") -> ModelSet:
    """A fetched catalog model with its drafters (not fetched: the ConfigError saying how to)."""
    target = parse_model(TARGET, "target", model.name, field_name)
    drafters = tuple(parse_model(name, "drafter", written, "draft") for name, written in model.drafters)
    return ModelSet(model.name, target, drafters, dict(model.route_map), dict(model.route_notes))


def named_set(name: str) -> ModelSet | None:
    """`demo` or a catalog name, unless a folder or file of that name exists (then it is that)."""
    if Path(name).exists():
        return None
    if name == DEMO:
        return demo_set()
    model = CATALOG.get(name)
    return catalog_set(model) if model is not None else None


def default_set() -> ModelSet:
    """The first catalog model that is fetched, else the demo models: what every command with
    models runs when given no model flags (run, tui, costs, bench, fidelity)."""
    for model in CATALOG.values():
        if is_fetched(model):
            return catalog_set(model)
    return demo_set()


def default_models() -> str:
    """`default_set`'s rule in words, and which set it gives here now: for help texts."""
    real = next(iter(CATALOG.values()))
    now = next((m.short_title for m in CATALOG.values() if is_fetched(m)), "the demo models")
    return (
        f"{real.short_title} once fetched (`specplay fetch {real.name}`), else the demo models that ship with "
        f"specplay; here now: {now}"
    )


def models_named(config: RunConfig) -> str:
    """The models a command runs, in one line for its output: the target and each drafter by name
    (a built-in drafter with its kind), the demo models as such."""
    drafters = ", ".join(d.name if d.local or d.on_server else f"{d.name} ({d.kind})" for d in config.drafters)
    shown = f"; drafters {drafters}" if drafters else ""
    if is_demo(config.target):
        return f"the demo models that ship with specplay (toys){shown}"
    target = config.target.location if config.target.on_server else _target(config.target)
    return f"target {target}{shown}"


def is_demo(target: ModelConfig) -> bool:
    return target.local and Path(target.location) == DEMO_DIR / "target"


def models_line(config: RunConfig, identity: Mapping[str, Any], route_map: Mapping[str, str]) -> str:
    """Which models a run loaded (`identity`: the event stream's own description; `route_map`: its
    resolved map), for the playground's status line; on the demo models, that they are toys and
    how to get a real one."""
    records = identity.get("models") or {}
    drafters = ", ".join(_drafter(d.name, records.get(d.name) or {}, route_map) for d in config.drafters)
    if is_demo(config.target):
        real = next(iter(CATALOG.values()))
        # The way to real text first: a narrow terminal cuts the status line's end.
        return (
            f"the demo models, toys whose text is not English (for real text: `specplay fetch {real.name}`,"
            f" {real.size / 1e6:.0f} MB, then start again); drafters {drafters}"
        )
    unrouted = [cls for cls, drafter in route_map.items() if drafter == NONE_ROUTE]
    if unrouted:
        drafters += f"; {' and '.join(unrouted)}: {NONE_ROUTE} (no speculation)"
    target = _target(config.target)
    return f"{target}, drafters {drafters}" if drafters else target


def _target(target: ModelConfig) -> str:
    for model in CATALOG.values():
        if target.location == str(cached_path(model)):
            return model.short_title
    return Path(target.location).name.removesuffix(".gguf") or target.location


def _drafter(name: str, record: Mapping[str, Any], route_map: Mapping[str, str]) -> str:
    """`name (what it is; for the classes routed to it)`: a model drafter by its folder's name."""
    what = record.get("source", "") if record.get("kind") != MODEL.name else ""
    loaded = record.get("loaded") if isinstance(record.get("loaded"), str) else ""  # what it read as it loaded
    classes = [cls for cls, drafter in route_map.items() if drafter == name]
    parts = (what, loaded, "for " + " and ".join(classes) if classes else "")
    detail = "; ".join(part for part in parts if part)
    return f"{name} ({detail})" if detail else name
