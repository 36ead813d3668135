"""The demo models that ship inside specplay: a small target and two drafters, `base` (tuned on
code) and `prose` (distilled on the target's prose), used when no models are named.

They were built by `python -m specplay.train.demo_models`; `models/manifest.json` records how.
"""

from __future__ import annotations

from pathlib import Path

from specplay.errors import ModelError

DEMO_DIR = Path(__file__).parents[1] / "models"
DEMO_DRAFTERS = ("base", "prose")
"""In routing order: the router's `code` class goes to the first drafter, `prose` to `prose`."""


def demo_model_paths() -> tuple[Path, dict[str, Path]]:
    """(target folder, {drafter name: folder}); a clear error when the folders are missing."""
    folders = {name: DEMO_DIR / name for name in ("target", *DEMO_DRAFTERS)}
    missing = [name for name, path in folders.items() if not (path / "config.json").is_file()]
    if missing:
        raise ModelError(
            f"the demo models ({', '.join(missing)}) are missing from {DEMO_DIR}; reinstall specplay, "
            "or pass your own models with --target PATH --draft PATH"
        )
    return folders["target"], {name: folders[name] for name in DEMO_DRAFTERS}
