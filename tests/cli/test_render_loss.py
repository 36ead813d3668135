"""`specplay run`'s summary explains a loss as the playground's cost line does: below 1× the
round account's term that lost (`speedup.loss_reason`), and nothing at 1× or more."""

from __future__ import annotations

from specplay.cli.render import summary
from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.store import LaneRecord
from tests.support.engine_runs import run
from tests.support.prompts import PROSE_PROMPT
from tests.support.scripted import Cost, ScriptedBackend, ScriptedModel, scripted_backend, seeded


def _records(
    backend: ScriptedBackend, route: str, then: tuple[int, str] | None = None
) -> tuple[LaneRecord, LaneRecord]:
    """The speculative run and its target-only baseline, as `specplay run --save` collects them;
    `then`: after that many rounds the route changes live to the one named."""
    records = []
    for mode in ("speculative", "target"):
        record, rounds = LaneRecord(mode), [0]

        def change(event: Event, controls: LiveControls, rounds: list[int] = rounds) -> None:
            rounds[0] += isinstance(event, RoundEvent)
            if then is not None and isinstance(event, RoundEvent) and rounds[0] == then[0]:
                controls.update(route=then[1])

        for event in run(backend, PROSE_PROMPT, mode=mode, route=route, k=4, max_tokens=40, on_event=change):
            record.add(event)
        records.append(record)
    return records[0], records[1]


def test_a_dear_drafter_that_loses_is_named_in_the_summary() -> None:
    target = ScriptedModel("target", seeded(0), Cost(step_ms=10.0, row_ms=1.0))
    dear = ScriptedModel("dear", seeded(1), Cost(step_ms=8.0, row_ms=1.0))  # rarely accepted, 0.8 of a step
    main, baseline = _records(ScriptedBackend(target, [dear]), "dear")
    parts = summary(main, baseline, speed_measured=True).split(" · ")
    speedup = float(parts[-2].rsplit("speedup ", 1)[1].rstrip("x"))
    assert speedup < 1
    loss = parts[-1]
    assert loss.startswith("dear drafts cost 0.") and loss.endswith("a round costs more than the tokens it wins")
    # without a measured speed (remote servers) there is no speedup to explain
    assert "a round costs more" not in summary(main, baseline, speed_measured=False)


def test_a_route_changed_to_none_mid_run_leaves_the_loss_with_the_drafter_that_drafted() -> None:
    target = ScriptedModel("target", seeded(0), Cost(step_ms=10.0, row_ms=1.0))
    dear = ScriptedModel("dear", seeded(1), Cost(step_ms=8.0, row_ms=1.0))
    main, baseline = _records(ScriptedBackend(target, [dear]), "dear", then=(5, "none"))
    assert main.rounds[-1].drafter == "none"
    loss = summary(main, baseline, speed_measured=True).split(" · ")[-1]
    assert loss.startswith("dear drafts cost 0.") and loss.endswith("a round costs more than the tokens it wins")


def test_a_drafter_that_pays_gets_no_loss_sentence() -> None:
    main, baseline = _records(scripted_backend(), "near")
    parts = summary(main, baseline, speed_measured=True).split(" · ")
    assert "speedup" in parts[-1] and float(parts[-1].rsplit("speedup ", 1)[1].rstrip("x")) > 1


def test_no_speculation_says_so_rather_than_a_k() -> None:
    main, baseline = _records(scripted_backend(), "none")
    parts = summary(main, baseline, speed_measured=True).split(" · ")
    assert parts[:3] == ["speculative", "route none", "no speculation"]
    assert not any(part.startswith("k ") for part in parts)
