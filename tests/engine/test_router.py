"""The code-vs-prose router and route resolution."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from specplay.engine.routers.routing import (
    CodeProseRouter,
    check_route,
    check_route_map,
    default_route_map,
    resolve_route,
)
from specplay.errors import ConfigError
from tests.support.checks import every

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; i++) { total += a[i]; }",
    "x = np.zeros((3, 3))\nfor i in range(3):\n    x[i, i] = 1\n",
    "class Stack:\n    def __init__(self):\n        self._items = []\n",
]
PROSE = [
    "The river ran quietly past the old mill, and the miller's daughter watched it from the window.",
    "Explain in a few sentences why the sky is blue.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "The tutorial introduces the reader informally to the basic concepts and features of the language.",
]


@pytest.mark.parametrize("prompt", CODE)
def test_code_goes_to_code(prompt: str) -> None:
    assert CodeProseRouter().classify(prompt) == "code"


@pytest.mark.parametrize("prompt", PROSE)
def test_prose_goes_to_prose(prompt: str) -> None:
    assert CodeProseRouter().classify(prompt) == "prose"


def test_only_the_first_two_kilobytes_count() -> None:
    prompt = PROSE[0] * 40 + CODE[0] * 40
    assert CodeProseRouter().classify(prompt) == "prose"


def labelled_prompts() -> list[dict[str, str]]:
    text = resources.files("specplay.data").joinpath("router_prompts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_labelled_set_is_large_and_balanced() -> None:
    rows = labelled_prompts()
    assert every(row["label"] in ("code", "prose", "mixed") and row["kind"] and row["text"] for row in rows)
    counts = {label: sum(row["label"] == label for row in rows) for label in ("code", "prose", "mixed")}
    assert counts["code"] + counts["prose"] >= 100
    assert min(counts["code"], counts["prose"]) >= 0.4 * (counts["code"] + counts["prose"])
    assert counts["mixed"] >= 20
    assert every(row["route"] in ("code", "prose") for row in rows if row["label"] == "mixed")


def test_the_router_labels_95_percent_of_code_and_prose() -> None:
    router = CodeProseRouter()
    rows = [row for row in labelled_prompts() if row["label"] != "mixed"]
    wrong = [row["kind"] for row in rows if router.classify(row["text"]) != row["label"]]
    assert len(rows) - len(wrong) >= 0.95 * len(rows), wrong


def test_mixed_prompts_go_where_the_readme_says() -> None:
    """Sentences with a little code, short and non-English prompts all go to prose; most machine
    text (code in a question, config, tracebacks, markup, maths) goes to code, but the sparse kinds
    (SQL, shell, CSV, logs) may land on prose, the default."""
    router = CodeProseRouter()
    mixed = [row for row in labelled_prompts() if row["label"] == "mixed"]
    to_prose = [row["kind"] for row in mixed if row["route"] == "prose" and router.classify(row["text"]) != "prose"]
    assert not to_prose
    machine = [row for row in mixed if row["route"] == "code"]
    to_code = [row for row in machine if router.classify(row["text"]) == "code"]
    assert len(to_code) >= 0.66 * len(machine)


def test_route_map_defaults_and_pins() -> None:
    assert default_route_map(("code", "prose"), ("base", "prose")) == {"code": "base", "prose": "prose"}
    assert default_route_map(("code", "prose"), ("a", "b")) == {"code": "a", "prose": "a"}
    assert resolve_route("auto", "prose") == "prose"
    assert resolve_route("base", "prose") == "base"


def test_bad_routes_are_refused() -> None:
    with pytest.raises(ConfigError, match="'nope' is not a drafter"):
        check_route("nope", ("a", "b"))
    check_route("auto", ("a",))
    with pytest.raises(ConfigError, match="class 'poetry'"):
        check_route_map({"poetry": "a"}, ("code", "prose"), ("a",))
    with pytest.raises(ConfigError, match="not a drafter"):
        check_route_map({"code": "zz"}, ("code", "prose"), ("a",))
    check_route("none", ("a",))  # no speculation: a route, not a drafter
    check_route_map({"prose": "none"}, ("code", "prose"), ("a",))
    assert resolve_route("none", "a") == "none"
