"""The code-vs-prose router and route resolution."""

from __future__ import annotations

import pytest

from specplay.engine.router import CodeProseRouter, check_route, check_route_map, default_route_map, resolve_route
from specplay.errors import ConfigError

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
