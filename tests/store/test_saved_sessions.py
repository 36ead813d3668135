"""Sessions saved before the acceptance-rule refactor still read, diff, export and replay as they did.

The fixtures in tests/data/saved_sessions/ were written by specplay at commit 9063ff2 (its README
says how) and stand for the files users already have: never regenerate them. The goldens in
golden/ are what that specplay printed for them (`export`, `diff`, `sessions`) and what reading
them gave; `python -m tests.store.test_saved_sessions --write-goldens` rewrites them from the code in
the tree, for a change of output that is meant (then review their diff).

One normalisation: the fixtures' headers name the demo models' folder as `<DEMO_DIR>` instead of
the machine path they were written under; the replays put this checkout's folder back.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from specplay.backends import open_stream
from specplay.cli import main
from specplay.config.demo import DEMO_DIR
from specplay.engine.events import RoundEvent, StartEvent, StepEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.store import LaneRecord, Session, TurnRecord, load_session
from specplay.store.diff import is_lossless_greedy, lossy_from
from specplay.store.replay import session_config
from tests.support.checks import every
from tests.support.conversations import FIXTURE_PROMPTS, fixture_config, record_conversation

DATA = Path(__file__).resolve().parents[1] / "data" / "saved_sessions"
GOLDEN = DATA / "golden"
DEMO_PLACEHOLDER = "<DEMO_DIR>"

RELAXED_SOURCE = "relaxed"
"""The token source the reader gives a token kept only thanks to a relaxed rule (the TV budget,
lenience...). The fixtures, written before the name said what it means, spell it "budget"."""
RELAXED_OUTCOME = RELAXED_SOURCE
"""A drafted position's outcome for the same tokens (today the same word)."""
FILED_RELAXED = "budget"
"""How the fixtures spell it: never changes. The read goldens are written in the files' words."""


def tv_budget_of(settings: SpecSettings) -> float:
    """Mentored decoding's TV budget, a knob among the rules' settings (the fixtures keep it beside the rule)."""
    return settings.rule_params.tv_budget


def as_filed(name: str) -> str:
    """A source or outcome as the fixtures spell it."""
    return FILED_RELAXED if name == RELAXED_SOURCE else name


SAMPLED = "run-sampled-mentored"
"""`specplay run --save`: T 0.8, mentored D 0.4, counterfactual routes, with its target-only lane."""
LENIENCE = "run-sampled-lenience"
"""`specplay run --save --no-baseline`: the same prompt and seed under lenience λ 4, one lane."""
GREEDY = "run-greedy-lossless"
"""`specplay run --save`: greedy, D 0 (lossless), k 3, with its target-only lane."""
PLAYGROUND = "playground-live-change"
"""The playground's controller: T 0.7 D 0, then D 0.5 and T 1.0 changed while it ran."""
FIXTURES = (SAMPLED, LENIENCE, GREEDY, PLAYGROUND)
BASELINED = (SAMPLED, GREEDY, PLAYGROUND)
CONVERSATION = "conversation-sampled-mentored"
"""A conversation of three turns (tests/support/conversations.py): T 0.8, mentored D 0.4, each
lane answering every turn after its own earlier answers. Written later than the others, by a
specplay that records turns; its goldens stand for what a conversation's review shows."""

