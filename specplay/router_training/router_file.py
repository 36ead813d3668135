"""The learned router file: one JSON object, written atomically (files.py) and read back bounded
(inputs.py, json_text.py), every field checked, so a damaged, foreign or newer file is one line.

    {"format": "specplay learned router", "version": 1, "specplay_version": ...,
     "drafters": [...],                       the classes, in order
     "features": {"ngram_min", "ngram_max", "buckets", "sample_chars", "dense": [...]},
     "idf", "weights", "bias": {"dtype": "float32", "shape": [...], "base64": ...},
     "min_confidence": 0.6,                   below it the heuristic chooses (absent in older files: 0)
     "beats_heuristic": true,                 whether `--route auto` follows it at all: its cross-validated
                                              picks beat the heuristic's (absent in older files: unproven)
     "trained_on": {"sessions", "score", "unit", "labels", "ties", "l2", "iterations", "prompt_sha256",
                    "cross_validation"}}

Arrays are little-endian float32 in base64: 4096 buckets and three drafters take about 90 KB, and a
router read back classifies exactly as the one written (fit_router keeps its arrays in float32).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specplay import __version__
from specplay.config.run_config import RouterConfig
from specplay.engine.routers.learned import FeatureSettings, LearnedRouter
from specplay.errors import ConfigError
from specplay.files.inputs import ROUTER_LIMIT, read_input
from specplay.files.json_text import JsonError, dump_json, parse_json
from specplay.files.outputs import write_output
from specplay.router_training.train import NOT_BEATEN, unproven_reason

FORMAT = "specplay learned router"
VERSION = 1
RETRAIN = "specplay router train SESSION|DIR --out FILE"
OLDER_FILE = (
    "was written by an older specplay, which did not test its picks against the heuristic's: train it again "
    "to have it followed"
)
"""Why a file without `beats_heuristic` is not followed, after the router's label."""


def router_record(router: LearnedRouter, trained_on: Mapping[str, Any]) -> dict[str, Any]:
    s = router.settings
    return {
        "format": FORMAT,
        "version": VERSION,
        "specplay_version": __version__,
        "drafters": list(router.classes),
        "features": {
            "ngram_min": s.ngram_min,
            "ngram_max": s.ngram_max,
            "buckets": s.buckets,
            "sample_chars": s.sample_chars,
            "dense": list(s.dense),
        },
        "idf": _array_record(router.idf),
        "weights": _array_record(router.weights),
        "bias": _array_record(router.bias),
        "min_confidence": router.min_confidence,
        "beats_heuristic": router.unproven is None,
        "trained_on": dict(trained_on),
    }


def write_router(path: Path, router: LearnedRouter, trained_on: Mapping[str, Any]) -> int:
    """Write the router file (atomically); returns its size in bytes."""
    text = dump_json(router_record(router, trained_on), indent=1) + "\n"
    write_output(path, text, fix="choose another --out")
    return len(text.encode("utf-8"))


def read_router(path: Path) -> RouterConfig:
    """`--router FILE`: the router in `path`, with its hash and drafters."""
    router, sha256 = load_router(path)
    return RouterConfig(path=path, sha256=sha256, drafters=router.classes, router=router)


def load_router(path: Path) -> tuple[LearnedRouter, str]:
    """The router in `path` and the sha256 of its bytes; anything wrong is one ConfigError naming
    the file and the fix."""
    data = read_input(path, "--router", ROUTER_LIMIT, fix="give a file that `specplay router train` wrote")
    try:
        record = parse_json(data, "its text")
    except JsonError as error:
        raise _damaged(path, str(error)) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ConfigError(
            "router", f"{str(path)!r} is not a learned router file (no format {FORMAT!r}); make one with {RETRAIN}"
        )
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _damaged(path, f"its version {version!r} is not a whole number")
    if version < 1:
        raise _damaged(path, f"its version {version} is none specplay wrote (they start at 1)")
    if version > VERSION:
        raise ConfigError(
            "router",
            f"{str(path)!r} is a learned router of version {version}, newer than this specplay reads ({VERSION}); "
            f"upgrade specplay, or train it again with {RETRAIN}",
        )
    try:
        router = _router(record, label=f"the learned router {path.name}")
    except KeyError as error:
        raise _damaged(path, f"it has no {error}") from None
    except (ValueError, TypeError) as error:
        raise _damaged(path, str(error) or type(error).__name__) from None
    return router, hashlib.sha256(data).hexdigest()


