"""`specplay export`: Markdown, HTML and JSONL from a session written from hand-made engine events."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specplay import __version__
from specplay.cli import main
from specplay.engine.events import (
    ControlEvent,
    Token,
)
from specplay.review import export_sessions
from specplay.review.markdown import md_escape, md_fence
from specplay.store import Session, load_session
from tests.support.session_events import IMG, SCRIPT, same_as_rounds, speculative_events, target_events, write_session


def to_markdown(session: Session) -> str:
    return export_sessions([session], "md")


def to_html(session: Session) -> str:
    return export_sessions([session], "html")


def to_jsonl(session: Session) -> str:
    return export_sessions([session], "jsonl")


@pytest.fixture
def session_path(tmp_path: Path) -> Path:
    change = ControlEvent(3, (("k", 4, 2),))
    lanes = {"speculative": speculative_events(changes=[change]), "target": target_events(same_as_rounds())}
    return write_session(tmp_path, lanes)


# --- Markdown ------------------------------------------------------------------------------


def test_markdown_transcript(session_path: Path) -> None:
    session = load_session(session_path)
    md = to_markdown(session)
    assert md.startswith("# specplay session ")
    assert f"by specplay {__version__}, backend mlx on cpu." in md
    assert "```\ndef fib(n):\n```" in md
    # the summary first: acceptance, speedups, TV, similarity; then models, settings, the texts
    summary = md.index("## Summary")
    assert summary < md.index("## Models and settings") < md.index("## Texts") < md.index("### Metrics")
    # 5 tokens: 4 / 1 s speculative against 4 / 2 s target-only; 3 of 4 drafts accepted in 2 rounds
    assert "| speculative | 5 | 0.75 | 2.50 | 4.0 | 2.00x |" in md
    assert "| target | models/target | abababababab |" in md
    assert "| `tv_budget` | 0 |" in md and "| `temperature` | 0 |" in md
    # the target-only text first; accepted plain, bonus italic, budget underlined, corrected bold
    assert md.index("### target-only\n\ndef fib\\(n\\):") < md.index("### speculative")
    # the live change marked where it took effect, and the setting shown from start to end
    text = "def fib<i>\\(</i><kbd>⟨k=2⟩</kbd><ins>n</ins><b>\\):</b>"
    assert f"### speculative\n\nSame tokens as the target-only text.\n\n{text}" in md
    assert "- control change: token 3: k 4 → 2" in md and "| `k` | 4 → 2 |" in md
    for name in ("mean_acceptance_length", "draft_acceptance_rate", "num_spec_steps", "tokens_per_s"):
        assert f"| `{name}` |" in md
    assert "| `num_spec_steps` | - | 2 |" in md and "| `tokens_per_s` | 2.000 | 4.000 |" in md
    assert "Incomplete" not in md


def test_markdown_marks_where_a_lane_leaves_the_target_only_text(tmp_path: Path) -> None:
    rounds = [[Token(10, "def", "accepted"), Token(11, " fob", "corrected")], [Token(14, "):", "bonus")]]
    target = [(10, "def"), (11, " fib"), (12, "(n"), (14, "):")]
    lanes = {"speculative": speculative_events(rounds), "target": target_events(target)}
    md = to_markdown(load_session(write_session(tmp_path, lanes)))
    # token ids 10 11 14 against 10 11 12 14: the reference's "(n" is missing before "):"
    assert "First divergence at token 2." in md
    assert "def<b> fob</b><mark>⁁</mark><i>\\):</i>" in md
    assert "| speculative | 3 |" in md and "| token 2 |" in md


def test_markdown_escapes_model_output(tmp_path: Path) -> None:
    hostile = [
        Token(1, SCRIPT, "accepted"),
        Token(2, "**not bold** [link](http://x) `code`", "corrected"),
        Token(3, "\n# not a heading\n    not code\n1. not a list", "bonus"),
    ]
    path = write_session(tmp_path, {"speculative": speculative_events([hostile])}, source=IMG)
    md = to_markdown(load_session(path))
    assert not re.search(r"(?<!\\)<(script|img)", md)  # every < from the session is backslash-escaped
    assert "\\<script\\>alert\\(1\\)\\</script\\>" in md
    assert "\\*\\*not bold\\*\\* \\[link\\]\\(http://x\\) \\`code\\`" in md
    assert "\\\n\\# not a heading\\\n&nbsp;&nbsp;&nbsp;&nbsp;not code\\\n1\\. not a list" in md
    assert '"\\>\\<img src=x onerror=alert(1)\\>' in md


def test_markdown_renders_model_output_literally(tmp_path: Path) -> None:
    # markdown-it-py comes with rich; with raw HTML on, as GitHub and most viewers allow it.
    from markdown_it import MarkdownIt

    hostile = [Token(1, SCRIPT + IMG, "accepted"), Token(2, "*a* _b_\n# c\n    d\n1. e\n---\n", "corrected")]
    lanes = {"speculative": speculative_events([hostile]), "target": target_events([(3, "`x` | y")])}
    md = to_markdown(load_session(write_session(tmp_path, lanes, prompt="```\n" + SCRIPT, source=IMG)))
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<script" not in rendered and "<img" not in rendered
    assert "<mark>&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;<b>" in rendered
    assert "<b>*a* _b_<br />\n# c<br />\n\xa0\xa0\xa0\xa0d<br />\n1. e<br />\n---<br />\n</b></mark>" in rendered
    assert "<p>`x` | y</p>" in rendered
    assert rendered.count("<h1>") == 1 and "<li>" not in rendered and "<hr" not in rendered


def test_markdown_escape_keeps_lines_and_leading_blanks() -> None:
    assert md_escape("a\n  b") == ("a\\\n&nbsp;&nbsp;b", False)
    assert md_escape("x\n") == ("x\\\n", True)
    assert md_escape(" y", line_start=True)[0] == "&nbsp;y"
    assert md_escape(" y", line_start=False)[0] == " y"


def test_markdown_prompt_fence_outgrows_backticks_in_the_prompt() -> None:
    prompt = "```python\nx = 1\n``````\n"
    fenced = md_fence(prompt)
    assert fenced == "```````\n" + prompt + "```````"
    assert md_fence("plain") == "```\nplain\n```"


def test_incomplete_session_is_marked(tmp_path: Path) -> None:
    lanes = {"speculative": speculative_events(finish=None), "target": []}
    session = load_session(write_session(tmp_path, lanes, finalize=False))
    assert not session.complete
    md, page = to_markdown(session), to_html(session)
    assert "**Incomplete session" in md and "### speculative (incomplete)" in md
    assert '<p class="incomplete">Incomplete session' in page and ">speculative (incomplete)</div>" in page


# --- HTML ----------------------------------------------------------------------------------


def test_html_page(session_path: Path) -> None:
    page = to_html(load_session(session_path))
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert '<span class="t accepted" data-i="0" tabindex="0" data-tip="‹def›  accepted' in page
    assert 'data-i="4" tabindex="0" data-tip="‹):›  corrected · token 4 · id 14' in page
    # the playground's palette, from its theme files, one rule set per theme
    for name in ("specplay-dark", "specplay-light", "specplay-colorblind"):
        assert f'id="theme-{name}"' in page and f"#theme-{name}:checked ~ .page" in page
    assert "--spec-accepted: #5fbf77;" in page and "--spec-accepted: #009e73;" in page
    assert '<span class="t relaxed">relaxed</span>' in page  # the legend
    assert "Control change in speculative: token 3: k 4 → 2" in page
    assert "<td>mean_acceptance_length</td>" in page
    assert '<td>speculative</td><td class="num">5</td><td class="num">0.75</td>' in page
    assert '<figure class="chart"><figcaption>Acceptance by draft position' in page
    assert "Draft tape of speculative: 2 rounds" in page
    # self-contained: one script, ours, allowed by hash; nothing to fetch
    assert page.count("<script") == 1 and "script-src 'sha256-" in page and "default-src 'none'" in page
    assert "http://" not in page and "https://" not in page and " src=" not in page


def test_html_escapes_everything_from_the_session(tmp_path: Path) -> None:
    tokens = [Token(1, SCRIPT, "accepted"), Token(2, IMG, "corrected"), Token(3, "&amp;", "bonus")]
    lanes = {"speculative": speculative_events([tokens]), "target": target_events([(4, SCRIPT)]), SCRIPT: []}
    path = write_session(tmp_path, lanes, prompt=SCRIPT + IMG + "\x1b[2J\u202e", source=IMG)
    page = to_html(load_session(path))
    assert page.count("<script") == 1 and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert '<pre class="prompt">&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img' in page
    assert "␛[2J\\u202e</pre>" in page  # control characters and bidi overrides shown, not obeyed
    assert "&amp;amp;" in page


# --- JSONL ---------------------------------------------------------------------------------


def test_jsonl_is_the_raw_log(session_path: Path) -> None:
    session = load_session(session_path)
    text = to_jsonl(session)
    assert [json.loads(line) for line in text.splitlines()] == session.records
    assert text == session_path.read_text(encoding="utf-8")


# --- the command ---------------------------------------------------------------------------


def export(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["export", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_export_to_stdout_by_id(session_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session_id = session_path.stem
    code, out, err = export(capsys, session_id[:22], "--sessions-dir", str(session_path.parent))
    assert code == 0 and err == "" and out == to_markdown(load_session(session_path))
    code, out, _ = export(capsys, str(session_path), "--format", "jsonl")
    assert code == 0 and out == session_path.read_text(encoding="utf-8")


def test_export_to_a_file(session_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "out" / "page.html"
    page.parent.mkdir()
    code, out, _ = export(capsys, str(session_path), "-o", str(page))
    assert code == 0 and page.read_text(encoding="utf-8") == to_html(load_session(session_path))
    assert "wrote html export" in out
    forced = tmp_path / "out" / "log.md"
    assert export(capsys, str(session_path), "--format", "jsonl", "-o", str(forced))[0] == 0
    assert forced.read_text(encoding="utf-8") == session_path.read_text(encoding="utf-8")
    page.write_text("old")  # replaced whole
    assert export(capsys, str(session_path), "-o", str(page))[0] == 0
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in page.parent.iterdir()) == ["log.md", "page.html"]  # no temp file left


def test_export_errors_are_one_line(session_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text('{"type": "header", "schema_version": 1, "lanes": []}\nnot json\n{"type": "end"}\n')
    no_lanes = tmp_path / "no_lanes.jsonl"
    header = '{"type": "header", "schema_version": 1, "prompt": "x", "prompt_token_ids": [1], "lanes": []}'
    no_lanes.write_text(header + '\n{"type": "end"}\n')
    cases = [
        (["missing", "--sessions-dir", str(tmp_path)], "no session 'missing'"),
        ([str(corrupt)], "line 2 is not JSON"),
        ([str(no_lanes)], "its header names no lanes"),
        ([str(session_path), "-o", str(tmp_path / "nowhere" / "x.md")], "cannot write"),
    ]
    for args, message in cases:
        code, out, err = export(capsys, *args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("specplay: error: ") and message in err