SAMPLED_IDS = [268, 1665, 297, 350, 331, 645, 10, 37, 91, 14, 285, 818, 268, 394, 268, 394]
SAMPLED_IDS += [43, 3084, 513, 1535, 871, 85, 483, 270, 1031, 14, 268, 394, 268, 380, 69, 10]
SAMPLED_TARGET_IDS = [268, 394, 1783, 3295, 270, 305, 298, 290, 923, 16, 223, 3983, 281, 350, 381, 85]
SAMPLED_TARGET_IDS += [11, 268, 394, 268, 2070, 284, 380, 551, 334, 65, 35, 14, 306, 91, 17, 264]
LENIENCE_IDS = [269, 394, 2624, 3859, 2285, 28, 292, 288, 848, 15, 1699, 452, 290, 1334, 201, 1106]
LENIENCE_IDS += [201, 1736, 490, 1905, 348, 261, 861, 270, 1093, 10, 19, 14, 356, 264, 4, 4]
GREEDY_IDS = [269, 394, 879, 290, 1029, 458, 370, 290, 1029, 765, 370, 290, 1029, 765, 16, 269, 394, 269]
GREEDY_IDS += [317, 297, 16, 736, 10, 281]
PLAYGROUND_IDS = [201, 499, 380, 656, 10, 82, 14, 394, 879, 497, 310, 290, 455, 318, 270, 733, 201, 201, 862, 85]
PLAYGROUND_IDS += [3698, 279, 2659, 483, 452, 1337, 341, 541, 3558, 683, 201, 959, 513, 3370, 452, 841, 270]
PLAYGROUND_IDS += [268, 3067, 964]
PLAYGROUND_TARGET_IDS = [201, 521, 380, 2811, 10, 281, 350, 3499, 315, 268, 394, 2474, 624, 362, 497, 426, 265]
PLAYGROUND_TARGET_IDS += [525, 1038, 2391, 1004, 318, 270, 478, 390, 268, 600, 277, 2405, 1434, 930, 330, 765, 16]
PLAYGROUND_TARGET_IDS += [268, 394, 335, 349, 380, 1414]


def fixture(name: str) -> Path:
    return DATA / f"{name}.jsonl"


def read(name: str) -> Session:
    return load_session(fixture(name))


