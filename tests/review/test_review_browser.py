"""Review pages in a real browser: headless Chromium driven by Selenium, pages made from real
sessions of the tiny models (and, for hostile content, from hand-made events).

The browser has no network: its resolver maps every host to nothing, and the page's own policy
forbids fetching. Screenshots, one per theme, are kept in .test-artifacts/ (or
$SPECPLAY_TEST_ARTIFACTS) for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from specplay.cli import main
from specplay.engine.events import Token
from specplay.store import Session, load_session
from specplay.store.diff import token_diff
from tests.support.prompts import PROSE_PROMPT
from tests.support.session_events import SCRIPT, speculative_events, target_events, write_session
from tests.support.tiny_models import TinyModels

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SAVED = Path(__file__).resolve().parents[1] / "data" / "saved_sessions"
PLAYGROUND_SESSION = SAVED / "playground-live-change.jsonl"
"""The playground's own session: T 0.7, D 0 then 0.5 and T 1.0 changed while it ran; it parts
from the target-only text at token 1."""
ARTIFACTS = Path(os.environ.get("SPECPLAY_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".test-artifacts"))

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Chromium and its driver: apt-get install chromium chromium-driver (.ci/run installs them)",
)


def _driver(scripts: bool = True):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        "--window-size=1400,1100",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: every name resolves to nothing
    ):
        options.add_argument(flag)
    if not scripts:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


@pytest.fixture(scope="module")
def browser() -> Iterator:  # type: ignore[type-arg]
    driver = _driver()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def sweep(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three real sessions of one prompt and seed: TV budget 0, 0.5 and 1 at temperature 1."""
    directory = tmp_path_factory.mktemp("review-sessions")
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}", "--prompt", PROSE_PROMPT, "--raw"]
    paths = []
    for tv in ("0", "0.5", "1"):
        before = set(directory.glob("*.jsonl"))
        args = ["--temperature", "1", "--tv", tv, "--seed", "3", "--max-tokens", "48", "--k", "4"]
        assert main(["run", *models, *args, "--save", "--sessions-dir", str(directory), "--json"]) == 0
        (path,) = set(directory.glob("*.jsonl")) - before
        paths.append(path)
    return paths


def _export(paths: list[Path], out: Path) -> Path:
    assert main(["export", *map(str, paths), "-o", str(out)]) == 0
    return out


def _tokens(browser, column: str) -> list:  # type: ignore[no-untyped-def]
    return browser.find_elements("css selector", f'.cell[data-col="{column}"] .t')


