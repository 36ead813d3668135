"""Real models for the tests, fetched once into a cache that outlives the test run."""

from __future__ import annotations

import os
from pathlib import Path

TEST_CACHE_ENV = "SPECPLAY_TEST_CACHE"


def models_cache() -> Path:
    """$SPECPLAY_TEST_CACHE, else ~/.cache/specplay-tests: kept between runs, so a model is
    downloaded (and converted) once per machine."""
    return Path(os.environ.get(TEST_CACHE_ENV) or Path.home() / ".cache" / "specplay-tests")