@pytest.fixture(autouse=True)
def plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich prints no styles to a pipe unless the environment forces a terminal."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> tuple[int, str]:
    """`specplay ARGS` in this process: its exit status and what it printed to stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def printed(*args: str) -> str:
    code, out = cli(*args)
    assert code == 0, f"specplay {' '.join(args)} exited {code}"
    return out


def relaxed_indices(lane: LaneRecord) -> list[int]:
    return [i for i, source in enumerate(lane.sources) if source == RELAXED_SOURCE]


def check_kept_tokens_match_their_positions(lane: LaneRecord) -> None:
    """Every kept draft token is its position's token, and is relaxed exactly where its position's
    outcome says a relaxed rule kept it."""
    for event in lane.rounds:
        kept = event.tokens[: event.num_accepted]
        positions = event.positions[: len(kept)]
        assert [t.token_id for t in kept] == [p.token_id for p in positions]
        assert [p.outcome for p in positions] == [
            RELAXED_OUTCOME if t.source == RELAXED_SOURCE else "accepted" for t in kept
        ]


# --- what reading gives, as a plain record (the read goldens) ---------------------------------


def settings_view(settings: SpecSettings) -> dict[str, Any]:
    sampling, policy, rule = settings.sampling, settings.policy_params, settings.rule_params
    return {
        "k": settings.k,
        "policy": settings.policy,
        "route": settings.route,
        "tv_budget": tv_budget_of(settings),
        "rule": settings.rule,
        "rule_described": settings.acceptance_rule.describe(),
        "lossless_when_greedy": settings.acceptance_rule.lossless_when_greedy,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "min_p": sampling.min_p,
        "k_min": policy.k_min,
        "k_max": policy.k_max,
        "low_acceptance": policy.low_acceptance,
        "high_acceptance": policy.high_acceptance,
        "ema_alpha": policy.ema_alpha,
        "confidence_threshold": policy.confidence_threshold,
        "typical_epsilon": rule.typical_epsilon,
        "typical_delta": rule.typical_delta,
        "lenience": rule.lenience,
        "cascade_alpha": rule.cascade_alpha,
        "counterfactual": settings.counterfactual,
    }


def round_view(event: RoundEvent) -> dict[str, Any]:
    return {
        "index": event.index,
        "token_index": event.token_index,
        "route": event.drafter,
        "nodes": event.nodes,
        "drafted": list(event.drafted),
        "parents": list(event.parents),
        "num_accepted": event.num_accepted,
        "tokens": [[t.token_id, t.text, as_filed(t.source)] for t in event.tokens],
        "positions": [
            {
                "token_id": p.token_id,
                "outcome": as_filed(p.outcome),
                "p_target": p.p_target,
                "p_draft": p.p_draft,
                "uniform": p.uniform,
                "tv_distance": p.tv_distance,
                "theta": p.theta,
                "accept_probability": p.accept_probability,
                "tv_spent": p.tv_spent,
                "spent": p.spent,
                "tv_lower": p.tv_lower,
                "error_bound": p.error_bound,
                "top_target": p.top_target,
                "top_draft": p.top_draft,
                "correction_rank": p.correction_rank,
            }
            for p in event.positions
        ],
        "bonus_top_target": event.bonus_top_target,
        "counterfactuals": [[c.drafter, list(c.drafted), c.num_accepted, c.elapsed_ms] for c in event.counterfactuals],
        "ms": [event.draft_ms, event.verify_ms, event.overhead_ms],
    }


def lane_view(lane: LaneRecord) -> dict[str, Any]:
    start, done = lane.start, lane.done
    assert start is not None and done is not None
    metrics = dict(done.metrics)
    metrics["num_tokens_by_source"] = {as_filed(k): v for k, v in metrics["num_tokens_by_source"].items()}
    return {
        "start": {
            "mode": start.mode,
            "route": start.drafter,
            "auto_route": start.auto_route,
            "seed": start.seed,
            "prompt_token_ids": list(start.prompt_token_ids),
            "settings": settings_view(start.settings),
        },
        "complete": lane.complete,
        "token_ids": lane.token_ids,
        "texts": lane.texts,
        "sources": [as_filed(s) for s in lane.sources],
        "text": lane.text,
        "changes": [[c.token_index, [list(change) for change in c.changes]] for c in lane.changes],
        "rounds": [round_view(r) for r in lane.rounds],
        "steps": [
            [e.token_index, e.drafter, e.token.token_id, e.step_ms] for e in lane.events if isinstance(e, StepEvent)
        ],
        "done": {"finish_reason": done.finish_reason, "token_ids": list(done.token_ids), "text": done.text},
        "metrics": metrics,
    }


def read_view(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "complete": session.complete,
        "prompt": session.prompt,
        "lanes": list(session.header["lanes"]),
        "main": session.main.name,
        "baseline": session.baseline.name if session.baseline is not None else None,
        "request": session.header["request"],
        "capabilities": session.capabilities.to_record(),
        "measured_speedup": session.measured_speedup,
        "token_texts": {str(k): v for k, v in sorted(session.token_texts.items())},
        "lane": {name: lane_view(lane) for name, lane in session.lanes.items()},
    } | ({"turns": [turn_view(turn) for turn in session.turns]} if len(session.turns) > 1 else {})


def turn_view(turn: TurnRecord) -> dict[str, Any]:
    return {"turn": turn.index, "prompt": turn.prompt, "lane": {n: lane_view(lane) for n, lane in turn.lanes.items()}}


def read_golden(name: str) -> str:
    return json.dumps(read_view(read(name)), ensure_ascii=False, indent=1) + "\n"


# --- the goldens ---------------------------------------------------------------------------


def _goldens() -> dict[str, Callable[[], str]]:
    goldens: dict[str, Callable[[], str]] = {}
    for name in FIXTURES:
        path = str(fixture(name))
        goldens[f"{name}.read.json"] = partial(read_golden, name)
        goldens[f"{name}.md"] = partial(printed, "export", path, "--format", "md")
        goldens[f"{name}.html"] = partial(printed, "export", path, "--format", "html")
    for name in BASELINED:
        path = str(fixture(name))
        goldens[f"{name}.diff.json"] = partial(printed, "diff", path, "--json")
        goldens[f"{name}.diff.txt"] = partial(printed, "diff", path)
    path = str(fixture(CONVERSATION))
    goldens[f"{CONVERSATION}.read.json"] = partial(read_golden, CONVERSATION)
    goldens[f"{CONVERSATION}.md"] = partial(printed, "export", path, "--format", "md")
    goldens[f"{CONVERSATION}.html"] = partial(printed, "export", path, "--format", "html")
    goldens[f"{CONVERSATION}.diff.json"] = partial(printed, "diff", path, "--json")
    goldens[f"{CONVERSATION}.diff.txt"] = partial(printed, "diff", path)
    a, b = str(fixture(SAMPLED)), str(fixture(LENIENCE))
    pair = f"{SAMPLED}+{LENIENCE}"
    goldens[f"{pair}.diff.json"] = partial(printed, "diff", a, b, "--json")
    goldens[f"{pair}.diff.txt"] = partial(printed, "diff", a, b)
    goldens[f"{pair}.md"] = partial(printed, "export", a, b, "--format", "md")
    goldens[f"{pair}.html"] = partial(printed, "export", a, b, "--format", "html")
    goldens["sessions.ndjson"] = partial(printed, "sessions", "--sessions-dir", str(DATA), "--json")
    return goldens


GOLDENS = _goldens()


def first_differences(expected: str, actual: str, limit: int = 40) -> str:
    lines = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "golden", "now", lineterm="", n=1)
    return "\n".join(line[:300] for line in list(lines)[:limit])


def test_the_goldens_on_disk_are_the_ones_checked() -> None:
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(GOLDENS)


@pytest.mark.parametrize("name", list(GOLDENS))
def test_output_is_the_golden(name: str) -> None:
    """`export` (md, html), `diff` (text, JSON), `sessions --json` and what reading gives, byte for byte."""
    expected = (GOLDEN / name).read_bytes().decode("utf-8")
    actual = GOLDENS[name]()
    assert actual == expected, f"{name} differs from its golden:\n{first_differences(expected, actual)}"


@pytest.mark.parametrize("name", [*FIXTURES, CONVERSATION])
def test_the_raw_export_is_the_file_itself(name: str) -> None:
    assert printed("export", str(fixture(name)), "--format", "jsonl").encode("utf-8") == fixture(name).read_bytes()


# --- key fields, read ----------------------------------------------------------------------


def test_the_sampled_mentored_session_reads() -> None:
    session = read(SAMPLED)
    assert session.complete and list(session.lanes) == ["speculative", "target"]
    lane, baseline = session.main, session.baseline
    assert lane.start is not None and baseline is not None and baseline.start is not None
    settings = lane.settings
    assert tv_budget_of(settings) == 0.4 and settings.rule == "mentored" and settings.k == 4
    assert settings.sampling.temperature == 0.8 and settings.counterfactual and settings.route == "auto"
    assert settings.acceptance_rule.describe() == "mentored D 0.4" and not settings.acceptance_rule.lossless
    assert not is_lossless_greedy(settings)
    assert (lane.start.mode, lane.start.drafter, lane.start.seed) == ("speculative", "base", 0)
    assert lane.token_ids == SAMPLED_IDS and lane.done is not None and lane.done.finish_reason == "length"
    assert relaxed_indices(lane) == [7, 12, 13, 17, 29]
    assert Counter(lane.sources) == {"accepted": 20, "bonus": 6, RELAXED_SOURCE: 5, "corrected": 1}
    assert lane.metrics["num_tokens_by_source"] == Counter(lane.sources)  # the metrics say what the tokens say
    check_kept_tokens_match_their_positions(lane)
    assert Counter(p.outcome for r in lane.rounds for p in r.positions) == {
        "accepted": 20,
        RELAXED_OUTCOME: 5,
        "unreached": 3,
        "rejected": 1,
    }
    assert [[c.drafter for c in r.counterfactuals] for r in lane.rounds] == [["prose"]] * 8
    assert set(lane.metrics["counterfactual"]) == {"base", "prose"} and lane.metrics["route_regret"] == 0.0
    assert lane.metrics["tv_spent"] == 6.803577896952629
    # Older than a rejection's rank: its positions and metrics read without one.
    assert all(p.correction_rank is None for r in lane.rounds for p in r.positions)
    assert "rejection_rank_histogram" not in lane.metrics
    assert baseline.token_ids == SAMPLED_TARGET_IDS and set(baseline.sources) == {"target"}
    assert baseline.start.mode == "target" and tv_budget_of(baseline.settings) == 0.4


def test_the_lenience_session_reads(capsys: pytest.CaptureFixture[str]) -> None:
    session = read(LENIENCE)
    assert session.complete and list(session.lanes) == ["speculative"] and session.baseline is None
    lane = session.main
    settings = lane.settings
    assert settings.rule == "lenience" and settings.rule_params.lenience == 4.0 and tv_budget_of(settings) == 0.0
    assert settings.acceptance_rule.describe() == "lenience λ 4" and settings.sampling.temperature == 0.8
    assert lane.token_ids == LENIENCE_IDS
    assert relaxed_indices(lane) == [0, 2, 5, 6, 9, 13, 14, 16, 17, 23, 26, 29]
    assert lane.metrics["num_tokens_by_source"] == Counter(lane.sources)
    assert lane.metrics["num_tokens_by_source"] == {RELAXED_SOURCE: 12, "accepted": 13, "corrected": 2, "bonus": 5}
    check_kept_tokens_match_their_positions(lane)
    # Without a target-only lane, diff has nothing to compare it with: one error line.
    assert cli("diff", str(fixture(LENIENCE))) == (2, "")
    assert "has no target-only lane to compare with" in capsys.readouterr().err


def test_the_greedy_lossless_session_reads() -> None:
    session = read(GREEDY)
    lane, baseline = session.main, session.baseline
    assert baseline is not None and session.complete
    settings = lane.settings
    assert settings.sampling.greedy and tv_budget_of(settings) == 0.0 and settings.k == 3
    assert settings.acceptance_rule.lossless and is_lossless_greedy(settings)
    assert lane.start is not None and lane.start.drafter == "base"
    assert lane.token_ids == GREEDY_IDS == baseline.token_ids  # lossless: the target's own text
    assert RELAXED_SOURCE not in lane.sources
    assert Counter(lane.sources) == {"accepted": 13, "corrected": 9, "bonus": 2}
    check_kept_tokens_match_their_positions(lane)
    verdict = json.loads(printed("diff", str(fixture(GREEDY)), "--json"))
    assert verdict["identical"] and verdict["lossless_greedy"] and verdict["violation"] is None


def test_sessions_saved_before_the_asked_k_was_recorded_read_it_as_unknown() -> None:
    for name in FIXTURES:
        assert every(r.k_asked is None for lane in read(name).lanes.values() for r in lane.rounds)


def test_the_playground_session_reads_with_its_live_changes() -> None:
    session = read(PLAYGROUND)
    assert session.complete and list(session.lanes) == ["speculative", "target"]
    request = session.header["request"]
    assert request["source"] == "tui" and request["lanes_run_side_by_side"] and request["seed"] == 2
    lane, baseline = session.main, session.baseline
    assert baseline is not None
    start = lane.settings
    assert tv_budget_of(start) == 0.0 and start.sampling.temperature == 0.7 and start.rule == "mentored"
    assert [(c.token_index, c.changes) for c in lane.changes] == [
        (6, (("tv_budget", 0.0, 0.5),)),
        (16, (("temperature", 0.7, 1.0),)),
    ]
    assert [(c.token_index, c.changes) for c in baseline.changes] == [(5, (("temperature", 0.7, 1.0),))]
    after = start
    for change in lane.changes:  # the settings in force after the changes, as `diff` folds them
        after = after.changed(**{name: new for name, _old, new in change.changes})
    assert tv_budget_of(after) == 0.5 and after.sampling.temperature == 1.0
    assert lossy_from(lane) == 6
    # Lossless until the TV budget was raised: every relaxed token comes after it.
    assert relaxed_indices(lane) == [7, 8, 17, 22, 24, 26, 27]
    assert lane.token_ids == PLAYGROUND_IDS and baseline.token_ids == PLAYGROUND_TARGET_IDS
    assert lane.metrics["num_tokens_by_source"] == Counter(lane.sources)
    check_kept_tokens_match_their_positions(lane)
    # The playground inspects: each position's top 5 of both distributions, and every drafted token's text.
    assert {len(p.top_target or ()) for r in lane.rounds for p in r.positions} == {5}
    drafted = {token_id for r in lane.rounds for token_id in r.drafted}
    assert drafted <= set(session.token_texts)


def test_the_conversation_session_reads_turn_by_turn() -> None:
    session = read(CONVERSATION)
    assert session.complete and [turn.prompt for turn in session.turns] == list(FIXTURE_PROMPTS)
    assert session.prompt == FIXTURE_PROMPTS[0] and session.lanes is session.turns[0].lanes
    for turn in session.turns:
        assert list(turn.lanes) == ["speculative", "target"] and turn.main.name == "speculative"
        assert turn.baseline is turn.lanes["target"] and turn.main.complete and turn.baseline.complete
        assert len(turn.main.tokens) == len(turn.baseline.tokens) == 16
        assert turn.main.metrics["num_tokens_by_source"] == Counter(turn.main.sources)
        check_kept_tokens_match_their_positions(turn.main)
    # every source shows up over the conversation; sampled, the lanes part in the first turn
    assert {"accepted", "relaxed", "corrected", "bonus"} <= {s for t in session.turns for s in t.main.sources}
    assert session.main.token_ids != session.baseline.token_ids  # type: ignore[union-attr]
    # each lane answered after its own earlier turns: a later turn's prompt tokens are longer, and
    # the two lanes' differ once their answers have
    for name in ("speculative", "target"):
        lengths = [len(t.lanes[name].start.prompt_token_ids) for t in session.turns]  # type: ignore[union-attr]
        assert lengths == sorted(set(lengths))
    later = session.turns[1]
    assert later.main.start is not None and later.baseline is not None and later.baseline.start is not None
    assert later.main.start.prompt_token_ids != later.baseline.start.prompt_token_ids
    # the drafted tokens of every turn have their texts
    drafted = {token_id for t in session.turns for r in t.main.rounds for token_id in r.drafted}
    assert drafted <= set(session.token_texts)


def test_the_conversation_session_is_what_the_demo_models_answer(tmp_path: Path) -> None:
    """Recorded again as it was made, every turn of both lanes has the fixture's tokens and sources."""
    old = read(CONVERSATION)
    config = fixture_config(tmp_path)
    source = open_stream(config)
    try:
        new = load_session(record_conversation(source, config, FIXTURE_PROMPTS))
    finally:
        source.close()
    assert len(new.turns) == len(old.turns)
    for again, turn in zip(new.turns, old.turns, strict=True):
        assert again.prompt == turn.prompt
        for name, lane in turn.lanes.items():
            assert again.lanes[name].token_ids == lane.token_ids, (turn.index, name)
            assert again.lanes[name].sources == lane.sources, (turn.index, name)
            assert again.lanes[name].start.prompt_token_ids == lane.start.prompt_token_ids  # type: ignore[union-attr]


