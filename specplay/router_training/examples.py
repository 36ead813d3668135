"""Sessions as a learned router's examples: each session's prompt, every drafter's scores over its
counterfactual rounds (scores.py), and what it records of its prompt and route. A conversation's
turns are an example each, as `--route auto` routes each by its own prompt. Sessions that cannot
teach anything are skipped and counted, never silently dropped."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specplay.config.run_config import TARGET, prompt_format
from specplay.engine.events import round_fault
from specplay.errors import ConfigError
from specplay.router_training.scores import UNITS, ScoreKind, SessionScores, session_scores
from specplay.store import list_session_files, load_session
from specplay.store.format import Session, SessionError, TurnRecord

NO_COUNTERFACTUALS = "without counterfactual routes"
NOT_TIMED = "without timings (score them by acceptance: --score acceptance)"


@dataclass(frozen=True, slots=True)
class Example:
    """One session, as training or evaluation reads it."""

    path: Path
    prompt: str
    scores: SessionScores
    drafter_order: tuple[str, ...]
    """The run's drafters in the order it gave them (the heuristic's default route map reads it)."""
    route_map: Mapping[str, str]
    """The resolved route map the session records."""
    category: str | None = None
    """The prompt's category and name, where the session records them."""
    prompt_name: str | None = None
    raw: bool | None = None
    """Whether the prompt was encoded as written (--raw); None where the session does not say."""
    turn: int = 0
    """Which turn of its session's conversation (0: the first, or the only one)."""

    @property
    def drafters(self) -> tuple[str, ...]:
        return tuple(self.scores.drafters)


@dataclass
class Examples:
    examples: list[Example]
    skipped: Counter[str] = field(default_factory=Counter)
    """Sessions left out, by why (a conversation's turns count one each, as its examples do)."""

    @property
    def drafters(self) -> tuple[str, ...]:
        return self.examples[0].drafters if self.examples else ()

    def skipped_lines(self) -> list[str]:
        return [f"skipped {n} session{'s' if n != 1 else ''} {why}" for why, n in self.skipped.items()]

    def prompt_format_line(self) -> str:
        """How the sessions' prompts became tokens: a router learns one workload, so a mix is said."""
        counts = Counter(one.raw for one in self.examples)
        said = {raw: prompt_format(raw) if raw is not None else "not recorded" for raw in counts}
        if len(counts) == 1:
            return f"prompts: {said[next(iter(counts))]}"
        parts = "; ".join(f"{said[raw]} in {n}" for raw, n in counts.items())
        return f"warning: the sessions mix prompt formats ({parts}): train and evaluate on runs encoded alike"


def session_files(names: Sequence[str]) -> list[Path]:
    """Each SESSION a file, each DIR the session files in it (oldest first); one that is neither
    is one line naming it."""
    paths: list[Path] = []
    for name in names:
        path = Path(name).expanduser()
        if path.is_dir():
            paths += list_session_files(path)
        elif path.is_file():
            paths.append(path)
        else:
            raise SessionError(f"{name} is neither a session file nor a folder of sessions; check the path")
    return paths


def examples_of(session: Session) -> list[Example]:
    """The session's turns as examples (a conversation's each routed by its own prompt), leaving
    out those whose main lane has no counterfactual rounds (a target-only run, a single drafter,
    routes not judged)."""
    found = (example(session, turn) for turn in session.turns)
    return [one for one in found if one is not None]


def example(session: Session, turn: TurnRecord) -> Example | None:
    """One turn of the session as an example; None where its main lane has no counterfactual rounds."""
    if turn.main.name != "speculative":
        return None
    scores = session_scores(turn.main.rounds)
    if scores is None:
        return None
    request = session.header.get("request") or {}
    models = (session.header.get("backend") or {}).get("models") or {}
    order = tuple(name for name in models if name != TARGET and name in scores.drafters)
    if set(order) != set(scores.drafters):
        order = tuple(scores.drafters)  # a native or older record: name order
    route_map = request.get("route_map") or {}
    return Example(
        path=session.path,
        prompt=turn.prompt,
        turn=turn.index,
        scores=scores,
        drafter_order=order,
        route_map={str(k): str(v) for k, v in route_map.items()},
        category=_text(request.get("category")),
        prompt_name=_text(request.get("prompt_name")),
        raw=request["raw"] if isinstance(request.get("raw"), bool) else None,
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def read_examples(
    names: Sequence[str], drafters: Sequence[str] | None = None, kind: ScoreKind | None = None
) -> Examples:
    """The examples in the sessions `names` gives. Only sessions of one set of drafters are
    comparable: `drafters` (a router's), else the set most sessions judged; the others are
    skipped, as are sessions without counterfactual rounds, those with a round no run produces
    (named, with the round) and, scored by speed (`kind`), those whose rounds were not timed.
    None usable is one ConfigError."""
    found = Examples([])
    for path in session_files(names):
        session = load_session(path)
        # A count or time no run produces would be learned from as it stands (one flips a label).
        rounds = (event for lane in session.main_lanes for event in lane.rounds)
        if (fault := next(filter(None, map(round_fault, rounds)), None)) is not None:
            found.skipped[f"with a round no run produces ({path}: {fault})"] += 1
            continue
        ones = examples_of(session)
        if len(ones) < len(session.turns):
            found.skipped[NO_COUNTERFACTUALS] += len(session.turns) - len(ones)
        found.examples += ones
    if drafters is None and found.examples:
        counts = Counter(e.drafters for e in found.examples)
        wanted = max(counts, key=lambda key: counts[key])  # the first seen of the most common sets
    else:
        wanted = tuple(sorted(drafters or ()))
    kept = []
    for one in found.examples:
        if one.drafters != wanted:
            found.skipped[f"of other drafters ({', '.join(one.drafters)})"] += 1
        elif kind == "speed" and not one.scores.timed:
            found.skipped[NOT_TIMED] += 1
        else:
            kept.append(one)
    found.examples = kept
    if not kept:
        skipped = "; ".join(found.skipped_lines()) or "there are no session files"
        raise ConfigError(
            "session_args",
            f"hold no session that can be scored ({skipped}); save runs of several drafters with "
            "counterfactual routes (specplay run --counterfactual --save)",
        )
    return found


def score_kind(examples: Sequence[Example], asked: ScoreKind | None) -> ScoreKind:
    """The score asked for; by default speed where every session was timed, else acceptance."""
    if asked is not None:
        return asked
    return "speed" if all(e.scores.timed for e in examples) else "acceptance"


def unit(kind: ScoreKind) -> str:
    return UNITS[kind]