def _router(record: Mapping[str, Any], label: str) -> LearnedRouter:
    drafters = record["drafters"]
    if not isinstance(drafters, list) or len(drafters) < 2 or not all(isinstance(d, str) and d for d in drafters):
        raise ValueError("its drafters are not a list of two or more names")
    if len(set(drafters)) != len(drafters):
        raise ValueError("it names a drafter twice")
    features = record["features"]
    if not isinstance(features, dict):
        raise ValueError("its features are not an object")
    numbers = {name: features[name] for name in ("ngram_min", "ngram_max", "buckets", "sample_chars")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in numbers.values()):
        raise ValueError("its feature settings are not whole numbers")
    dense = features["dense"]
    if not isinstance(dense, list) or not all(isinstance(name, str) for name in dense):
        raise ValueError("its dense features are not a list of names")
    settings = FeatureSettings(**numbers, dense=tuple(dense))
    try:
        settings.check()
    except ValueError as error:
        raise ValueError(f"its features are out of range: {error}; a newer specplay may have written it") from None
    classes = len(drafters)
    idf = _array(record["idf"], "idf", (settings.buckets,))
    weights = _array(record["weights"], "weights", (settings.width, classes))
    bias = _array(record["bias"], "bias", (classes,))
    about = record.get("trained_on")
    min_confidence = record.get("min_confidence", 0.0)
    if not isinstance(min_confidence, int | float) or isinstance(min_confidence, bool) or not 0 <= min_confidence <= 1:
        raise ValueError("its min_confidence is not a number from 0 to 1")
    trained_on = about if isinstance(about, dict) else {}
    beats = record.get("beats_heuristic")
    if beats is not None and not isinstance(beats, bool):
        raise ValueError("its beats_heuristic is not true or false")
    unproven: str | None = None
    if beats is None:
        unproven = OLDER_FILE
    elif not beats:
        validation, sessions = trained_on.get("cross_validation"), trained_on.get("sessions")
        unproven = unproven_reason(validation, sessions) or NOT_BEATEN
    return LearnedRouter(
        classes=tuple(drafters),
        settings=settings,
        idf=idf,
        weights=weights,
        bias=bias,
        label=label,
        trained_on=trained_on,
        min_confidence=float(min_confidence),
        unproven=unproven,
    )


def _array_record(values: np.ndarray) -> dict[str, Any]:
    data = np.ascontiguousarray(values, dtype="<f4").tobytes()
    return {"dtype": "float32", "shape": list(values.shape), "base64": base64.b64encode(data).decode("ascii")}


def _array(record: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(record, dict) or record.get("dtype") != "float32" or record.get("shape") != list(shape):
        raise ValueError(f"its {name} is not a float32 array of shape {list(shape)}")
    text = record.get("base64")
    try:
        data = base64.b64decode(text if isinstance(text, str) else "", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"its {name} is not base64") from None
    if len(data) != 4 * int(np.prod(shape)):
        raise ValueError(f"its {name} holds {len(data)} bytes, not {4 * int(np.prod(shape))}")
    values = np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(shape)
    if not np.isfinite(values).all():
        raise ValueError(f"its {name} holds values that are not finite numbers")
    return values


def _damaged(path: Path, detail: str) -> ConfigError:
    return ConfigError("router", f"{str(path)!r} is damaged: {detail}; train it again with {RETRAIN}")
