"""Review pages and transcripts of conversations: each turn's prompt, then its answers side by side
lined up against that turn's target-only answer, per-turn numbers and the whole conversation's."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rapidfuzz.distance import Levenshtein

from specplay.cli import main
from specplay.engine.events import Token
from specplay.review import export_sessions, review_sessions
from specplay.review.conversation import conversation_tokens_per_s
from specplay.review.markdown import md_column_text, md_fence
from specplay.store import Session, load_session
from specplay.store.diff import token_diff
from tests.support.conversations import FIXTURE_PROMPTS, fixture_config, record_conversation
from tests.support.session_events import ROUNDS, same_as_rounds, speculative_events, target_events, write_session

SAVED = Path(__file__).resolve().parents[1] / "data" / "saved_sessions" / "conversation-sampled-mentored.jsonl"
"""Three turns, T 0.8, mentored D 0.4 (tests/data/saved_sessions/README.md)."""


@pytest.fixture
def saved() -> Session:
    return load_session(SAVED)


@pytest.fixture(scope="module")
def lossless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The saved conversation's prompts, models and seed again at TV budget 0, speculative lane only."""
    import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core, as the CLI does)
    from specplay.backends import open_stream

    config = fixture_config(tmp_path_factory.mktemp("lossless"), tv_budget=0.0)
    source = open_stream(config)
    try:
        yield record_conversation(source, config, FIXTURE_PROMPTS, lanes=("speculative",))
    finally:
        source.close()


def _texts(page: str, cls: str) -> list[str]:
    """The text of each <pre class=`cls`>, as a browser reads it (a line break just after <pre> is dropped)."""
    found = re.findall(rf'<pre class="{cls}">(.*?)</pre>', page, re.S)
    return [html.unescape(m.removeprefix("\n")) for m in found]


def _tokens(page: str, column: str) -> int:
    cells = re.findall(rf'<div class="cell" data-col="{column}" dir="auto">(.*?)</div>', page, re.S)
    return sum(len(re.findall(r'<span class="t [^"]*" data-i="\d+"', cell)) for cell in cells)


def test_a_conversation_page_shows_every_turn(saved: Session) -> None:
    page = export_sessions([saved], "html")
    # no one prompt at the top: each turn's prompt, in order, opens that turn
    assert "<h2>Prompt</h2>" not in page
    assert _texts(page, "prompt") == list(FIXTURE_PROMPTS)
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[:4] == ["The whole conversation: 3 turns", "Turn 1 of 3", "Turn 2 of 3", "Turn 3 of 3"]
    for turn in saved.turns:
        section = page.split(f"<h2>Turn {turn.index + 1} of 3</h2>")[1].split("<h2>")[0]
        assert section.index('<pre class="prompt">') < section.index("<h3>Texts</h3>")
        # the target-only answer first, then the speculative one, each with every one of its tokens
        heads = re.findall(r'<div class="head" data-col="(t\d+c\d+)">([^<]*)', section)
        assert heads == [(f"t{turn.index}c0", "target-only"), (f"t{turn.index}c1", "speculative")]
        assert turn.baseline is not None
        assert _tokens(section, f"t{turn.index}c0") == len(turn.baseline.tokens)
        assert _tokens(section, f"t{turn.index}c1") == len(turn.main.tokens)
        for source in set(turn.main.sources):
            assert f'<span class="t {source}' in section
        # the turn's own numbers: its speculative lane against its own target-only lane
        expected = token_diff(turn.main.token_ids, turn.baseline.token_ids)
        row = re.search(r"<tr><td>speculative</td>(.*?)</tr>", section)
        assert row is not None
        cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
        assert cells[0] == str(len(turn.main.tokens)) and cells[-2] == f"{expected.similarity:.3f}"
        assert cells[-1] == f"token {expected.first_divergence}"
        assert f"Draft tape of speculative: {len(turn.main.rounds)} rounds" in section


def test_the_whole_conversations_numbers(saved: Session) -> None:
    review = review_sessions([saved])
    (table,) = review.tables
    assert table.title == "The whole conversation: 3 turns"
    target_row, speculative_row = table.rows
    mains = [t.main for t in saved.turns]
    baselines = [t.baseline for t in saved.turns if t.baseline is not None]
    accepted = sum(m.metrics["num_accepted_draft_tokens"] for m in mains)
    drafted = sum(m.metrics["num_draft_tokens"] for m in mains)
    rounds = sum(m.metrics["num_spec_steps"] for m in mains)
    speed = conversation_tokens_per_s(mains)
    own = conversation_tokens_per_s(baselines)
    assert speed is not None and own is not None
    joined = [t for m in mains for t in m.token_ids]
    reference = [t for b in baselines for t in b.token_ids]
    assert speculative_row == [
        "speculative",
        "48",
        f"{accepted / drafted:.2f}",
        f"{1 + accepted / rounds:.2f}",
        f"{speed:.1f}",
        f"{speed / own:.2f}x",
        "-",
        f"{sum(m.metrics['tv_spent'] for m in mains):.3f}",
        f"{Levenshtein.normalized_similarity(joined, reference):.3f}",
        "turn 1, token 1",
    ]
    assert target_row[:2] == ["target-only", "48"] and target_row[-2:] == ["1.000", "-"]
    # the tokens/s of a conversation: each turn's tokens at its own rate
    seconds = sum(len(m.tokens) / m.metrics["tokens_per_s"] for m in mains)
    assert speed == pytest.approx(48 / seconds)
    # sampled and parted in turn 1: the reader is told later turns were asked after other answers
    assert any("Each lane continues its own conversation" in note for note in review.notes)


