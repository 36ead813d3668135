"""Text from outside (prompts, paths, files, servers, models) is never terminal control or markup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplay.backends.vllm.errors import VllmError
from specplay.cli import main
from specplay.display.text import one_line, token_repr, visible
from specplay.errors import ConfigError, error_line
from specplay.ui.protocols import RunState
from tests.support.session_events import same_as_rounds, speculative_events, target_events, write_session
from tests.support.tiny_models import TinyModels

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x9b31m\x08"
HOSTILE = f"x [/bold] y [red]z[/red] {ESCAPES} \u202eevil\u202c end"


def _clean(text: str) -> bool:
    return not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 for c in text)


def test_visible_and_one_line_keep_text_and_drop_control() -> None:
    assert visible("a\tb\nc") == "a\tb\nc" and visible("é 漢字 😀") == "é 漢字 😀"
    assert _clean(visible(ESCAPES)) and "\u202e" not in visible(HOSTILE)
    assert one_line("first\nsecond\u2028third") == "first second third"
    assert error_line(VllmError(f"server said {ESCAPES}\nand more")).count("\n") == 0
    assert _clean(error_line(ConfigError("prompt_file", f"'{ESCAPES}' does not exist")))


def test_a_token_standing_alone_reads_apart_from_its_neighbours() -> None:
    # a quote, a comma and a token with no text of its own were '','' in a row of candidates
    assert [token_repr(t) for t in ("'", ",", "", " the")] == ["‹'›", "‹,›", "‹∅›", "‹ the›"]
    assert token_repr("a\nb\x1b") == "‹a⏎b␛›" and token_repr("x" * 20, limit=5) == "‹xxxx…›"


def test_sessions_listing_shows_hostile_prompts_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the table on one line a row
    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    write_session(tmp_path, lanes, prompt=HOSTILE)
    (tmp_path / "broken [red].jsonl").write_text("{not json\n{}\n")
    assert main(["sessions", "--sessions-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert _clean(out) and "[/bold]" in out and "[red]z[/red]" in out and "broken [red]" in out
    assert main(["sessions", "--sessions-dir", str(tmp_path), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert HOSTILE in [row.get("prompt") for row in rows]  # JSON keeps the data exactly


def test_paths_and_prompts_with_markup_run_save_and_list(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "[/x] [bold]sessions"
    args = ["run", "--target", str(tiny.target), "--mode", "target", "--prompt", HOSTILE, "--raw"]
    assert main([*args, "--max-tokens", "3", "--save", "--sessions-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert _clean(out) and f"saved {folder}" in out
    assert main(["sessions", "--sessions-dir", str(folder)]) == 0
    assert _clean(capsys.readouterr().out)
    (saved,) = folder.glob("*.jsonl")
    assert main(["export", str(saved), "--format", "md"]) == 0
    assert ESCAPES not in capsys.readouterr().out


async def test_the_playground_shows_a_hostile_prompt_as_text_and_reruns_it_exactly(
    tiny: TinyModels, tmp_path: Path
) -> None:
    from textual.widgets import TextArea

    from specplay.store import load_session
    from tests.support.ui_helpers import make_app, wait_for

    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    saved = write_session(tmp_path, lanes, prompt=HOSTILE)
    app = make_app(tiny, tmp_path, raw=True, max_tokens=4, open_session=saved)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.playground.state == RunState.READY, "models to load")
        shown = app.query_one("#prompt", TextArea).text
        assert _clean(shown) and "[/bold]" in shown
        app.action_rerun_session()
        await wait_for(pilot, lambda: app.playground.last_session is not None, "the re-run")
        assert app.playground.last_session is not None
        assert load_session(app.playground.last_session).prompt == HOSTILE  # what ran is what was saved
