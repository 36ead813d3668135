"""The learned router file: written and read back exactly; anything damaged or foreign refused in
one line naming the file and the fix."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specplay.engine.routers.learned import LearnedRouter, fit_router
from specplay.errors import ConfigError
from specplay.router_training.router_file import VERSION, load_router, read_router, write_router
from tests.support.checks import every

PROMPTS = [
    "def area(r):\n    return 3.14 * r * r\n",
    "Rewrite this so it is formal, keeping its content:\n\nhi sam, can you send the numbers by friday?",
    "Write a short story about a lighthouse keeper.",
    "import os\nprint(os.getcwd())",
    "The river ran past the mill.",
    "Fix the typos and return it in full:\n\nThe keeper climbd the stairs evry evening at dusk.",
]
DRAFTERS = ["base", "lookup", "prose"]
LABELS = [0, 1, 2, 0, 2, 1]


@pytest.fixture(scope="module")
def router() -> LearnedRouter:
    return fit_router(PROMPTS, np.eye(3)[LABELS], DRAFTERS)


@pytest.fixture
def written(tmp_path: Path, router: LearnedRouter) -> Path:
    path = tmp_path / "router.json"
    write_router(path, router, {"sessions": len(PROMPTS), "score": "acceptance"})
    return path


def test_a_router_read_back_classifies_exactly_as_the_one_written(written: Path, router: LearnedRouter) -> None:
    router_config = read_router(written)
    assert router_config.drafters == tuple(DRAFTERS) and router_config.path == written
    assert router_config.sha256 == hashlib.sha256(written.read_bytes()).hexdigest()
    assert router_config.record() == {"file": "router.json", "sha256": router_config.sha256, "drafters": DRAFTERS}
    loaded = router_config.router
    assert isinstance(loaded, LearnedRouter) and loaded.label == "the learned router router.json"
    assert loaded.trained_on == {"sessions": len(PROMPTS), "score": "acceptance"}
    others = ["", "x" * 5000, "naïve café ☕", "SELECT * FROM t;", *(p.upper() for p in PROMPTS)]
    for prompt in [*PROMPTS, *others]:
        assert loaded.probabilities(prompt).tobytes() == router.probabilities(prompt).tobytes()
        assert loaded.classify(prompt) == router.classify(prompt)
    assert written.stat().st_size < 300_000


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        record = json.loads(path.read_text())
        change(record)
        path.write_text(json.dumps(record))

    return edit


def _nan_weights(record: dict[str, Any]) -> None:
    values = np.frombuffer(base64.b64decode(record["weights"]["base64"]), dtype="<f4").copy()
    values[7] = np.nan
    record["weights"]["base64"] = base64.b64encode(values.tobytes()).decode()


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "torn": (lambda p: p.write_bytes(p.read_bytes()[:500]), "is damaged: its text is not JSON"),
    "empty": (lambda p: p.write_bytes(b""), "is damaged: its text is not JSON"),
    "binary": (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "is damaged"),
    "a list": (lambda p: p.write_text("[1, 2]"), "is not a learned router file"),
    "a session": (lambda p: p.write_text('{"type": "header"}\n'), "is not a learned router file"),
    "newer": (_edit(lambda r: r.update(version=VERSION + 1)), "newer than this specplay reads"),
    "version 0": (_edit(lambda r: r.update(version=0)), "its version 0 is none specplay wrote (they start at 1)"),
    "version -3": (_edit(lambda r: r.update(version=-3)), "its version -3 is none specplay wrote (they start at 1)"),
    "version text": (_edit(lambda r: r.update(version="1")), "its version '1' is not a whole number"),
    "no weights": (_edit(lambda r: r.pop("weights")), "is damaged: it has no 'weights'"),
    "short weights": (
        _edit(lambda r: r["weights"].update(base64=r["weights"]["base64"][:64])),
        "is damaged: its weights holds 48 bytes",
    ),
    "bad base64": (_edit(lambda r: r["weights"].update(base64="!!!")), "is damaged: its weights is not base64"),
    "wrong shape": (_edit(lambda r: r["bias"].update(shape=[4])), "is damaged: its bias is not a float32 array"),
    "nan": (_edit(_nan_weights), "is damaged: its weights holds values that are not finite"),
    "one drafter": (_edit(lambda r: r.update(drafters=["base"])), "is damaged: its drafters are not a list of two"),
    "twice": (_edit(lambda r: r.update(drafters=["base", "base", "prose"])), "names a drafter twice"),
    "buckets": (_edit(lambda r: r["features"].update(buckets=1000)), "its features are out of range"),
    "feature": (_edit(lambda r: r["features"].update(dense=["mystery"])), "its features are out of range"),
    "a string": (_edit(lambda r: r["features"].update(ngram_max="4")), "not whole numbers"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_or_foreign_file_is_one_line_naming_it(written: Path, damage: str) -> None:
    change, says = DAMAGE[damage]
    change(written)
    with pytest.raises(ConfigError) as error:
        load_router(written)
    message = str(error.value)
    assert says in message and repr(str(written)) in message and "\n" not in message
    assert "specplay router train" in message


def test_a_missing_file_or_a_folder(tmp_path: Path) -> None:
    for path, says in ((tmp_path / "none.json", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(Exception) as error:
            load_router(path)
        assert says in str(error.value) and every(["\n" not in str(error.value)])
