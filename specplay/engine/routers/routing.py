"""Routing for a mixture of speculators: pick the drafter that serves a request.

A `Router` labels a prompt with a class ("code", "prose"...); a route map sends each class to
a drafter. A pinned route (a drafter's name) bypasses the router. Anything with `classes` and
`classify` (and a `label` for route choices) can replace the heuristic here: the learned router
(routers/learned.py) does. A learned router says how sure it is of each prompt; below the
confidence its training validated, the heuristic decides instead (a fallback `Routing`), and the route
choice says which of them chose. A learned router whose cross-validated picks did not beat the
heuristic's on its own training sessions (`unproven`) is never followed: the heuristic decides
every prompt, and every choice says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from specplay.engine.settings import ADAPTIVE_ROUTE, AUTO_ROUTE, NONE_ROUTE, RESERVED_ROUTES, ROUTE_SETTINGS
from specplay.errors import ConfigError


class Router(Protocol):
    classes: tuple[str, ...]
    label: str | None
    """How a route choice names a trained router ("the learned router r.json"); None: the heuristic."""
    min_confidence: float
    """Below this confidence the router defers to a fallback, where there is one."""
    unproven: str | None
    """Why the router defers on every prompt, following its label ("picked the best drafter for 3
    of its 8 training sessions held out one at a time, ..."); None: it chooses where sure."""

    def classify(self, prompt: str) -> str: ...

    def confidence(self, prompt: str) -> float | None:
        """The probability it gives its class for `prompt`; None: a rule's answer, not an estimate."""
        ...


# Characters far denser in source code than in prose. bytes.translate deletes them all in one C
# pass (str.translate falls back to a slow path on non-ASCII text), so scoring a 2 KB prompt
# takes a few microseconds.
_CODE_BYTES = b"{}[]()=_;<>#*/\\|&+-%!@$^~`\"'"
# Words and pairs that mark code in even a short snippet; counted up to four.
_CODE_WORDS = (
    "def ", "import ", "return", "self", "class ", "lambda", "elif ", "print(", "#include", "function ",
    "const ", "):", "()", " = ", "==", "+=", "None", "True", "False", "async ", "await ",
)  # fmt: skip
# English function words: about one word in five of running prose, rare in code outside comments
# and docstrings. Words that are also keywords (and, or, not, in, is, for, with, as, if, this)
# are left out, since code uses them as often as prose does.
_PROSE_WORDS = (
    " the ", " of ", " to ", " a ", " an ", " that ", " it ", " be ", " are ", " was ",
    " which ", " by ", " on ", " at ", " has ", " have ", " will ", " they ", " its ", " but ",
)  # fmt: skip
_SAMPLE_CHARS = 2048


class CodeProseRouter:
    """Code vs prose from the first 2 KB of a prompt. Evidence for code: the density of code
    characters, the share of indented lines and code words (saturating at four). Evidence for
    prose: the share of words that are English function words, which sentences need and code
    lacks; it lets a snippet with little punctuation or indentation (imports, a one-line
    signature) count as code without pulling punctuated prose over the line.

    The weights and threshold were chosen on windows of the standard library's source against its
    documentation and docstrings (benchmarks/bench_router.py); specplay/data/router_prompts.jsonl,
    written apart from that corpus, checks them. A prompt that is neither goes where its evidence
    leans: code, commands, config, tracebacks or symbolic maths to "code"; sentences with a little
    inline code, short or non-English text to "prose", the default when there is no evidence.
    """

    classes = ("code", "prose")
    label: str | None = None
    min_confidence = 0.0
    unproven: str | None = None

    def __init__(
        self, threshold: float = 0.17, indent_weight: float = 0.5, word_weight: float = 0.1, prose_weight: float = 1.2
    ) -> None:
        self.threshold = threshold
        self.indent_weight = indent_weight
        self.word_weight = word_weight
        self.prose_weight = prose_weight

    def score(self, prompt: str) -> float:
        text = prompt[:_SAMPLE_CHARS]
        ascii_text = text.encode("ascii", "ignore")
        code_chars = len(ascii_text) - len(ascii_text.translate(None, _CODE_BYTES))
        density = code_chars / max(len(text), 1)
        indented = (text.count("\n    ") + text.count("\n\t")) / max(text.count("\n"), 1)
        head = text[:512]  # words are counted in the head only, to keep the cost down
        words = min(1.0, sum(head.count(word) for word in _CODE_WORDS) / 4)
        prose = sum(head.count(word) for word in _PROSE_WORDS) / (head.count(" ") + 1)
        return density + self.indent_weight * indented + self.word_weight * words - self.prose_weight * prose

    def classify(self, prompt: str) -> str:
        return "code" if self.score(prompt) >= self.threshold else "prose"

    def confidence(self, prompt: str) -> float | None:
        return None


def default_route_map(classes: Sequence[str], drafters: Sequence[str]) -> dict[str, str]:
    """Each class to the drafter of the same name if there is one, else to the first drafter."""
    return {c: (c if c in drafters else drafters[0]) for c in classes}


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """Where `--route auto` sends a prompt, and why: what the playground says, never a silent fallback."""

    prompt_class: str
    """The router's label for the prompt ("code", "prose")."""
    drafter: str
    """A drafter's name, or `none` (no speculation)."""
    why: str
    """How the class reached the drafter: its name, the route map (and the map's note on why, where
    it has one), or the first-drafter default."""
    learned: bool = False
    """A trained router's choice: its classes are drafters, not kinds of prompt."""
    confidence: float | None = None
    """The learned router's probability of its class, where one was asked."""
    deferred: str | None = None
    """Why a learned router let the heuristic choose ("the learned router r.json is 41% sure, below its
    60%", or why it is never followed: its cross-validated picks did not beat the heuristic's)."""

    @property
    def chosen_by(self) -> str:
        """ "learned" or "heuristic": which router made the choice."""
        return "learned" if self.learned else "heuristic"

    def describe(self) -> str:
        if self.learned:
            sure = f", {self.confidence:.0%} sure" if self.confidence is not None else ""
            return f"auto: {self.drafter} ({self.why}{sure})"
        if self.deferred:
            return f"auto: {self.prompt_class} prompt → {self.drafter} (the heuristic, as {self.deferred}; {self.why})"
        return f"auto: {self.prompt_class} prompt → {self.drafter} ({self.why})"

    def record(self) -> dict[str, object]:
        """What `run --json` reports of the choice."""
        return {
            "drafter": self.drafter,
            "class": self.prompt_class,
            "chosen_by": self.chosen_by,
            "confidence": self.confidence,
            "deferred": self.deferred,
            "why": self.describe(),
        }


@dataclass(frozen=True, slots=True)
class Routing:
    """How a request's drafter is chosen, built once for a run (`routing_for`) and read by whatever
    streams its events (the engine, a speculating server's stream): the router, its route map
    resolved over the drafters, and where a learned router is unsure, the heuristic's own."""

    router: Router
    route_map: Mapping[str, str]
    """Router class to drafter, resolved (`route_map_for`): what sessions record."""
    named: Mapping[str, str]
    """The classes the configuration mapped; the others go by `route_map_for`'s default."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Why the map sends a class where it does, where the configuration says."""
    fallback: Routing | None = None
    """Who chooses where a learned router is unsure (the heuristic and its map)."""

    def choice(self, prompt: str) -> RouteChoice:
        return route_choice(self.router, self.route_map, self.named, prompt, notes=self.notes, fallback=self.fallback)


def routing_for(
    drafters: Sequence[str],
    router: Router | None = None,
    route_map: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    fallback: Routing | None = None,
) -> Routing:
    """The routing of a run over `drafters` (the heuristic where no router is given)."""
    router = router or CodeProseRouter()
    resolved = route_map_for(router, drafters, route_map)
    return Routing(router, resolved, dict(route_map or {}), dict(notes or {}), fallback)


def route_choice(
    router: Router,
    route_map: Mapping[str, str],
    named: Mapping[str, str],
    prompt: str,
    notes: Mapping[str, str] | None = None,
    fallback: Routing | None = None,
) -> RouteChoice:
    """The router's class for `prompt` and the drafter `route_map` (resolved: `route_map_for`)
    sends it to, with the reason; `named`: the classes the user or the model set mapped; `notes`:
    why the map sends a class where it does, where it says ("exit measured 0.34× here");
    `fallback`: who chooses where the router is less sure than its `min_confidence`."""
    confidence = router.confidence(prompt)
    if fallback is not None and (why := deferral(router, confidence)) is not None:
        return replace(fallback.choice(prompt), confidence=confidence, deferred=why)
    prompt_class = router.classify(prompt)
    if prompt_class not in route_map:  # no drafter to route to (`--route none` alone): nothing drafts
        return RouteChoice(prompt_class, NONE_ROUTE, "no drafter to route to")
    drafter = route_map[prompt_class]
    note = (notes or {}).get(prompt_class)
    if router.label is not None:
        why = router.label if prompt_class not in named else f"{router.label}'s {prompt_class}, then the route map"
        why = f"{why}: {note}" if note else why
        return RouteChoice(prompt_class, drafter, why, learned=True, confidence=confidence)
    if prompt_class in named:
        why = f"the route map: {note}" if note else "the route map"
    elif drafter == prompt_class:
        why = f"the drafter named {prompt_class}"
    else:
        why = f"the first drafter: none is named {prompt_class}, and no --route-map {prompt_class}=NAME"
    return RouteChoice(prompt_class, drafter, why)


def defers(router: Router, confidence: float | None) -> bool:
    """Whether `router`, this sure of a prompt, leaves the choice to the heuristic (a rule never does)."""
    return deferral(router, confidence) is not None


def deferral(router: Router, confidence: float | None) -> str | None:
    """Why `router`, this sure of a prompt, leaves the choice to the heuristic; None where it chooses:
    an unproven router never chooses, a proven one not below its `min_confidence`, a rule always."""
    if router.unproven is not None:
        return f"{router.label} {router.unproven}"
    if confidence is not None and confidence < router.min_confidence:
        return f"{router.label} is {confidence:.0%} sure, below its {router.min_confidence:.0%}"
    return None


def fallback_for(
    router: Router | None, drafters: Sequence[str], route_map: Mapping[str, str], notes: Mapping[str, str]
) -> Routing | None:
    """The heuristic behind a trained router (None for the heuristic itself), with its route map
    (`route_map`: the classes the configuration named) and the map's notes."""
    if router is None or router.label is None or not drafters:
        return None
    return routing_for(drafters, CodeProseRouter(), route_map, notes)


def check_route_map(route_map: Mapping[str, str], classes: Sequence[str], drafters: Sequence[str]) -> None:
    """Each class to a drafter, or to `none` (no speculation for that class)."""
    for cls, drafter in route_map.items():
        if cls not in classes:
            raise ConfigError("route_map", f"names class {cls!r}; the router's classes are {', '.join(classes)}")
        if drafter not in drafters and drafter != NONE_ROUTE:
            raise ConfigError(
                "route_map",
                f"sends {cls!r} to {drafter!r}, which is not a drafter ({', '.join(drafters)}) nor {NONE_ROUTE}",
            )


def check_route(route: str, drafters: Sequence[str]) -> None:
    if route not in RESERVED_ROUTES and route not in drafters:
        raise ConfigError(
            "route", f"{route!r} is not a drafter; use auto, adaptive, {NONE_ROUTE} or one of: {', '.join(drafters)}"
        )


def resolve_route(route: str, auto_choice: str) -> str:
    """The drafter a round uses (or `none`): the pinned one, or the router's choice for this
    request (where `adaptive`, deciding round by round in routers/rounds.py, starts)."""
    return auto_choice if route in ROUTE_SETTINGS else route


def describe_route(route: str, choice: RouteChoice | None) -> str:
    """Where a route setting sends a request, for a status line: auto says which class it saw and
    how that class reached its drafter (`choice`, None where no router was asked); a pinned route
    says so."""
    if route == ADAPTIVE_ROUTE and choice is not None:
        return f"adaptive: a drafter each round, from what the run measures (first {choice.drafter})"
    if route == NONE_ROUTE:
        return "route none: no speculation, each round a target step"
    if route != AUTO_ROUTE or choice is None:
        return f"route {route} (pinned)"
    return choice.describe()


def route_map_for(router: Router, drafters: Sequence[str], user_map: Mapping[str, str] | None) -> dict[str, str]:
    """The user's route map over the default one (classes it leaves out keep their default
    drafter), checked; empty when there is no drafter to route to."""
    if not drafters:
        return {}
    route_map = default_route_map(router.classes, drafters) | dict(user_map or {})
    check_route_map(route_map, router.classes, drafters)
    return route_map