def _diff_json(a: Path, b: Path | None, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    main(["diff", str(a), *([str(b)] if b is not None else []), "--json"])
    return json.loads(capsys.readouterr().out)


def _changed(diff: dict) -> set[int]:
    return {
        i for op in diff["opcodes"] if op["tag"] in ("replace", "delete") for i in range(op["a_start"], op["a_end"])
    }


def test_one_session_page(
    browser,
    sweep: list[Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.wait import WebDriverWait

    path = sweep[1]  # D = 0.5: accepted, budget, corrected and bonus tokens, and a divergence
    session = load_session(path)
    page = _export([path], tmp_path / "one.html")
    browser.get(page.as_uri())
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0

    # c0 is the target-only text, c1 the speculative lane: the DOM holds every token, by source
    baseline, main_lane = session.baseline, session.main
    assert baseline is not None
    for column, lane in (("c0", baseline), ("c1", main_lane)):
        tokens = _tokens(browser, column)
        assert [int(t.get_attribute("data-i")) for t in tokens] == list(range(len(lane.tokens)))
        by_source = Counter(
            next(c for c in t.get_attribute("class").split() if c not in ("t", "dv", "first")) for t in tokens
        )
        assert by_source == Counter(lane.sources) == Counter(lane.metrics["num_tokens_by_source"])

    # the marks sit where `specplay diff` puts the differences
    diff = _diff_json(path, None, capsys)
    marked = {
        int(t.get_attribute("data-i")) for t in browser.find_elements("css selector", '.cell[data-col="c1"] .t.dv')
    }
    assert marked == _changed(diff) and marked  # a budget of 0.5 at temperature 1 leaves the target's text
    first = browser.find_element("css selector", '.cell[data-col="c1"] .first')
    assert int(first.get_attribute("data-i") or first.get_attribute("data-at")) == diff["first_divergence"]

    # hovering a token shows its p_target; clicking pins the details; arrows walk the column
    round_ = main_lane.rounds[0]
    token = _tokens(browser, "c1")[0]
    heading = browser.find_element("css selector", "h1")

    def hover_text(driver) -> str | bool:  # type: ignore[no-untyped-def]
        # On a loaded machine Chromium sometimes leaves :hover on the token's parent though its mousemove
        # reached the token; a pointer that leaves and comes back is hovered again, as a person's would be.
        ActionChains(driver).move_to_element(heading).move_to_element(token).perform()
        content = driver.execute_script("return getComputedStyle(arguments[0], '::after').content", token)
        return content if content != "none" else False

    shown = WebDriverWait(browser, 10).until(hover_text)
    assert f"p_target(x) {round_.positions[0].p_target:.3f}" in shown
    assert f"round 0 · route near · k {round_.nodes}" in shown
    token.click()
    pinned = browser.find_element("css selector", "#pinned")
    assert pinned.is_displayed() and f"p_target(x) {round_.positions[0].p_target:.3f}" in pinned.text
    token.send_keys(Keys.ARROW_RIGHT)
    assert browser.switch_to.active_element.get_attribute("data-i") == "1"
    token.send_keys(Keys.ESCAPE)
    assert not pinned.is_displayed()

    # the draft tape shows every round, rejected drafts struck through, by their text
    rejected = [p.token_id for r in main_lane.rounds for p in r.positions if p.outcome == "rejected"]
    tape = browser.find_elements("css selector", ".tape tr")
    assert len(tape) == len(main_lane.rounds) + 1
    struck = browser.find_elements("css selector", ".tape .d.rejected")
    # (a run may reject nothing: then nothing is struck, which the count checks)
    assert len(struck) == len(rejected) and all("⟨" not in s.get_attribute("textContent") for s in struck)

    # one screenshot per theme; the token colours follow the theme switch
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    colours = set()
    for label in browser.find_elements("css selector", ".switch label"):
        label.click()
        name = label.text
        accepted = browser.find_element("css selector", ".cell .t.accepted")
        colours.add(accepted.value_of_css_property("color"))
        assert browser.save_screenshot(str(ARTIFACTS / f"review-{name}.png"))
    assert len(colours) == 3


def test_the_texts_start_on_the_first_screen(browser, sweep: list[Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """At 1400x1000 a reader meets the texts without scrolling: the prompt, the summary and the
    first rows above the fold, what ran them below."""
    page = _export(sweep[:1], tmp_path / "one.html")
    browser.set_window_size(1400, 1000)
    try:
        browser.get(page.as_uri())
        fold = browser.execute_script("return window.innerHeight")
        first_cell = browser.execute_script("return document.querySelector('.grid .cell').getBoundingClientRect().top")
        assert first_cell < fold - 60, (first_cell, fold)  # a row's worth of text shows, at least
    finally:
        browser.set_window_size(1400, 1100)


def test_a_sweep_page_has_a_column_per_session(browser, sweep: list[Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = _export(sweep, tmp_path / "sweep.html")
    browser.get(page.as_uri())
    heads = browser.find_elements("css selector", ".grid .head")
    assert [h.get_attribute("data-col") for h in heads] == ["c0", "c1", "c2", "c3"]
    assert "target-only" in heads[0].text and [h.text.splitlines()[0] for h in heads[1:]] == ["D 0", "D 0.5", "D 1"]
    reference = sweep[0]  # the first session's target-only lane is every column's reference
    for i, path in enumerate(sweep, start=1):
        session: Session = load_session(path)
        tokens = _tokens(browser, f"c{i}")
        assert len(tokens) == len(session.main.tokens)
        # `specplay diff` compares main lanes; here each is read against the first one's baseline
        expected = token_diff(session.main.token_ids, load_session(reference).baseline.token_ids)  # type: ignore[union-attr]
        marked = {int(t.get_attribute("data-i")) for t in tokens if "dv" in t.get_attribute("class").split()}
        changed = {i for op in expected.opcodes if op.tag in ("replace", "delete") for i in range(op.a_start, op.a_end)}
        assert marked == changed
    # rows line the texts up: every column has as many cells as the reference has rows
    cells = Counter(c.get_attribute("data-col") for c in browser.find_elements("css selector", ".grid .cell"))
    assert len(set(cells.values())) == 1 and cells["c0"] >= 1
    assert len(browser.find_elements("css selector", "svg")) == 2  # acceptance by position, tokens/s


# The tallest empty stretch between one line of a column's tokens and the next, in token heights,
# leaving out breaks the text itself makes (around a token holding a newline).
_LARGEST_GAP = """
let previous = null, largest = 0;
for (const token of arguments[0].querySelectorAll('.t')) {
  const box = token.getBoundingClientRect();
  if (box.height === 0) continue;
  const own = token.textContent.includes('\\n') || (previous && previous.text.includes('\\n'));
  if (previous && box.top > previous.box.bottom && !own) {
    largest = Math.max(largest, (box.top - previous.box.bottom) / box.height);
  }
  previous = {box, text: token.textContent};
}
return largest;
"""


def _largest_gap(browser, column) -> float:  # type: ignore[no-untyped-def]
    return float(browser.execute_script(_LARGEST_GAP, column))


def test_an_early_parting_sampled_run_reads_as_prose(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    session = load_session(PLAYGROUND_SESSION)
    baseline, main_lane = session.baseline, session.main
    assert baseline is not None and token_diff(main_lane.token_ids, baseline.token_ids).first_divergence == 1
    page = _export([PLAYGROUND_SESSION], tmp_path / "prose.html")
    browser.get(page.as_uri())
    assert browser.find_element("css selector", "#view-prose").is_selected()

    # each column is one text: its tokens in order, and read as prose, line after line with no blank
    # rows (aligned to the target-only rows the same columns have them: the check can tell)
    gaps = {}
    for key, lane in (("c0", baseline), ("c1", main_lane)):
        column = browser.find_element("css selector", f'.col[data-col="{key}"]')
        tokens = column.find_elements("css selector", ".t")
        assert [int(t.get_attribute("data-i")) for t in tokens] == list(range(len(lane.tokens)))
        # the text whole: a line's indentation that a token carried after its line break opens
        # the next row (.indent), where the reader sees it
        pieces = column.find_elements("css selector", ".t, .indent")
        assert "".join(p.get_attribute("textContent") for p in pieces) == "".join(lane.texts)
        assert _largest_gap(browser, column) < 0.6
    browser.find_element("css selector", "label[for='view-aligned']").click()
    for key in ("c0", "c1"):
        gaps[key] = _largest_gap(browser, browser.find_element("css selector", f'.col[data-col="{key}"]'))
    assert max(gaps.values()) >= 1, gaps  # aligned rows leave blank lines in one text or the other
    # aligned, each row's cells start at one height across the columns
    for r, (a, b) in enumerate(
        zip(
            browser.find_elements("css selector", '.col[data-col="c0"] .cell'),
            browser.find_elements("css selector", '.col[data-col="c1"] .cell'),
            strict=True,
        )
    ):
        assert a.rect["y"] == b.rect["y"], r
    browser.find_element("css selector", "label[for='view-prose']").click()

    # live changes are marked inline, just before the token they took effect from
    for key, lane in (("c0", baseline), ("c1", main_lane)):
        marks = browser.find_elements("css selector", f'.col[data-col="{key}"] .change')
        assert [int(m.get_attribute("data-at")) for m in marks] == [c.token_index for c in lane.changes]
        for mark, change in zip(marks, lane.changes, strict=True):
            following = browser.execute_script("return arguments[0].nextElementSibling", mark)
            assert int(following.get_attribute("data-i")) == change.token_index and mark.is_displayed()
            name, old, new = change.changes[0]
            assert mark.text == f"⟨{name}={new:g}⟩" and f"{name} {old:g} → {new:g}" in mark.get_attribute("title")
    # the settings say where the run started and ended; a reader is told what lossless keeps
    settings = browser.find_element("css selector", ".settings").text
    assert "tv_budget 0 → 0.5" in settings and "temperature 0.7 → 1" in settings
    assert "keeps the target's distribution, not its text" in browser.find_element("css selector", ".notes").text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "review-prose.png"))


HOSTILE = [
    Token(1, SCRIPT.replace("alert(1)", "window.__ran = 1"), "accepted"),
    Token(2, '<img src=x onerror="window.__ran = 2">', "corrected"),
    Token(3, "\x1b]0;title\x07\x1b[2J", "bonus"),
    Token(4, "שלום عربي \u202eevil", "accepted"),
    Token(5, "x" * 10_000, "accepted"),
    Token(6, "", "accepted"),  # bytes of a character still held back
    Token(7, "\ufffd", "corrected"),
]


@pytest.mark.parametrize("scripts", [True, False], ids=["scripts on", "scripts off"])
def test_a_hostile_session_runs_none_of_its_script(tmp_path: Path, scripts: bool) -> None:
    lanes = {"speculative": speculative_events([HOSTILE]), "target": target_events([(9, "<b>bold?</b>")])}
    path = write_session(tmp_path, lanes, prompt=SCRIPT.replace("alert(1)", "window.__ran = 3") + "\x1b[2J")
    page = _export([path], tmp_path / "hostile.html")
    driver = _driver(scripts=scripts)
    try:
        driver.get(page.as_uri())
        tokens = _tokens(driver, "c1")
        assert len(tokens) == len(HOSTILE)  # the page is intact: every token in its place
        assert [t.get_attribute("textContent") for t in tokens[:2]] == [HOSTILE[0].text, HOSTILE[1].text]
        assert tokens[2].get_attribute("textContent") == "␛]0;title␇␛[2J"
        assert "\\u202e" in tokens[3].get_attribute("textContent")
        assert len(tokens[4].get_attribute("textContent")) == 10_000
        assert not driver.find_elements("css selector", ".cell img, .cell b, .prompt script")
        assert re.search(r"window\.__ran = 3\s*</script>", driver.find_element("css selector", ".prompt").text)
        if scripts:
            assert driver.execute_script("return window.__ran") is None
            assert driver.execute_script("return document.scripts.length") == 1  # the page's own
    finally:
        driver.quit()


CONVERSATION_SESSION = SAVED / "conversation-sampled-mentored.jsonl"
"""Three turns, sampled: each turn's prompt and both lanes' answers (tests/data/saved_sessions/README.md)."""


def test_a_conversation_page_shows_each_turn_and_its_script_works(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.keys import Keys

    session = load_session(CONVERSATION_SESSION)
    page = _export([CONVERSATION_SESSION], tmp_path / "conversation.html")
    browser.get(page.as_uri())
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    headings = [h.text for h in browser.find_elements("css selector", "h2")]
    assert headings[:4] == ["The whole conversation: 3 turns", "Turn 1 of 3", "Turn 2 of 3", "Turn 3 of 3"]
    # each turn's prompt, shown as typed (line breaks kept), before its answers
    prompts = browser.find_elements("css selector", "pre.prompt")
    assert [p.get_attribute("textContent") for p in prompts] == [t.prompt for t in session.turns]
    for turn, prompt in zip(session.turns, prompts, strict=True):
        assert prompt.is_displayed()
        assert turn.baseline is not None
        for column, lane in ((f"t{turn.index}c0", turn.baseline), (f"t{turn.index}c1", turn.main)):
            tokens = _tokens(browser, column)
            assert [int(t.get_attribute("data-i")) for t in tokens] == list(range(len(lane.tokens)))
            by_source = Counter(
                next(c for c in t.get_attribute("class").split() if c not in ("t", "dv", "first")) for t in tokens
            )
            assert by_source == Counter(lane.sources)
        # below its prompt on the page, the turn's texts
        first_token = _tokens(browser, f"t{turn.index}c1")[0]
        assert first_token.rect["y"] > prompt.rect["y"]

    # the script: a click in turn 2 pins that token's details; arrows walk turn 2's column only
    second = session.turns[1].main
    tokens = _tokens(browser, "t1c1")
    last = tokens[-1]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", last)
    last.click()
    pinned = browser.find_element("css selector", "#pinned")
    assert pinned.is_displayed() and f"token {len(second.tokens) - 1} · id {second.token_ids[-1]}" in pinned.text
    last.send_keys(Keys.ARROW_RIGHT)  # the end of turn 2's column: no step into turn 3
    assert browser.switch_to.active_element.get_attribute("data-i") == str(len(second.tokens) - 1)
    last.send_keys(Keys.ARROW_LEFT)
    active = browser.switch_to.active_element
    assert active.get_attribute("data-i") == str(len(second.tokens) - 2)
    assert active.find_element("xpath", "./ancestor::div[@class='cell']").get_attribute("data-col") == "t1c1"
    assert f"token {len(second.tokens) - 2} ·" in pinned.text
    active.send_keys(Keys.ESCAPE)
    assert not pinned.is_displayed()
    # the view switch acts on every turn's texts
    browser.find_element("css selector", "label[for='view-aligned']").click()
    assert browser.find_element("css selector", "#view-aligned").is_selected()
    assert {g.value_of_css_property("display") for g in browser.find_elements("css selector", ".grid")} == {"grid"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "review-conversation.png"))
