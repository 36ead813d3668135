"""Where `--route auto` sent each turn of a conversation, and why, is saved with the turn: the first
turn's in the header's request (as before), each later turn's in its turn record, since auto
chooses anew for each turn's prompt. The reader gives each turn its own; a review's turn heading
names it; sessions saved before the record read as they did."""

from __future__ import annotations

import json
from pathlib import Path

from specplay.cli.sessions import summarize
from specplay.config.run_config import RequestConfig, RunConfig
from specplay.drafters import ModelConfig
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from specplay.review import export_sessions
from specplay.runner.session_run import run_sample
from specplay.store import load_session
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.scripted import scripted_backend, scripted_engine
from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session

ROUTE_MAP = {"code": "near", "prose": "far"}
PROMPTS = (CODE_PROMPT, PROSE_PROMPT, CODE_PROMPT)


def _saved(directory: Path, route: str = "auto", mode: str = "speculative") -> Path:
    """`specplay run --save` of a conversation of code, prose and code again on the scripted engine."""
    backend = scripted_backend(drafters=("near", "far"))
    engine = scripted_engine(backend, route_map=ROUTE_MAP)
    drafters = tuple(ModelConfig(name, "drafter", "mlx", f"scripted:{name}") for name in ROUTE_MAP.values())
    config = RunConfig(
        target=ModelConfig("target", "target", "mlx", "/scripted"),
        drafters=drafters,
        request=RequestConfig(prompt=PROMPTS[0], raw=True, follow_ups=PROMPTS[1:]),
        settings=SpecSettings(route=route),
        sessions_dir=directory,
        route_map=ROUTE_MAP,
    )
    request = Request(PROMPTS[0], tuple(backend.encode(PROMPTS[0], raw=True)), mode, max_tokens=8)  # type: ignore[arg-type]
    run = run_sample(engine, config, request, lambda lane, event: None, True, True, follow_ups=PROMPTS[1:])
    assert run.session is not None
    return run.session


def test_each_turn_records_and_reads_where_auto_sent_it_and_why(tmp_path: Path) -> None:
    session = load_session(_saved(tmp_path))
    choices = [turn.route_choice for turn in session.turns]
    assert [c["drafter"] if c else None for c in choices] == ["near", "far", "near"]
    # what the engine did in each turn is what its record says
    assert [turn.main.start.drafter for turn in session.turns] == ["near", "far", "near"]  # type: ignore[union-attr]
    assert session.turns[0].route_choice == session.header["request"]["route_choice"]  # the header, as before
    assert session.turns[1].route_text("why") == "auto: prose prompt → far (the route map)"
    assert session.turns[2].route_text("why") == "auto: code prompt → near (the route map)"
    records = [r for r in session.records if r["type"] == "turn"]
    assert [r["route_choice"]["class"] for r in records] == ["prose", "code"]
    assert summarize(session)["route_why"] == session.turns[0].route_text("why")  # `sessions` reads the first


def test_a_named_route_or_a_target_only_run_records_no_choice(tmp_path: Path) -> None:
    for folder, route, mode in (("near", "near", "speculative"), ("target", "auto", "target")):
        session = load_session(_saved(tmp_path / folder, route, mode))
        assert all(turn.route_choice is None for turn in session.turns)
        assert "route_choice" not in session.header["request"]
        assert all("route_choice" not in r for r in session.records if r["type"] == "turn")


def test_a_review_names_each_turns_route_and_why(tmp_path: Path) -> None:
    session = load_session(_saved(tmp_path))
    transcript = export_sessions([session], "md")
    headings = [line for line in transcript.splitlines() if line.startswith("## Turn ")]
    assert headings == [
        "## Turn 1 of 3 · auto: code prompt → near (the route map)",
        "## Turn 2 of 3 · auto: prose prompt → far (the route map)",
        "## Turn 3 of 3 · auto: code prompt → near (the route map)",
    ]
    page = export_sessions([session], "html")
    assert "<h2>Turn 2 of 3 · auto: prose prompt → far (the route map)</h2>" in page


def test_a_session_from_before_the_record_reads_and_reviews_as_before(tmp_path: Path) -> None:
    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    path = write_session(tmp_path, lanes, later_turns=[("and again", lanes)])
    session = load_session(path)
    assert [turn.route_choice for turn in session.turns] == [None, None]
    headings = [line for line in export_sessions([session], "md").splitlines() if line.startswith("## Turn ")]
    assert headings == ["## Turn 1 of 2", "## Turn 2 of 2"]
    # a record a newer or damaged file holds in another shape is no choice, never an error
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        if record["type"] == "turn":
            record["route_choice"] = "near"
        if record["type"] == "header":
            record["request"]["route_choice"] = {"why": 3}
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    damaged = load_session(path)
    assert damaged.turns[1].route_choice is None and damaged.turns[0].route_text("why") is None
    assert summarize(damaged)["route_why"] is None