# --- replays on the demo models ------------------------------------------------------------


def with_demo_paths(name: str, folder: Path) -> Path:
    """A copy of the fixture whose header names this checkout's demo models."""
    text = fixture(name).read_text(encoding="utf-8")
    assert text.count(DEMO_PLACEHOLDER) == 6  # the source and path of the target and both drafters
    copy = folder / fixture(name).name
    copy.write_text(text.replace(DEMO_PLACEHOLDER, json.dumps(str(DEMO_DIR))[1:-1]), encoding="utf-8")
    return copy


def rounds_of(lane: LaneRecord) -> list[tuple[Any, ...]]:
    return [
        (
            r.token_index,
            r.drafter,
            r.drafted,
            r.num_accepted,
            [p.outcome for p in r.positions],
            [(c.drafter, c.drafted, c.num_accepted) for c in r.counterfactuals],
        )
        for r in lane.rounds
    ]


def test_run_replay_reproduces_the_sampled_session_from_its_recorded_models(tmp_path: Path) -> None:
    """`specplay run --replay FILE --save`, the models read from the old header."""
    old = read(SAMPLED)
    out = tmp_path / "replayed"
    replay = printed("run", "--replay", str(with_demo_paths(SAMPLED, tmp_path)), "--save", "--sessions-dir", str(out))
    assert "saved" in replay
    (path,) = out.glob("*.jsonl")
    new = load_session(path)
    assert new.complete and list(new.lanes) == list(old.lanes)
    assert new.main.settings == old.main.settings and tv_budget_of(new.main.settings) == 0.4
    for name in ("speculative", "target"):
        assert new.lanes[name].token_ids == old.lanes[name].token_ids
        assert new.lanes[name].sources == old.lanes[name].sources
    assert new.main.token_ids == SAMPLED_IDS and relaxed_indices(new.main) == [7, 12, 13, 17, 29]
    assert rounds_of(new.main) == rounds_of(old.main)
    old_models, new_models = old.header["backend"]["models"], new.header["backend"]["models"]
    assert {k: m["weights_sha256"] for k, m in new_models.items()} == {
        k: m["weights_sha256"] for k, m in old_models.items()
    }
    verdict = json.loads(printed("diff", str(fixture(SAMPLED)), str(path), "--json"))
    assert verdict["identical"] and verdict["similarity"] == 1.0