def test_a_conversation_transcript_shows_every_turn(saved: Session) -> None:
    md = export_sessions([saved], "md")
    assert "## Prompt" not in md
    at = md.index("## The whole conversation: 3 turns")
    for turn in saved.turns:
        heading = md.index(f"## Turn {turn.index + 1} of 3\n\n{md_fence(turn.prompt)}")
        assert heading > at
        at = heading
    review = review_sessions([saved])
    for group, turn in zip(review.groups, saved.turns, strict=True):
        section = md.split(f"## Turn {turn.index + 1} of 3")[1].split("\n## ")[0]
        reference, speculative = group.columns
        assert reference.lane is turn.baseline and speculative.lane is turn.main
        # both answers, each with its sources marked, the target-only one first
        assert section.index(f"### target-only\n\n{md_column_text(reference)}") < section.index(
            f"### speculative\n\nFirst divergence at token {speculative.divergence.diff.first_divergence}.\n\n"  # type: ignore[union-attr]
            f"{md_column_text(speculative)}"
        )
        assert "| speculative | 16 |" in section and "### Metrics" in section


def test_a_single_prompt_session_is_one_turn_as_before(tmp_path: Path) -> None:
    lanes = {"speculative": speculative_events(), "target": target_events(same_as_rounds())}
    review = review_sessions([load_session(write_session(tmp_path, lanes))])
    assert not review.conversation and not review.tables and [c.key for c in review.groups[0].columns] == ["c0", "c1"]
    page = export_sessions([load_session(write_session(tmp_path, lanes))], "html")
    assert "<h2>Prompt</h2>" in page and "Turn 1" not in page


def test_conversations_of_one_conversation_line_up_turn_by_turn(saved: Session, lossless: Path) -> None:
    """A sweep of conversations: per turn, the first target-only answer and each run's answer."""
    other = load_session(lossless)
    review = review_sessions([saved, other])
    assert [g.title for g in review.groups] == ["Turn 1 of 3", "Turn 2 of 3", "Turn 3 of 3"]
    for group, mine, theirs in zip(review.groups, saved.turns, other.turns, strict=True):
        assert [c.lane for c in group.columns] == [mine.baseline, mine.main, theirs.main]
        assert group.columns[0].title == f"target-only ({saved.id})"
        assert [c.title for c in group.columns[1:]] == ["D 0.4", "D 0"]
    rows = review.tables[0].rows
    assert [row[0] for row in rows] == [f"target-only ({saved.id})", "D 0.4", "D 0"]
    assert [row[1] for row in rows] == ["48", "48", "48"]
    page = export_sessions([saved, other], "html")
    assert _texts(page, "prompt") == list(FIXTURE_PROMPTS)


def test_runs_of_different_conversations_are_refused_in_one_line(
    saved: Session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def turn() -> dict:
        return {"speculative": speculative_events([[Token(1, "x", "accepted"), *ROUNDS[0][2:]]])}

    path = write_session(tmp_path, turn(), prompt=FIXTURE_PROMPTS[0], later_turns=[("something else", turn())])
    assert main(["export", str(SAVED), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "asked turn 2 differently" in err and "specplay diff" in err
    # a conversation that stops early lines up where it has turns, and the page says how many it holds
    short = write_session(tmp_path, turn(), prompt=FIXTURE_PROMPTS[0])
    review = review_sessions([saved, load_session(short)])
    assert [len(g.columns) for g in review.groups] == [3, 2, 2]
    assert f"Session {load_session(short).id} holds 1 of the 3 turns." in review.notes


def test_a_conversation_cut_short_in_its_last_turn(tmp_path: Path) -> None:
    """Killed while the speculative lane answered turn 3: every turn still shows, the last as far as it went."""
    lines = SAVED.read_text(encoding="utf-8").splitlines()
    done = [i for i, line in enumerate(lines) if '"lane": "speculative", "kind": "done"' in line][2]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:done]) + "\n", encoding="utf-8")
    session = load_session(cut)
    review = review_sessions([session])
    assert [g.title for g in review.groups] == ["Turn 1 of 3", "Turn 2 of 3", "Turn 3 of 3"]
    last = review.groups[2]
    assert [c.title for c in last.columns] == ["target-only (incomplete)", "speculative (incomplete)"]
    assert [len(c.lane.tokens) for c in last.columns] == [0, len(session.turns[2].main.tokens)]
    target_row, speculative_row = review.tables[0].rows
    assert target_row[1] == "32" and speculative_row[1] == str(32 + len(session.turns[2].main.tokens))
    # acceptance over the turns that finished: the cut turn has no metrics
    finished = [t.main for t in session.turns[:2]]
    accepted = sum(m.metrics["num_accepted_draft_tokens"] for m in finished)
    assert speculative_row[2] == f"{accepted / sum(m.metrics['num_draft_tokens'] for m in finished):.2f}"
    md = export_sessions([session], "md")
    assert md.startswith(f"# specplay session {session.id}\n\n**Incomplete session") and "## Turn 3 of 3" in md
    assert _texts(export_sessions([session], "html"), "prompt") == list(FIXTURE_PROMPTS)