@pytest.mark.parametrize(
    ("name", "token_ids", "relaxed"),
    [(GREEDY, GREEDY_IDS, []), (LENIENCE, LENIENCE_IDS, [0, 2, 5, 6, 9, 13, 14, 16, 17, 23, 26, 29])],
    ids=[GREEDY, LENIENCE],
)
def test_run_replay_on_the_demo_models_reproduces_the_tokens(
    name: str, token_ids: list[int], relaxed: list[int]
) -> None:
    """`specplay run --replay FILE --target demo --json`: the session's settings on the models named."""
    old = read(name)
    again = json.loads(printed("run", "--replay", str(fixture(name)), "--target", "demo", "--json"))
    assert again["token_ids"] == old.main.token_ids == token_ids
    assert again["sources"] == old.main.sources
    assert [i for i, source in enumerate(again["sources"]) if source == RELAXED_SOURCE] == relaxed
    assert again["route"] == "base" and again["seed"] == 0
    assert [(r["token_index"], r["drafted"], r["num_accepted"]) for r in again["rounds"]] == [
        (r.token_index, list(r.drafted), r.num_accepted) for r in old.main.rounds
    ]


def replay_lane(session: Session, lane: LaneRecord, source: Any, max_tokens: int, ignore_eos: bool) -> LaneRecord:
    """One lane again, as the playground ran it, its recorded live changes made at their tokens."""
    assert lane.start is not None
    request = Request(
        session.prompt,
        lane.start.prompt_token_ids,
        lane.start.mode,  # type: ignore[arg-type]
        lane.start.seed,
        max_tokens,
        ignore_eos,
        pipeline=False,
        inspect=lane.name == "speculative",
    )
    controls = LiveControls(lane.settings, source.drafters if lane.name != "target" else ())
    pending = list(lane.changes)
    again = LaneRecord(lane.name)
    for event in source.generate(request, controls):
        again.add(event)
        if isinstance(event, StartEvent | RoundEvent | StepEvent):
            while pending and pending[0].token_index == len(again.tokens):
                controls.update(**{name: new for name, _old, new in pending.pop(0).changes})
    assert not pending
    return again


def test_the_playground_session_replays_with_its_live_changes(tmp_path: Path) -> None:
    """The store's replay configuration (models from the old header), both lanes, changes made where recorded."""
    session = load_session(with_demo_paths(PLAYGROUND, tmp_path))
    config = session_config(session)
    assert config.settings == session.main.settings and config.request.max_tokens == 40
    source = open_stream(config)
    try:
        for name, lane in session.lanes.items():
            again = replay_lane(session, lane, source, config.request.max_tokens, config.request.ignore_eos)
            assert again.token_ids == lane.token_ids, name
            assert again.sources == lane.sources, name
            assert [(c.token_index, c.changes) for c in again.changes] == [
                (c.token_index, c.changes) for c in lane.changes
            ]
            assert rounds_of(again) == rounds_of(lane)
            assert again.done is not None and lane.done is not None
            assert again.done.finish_reason == lane.done.finish_reason == "length"
    finally:
        source.close()
    assert relaxed_indices(session.main) == [7, 8, 17, 22, 24, 26, 27]


if __name__ == "__main__":
    import os
    import sys

    if sys.argv[1:] != ["--write-goldens"]:
        raise SystemExit("usage: python -m tests.store.test_saved_sessions --write-goldens  (rewrites golden/)")
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        os.environ.pop(variable, None)
    GOLDEN.mkdir(exist_ok=True)
    for old_file in GOLDEN.iterdir():
        old_file.unlink()
    for golden_name, produce in GOLDENS.items():
        (GOLDEN / golden_name).write_bytes(produce().encode("utf-8"))
    print(f"wrote {len(GOLDENS)} goldens to {GOLDEN}")
