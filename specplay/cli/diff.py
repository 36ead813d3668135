"""`specplay diff`: two generations token by token, and whether a lossless run broke its promise;
a conversation turn by turn (diff_turns.py)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from specplay.cli.configure import given, sessions_dir_from
from specplay.cli.flags import add_sessions_dir_flag
from specplay.cli.render import colourless, make_console
from specplay.display.text import visible
from specplay.files.json_text import dump_json
from specplay.store import LaneRecord, Session, SessionError, find_session, load_session
from specplay.store.changes import skipped_changes
from specplay.store.diff import TokenDiff, is_lossless_greedy, token_diff, violation

VLLM_CAVEAT = (
    "through vLLM the two lanes' logits come from different passes (verify vs decode, or different servers), "
    "which vLLM does not promise to be bit-identical; where the top two tokens nearly tie, greedy can flip"
)
ONLY_A = "red strike"
ONLY_B = "green"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare a session with its target-only lane, or with another session, token by token "
        "(a conversation turn by turn)",
    )
    parser.add_argument("a", metavar="A", help="session path or id")
    parser.add_argument(
        "b", metavar="B", nargs="?", help="session path or id to compare with (default: A's own target-only lane)"
    )
    add_sessions_dir_flag(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object with the numbers and opcodes")
    parser.set_defaults(command=diff)


def open_session(name: str, args: argparse.Namespace) -> Session:
    """A session by path or id, in the folder the flags name."""
    return load_session(find_session(name, sessions_dir_from(given(args))))


def _lanes(args: argparse.Namespace) -> tuple[Session, LaneRecord, Session, LaneRecord]:
    a = open_session(args.a, args)
    if args.b is not None:
        b = open_session(args.b, args)
        return a, a.main, b, b.main
    if a.baseline is None:
        raise SessionError(
            f"session {a.id} has no target-only lane to compare with; save a speculative run with "
            "`specplay run --save` (without --no-baseline), or give a second session B"
        )
    return a, a.main, a, a.baseline


def diff(args: argparse.Namespace) -> int:
    a, lane_a, b, lane_b = _lanes(args)
    if len(a.turns) > 1 or len(b.turns) > 1:
        from specplay.cli.diff_turns import diff_conversation  # it draws with this module's helpers

        return diff_conversation(a, b if b is not a else None, args.json)
    result = token_diff(lane_a.token_ids, lane_b.token_ids)
    # Only a run against its own baseline promises equality: same prompt, models, seed and settings.
    checked = args.b is None and is_lossless_greedy(lane_a.settings)
    broken_at = violation(lane_a, lane_b, result) if checked else None
    if args.json:
        record = _json(a, lane_a, b, lane_b, result=result, checked=checked, broken_at=broken_at)
        print(dump_json(record, ensure_ascii=False))
    else:
        _show(a, lane_a, b, lane_b, result=result, broken_at=broken_at)
    return 1 if broken_at is not None else 0


def _side(session: Session, lane: LaneRecord) -> dict[str, Any]:
    return {"session": session.id, "lane": lane.name, "num_tokens": len(lane.token_ids), "complete": lane.complete}


def _json(
    a: Session,
    lane_a: LaneRecord,
    b: Session,
    lane_b: LaneRecord,
    result: TokenDiff,
    checked: bool,
    broken_at: int | None,
) -> dict[str, Any]:
    return {
        "a": _side(a, lane_a),
        "b": _side(b, lane_b),
        "identical": result.identical,
        **result.to_dict(),
        "lossless_greedy": checked,
        "violation": broken_at,
        "skipped_changes": skipped_changes([lane_a, lane_b]),
    }


def _span(lane: LaneRecord, start: int, end: int) -> str:
    text = visible("".join(lane.texts[start:end]))
    # A changed token whose text is empty (bytes of a character still held back) would be invisible.
    if not text and end > start:
        return "⟨" + " ".join(str(t) for t in lane.token_ids[start:end]) + "⟩"
    return text


DIFF_MARKS = (("[-", "-]"), ("{+", "+}"))
"""Without colour, what only A has and what only B has, as `git diff --word-diff` marks them."""


def render_diff(lane_a: LaneRecord, lane_b: LaneRecord, result: TokenDiff, marks: bool = False) -> Text:
    """A's text with what only A has struck out in red and what only B has in green (with `marks`,
    between [- -] and {+ +} instead)."""
    (a_open, a_close), (b_open, b_close) = DIFF_MARKS if marks else (("", ""), ("", ""))
    out = Text()
    for op in result.opcodes:
        if op.tag == "equal":
            out.append(visible("".join(lane_a.texts[op.a_start : op.a_end])))
            continue
        if op.tag in ("delete", "replace"):
            out.append(a_open + _span(lane_a, op.a_start, op.a_end) + a_close, style=ONLY_A)
        if op.tag in ("insert", "replace"):
            out.append(b_open + _span(lane_b, op.b_start, op.b_end) + b_close, style=ONLY_B)
    return out


def _label(session: Session, lane: LaneRecord, other: Session) -> str:
    return lane.name if session is other else f"{session.id} {lane.name}"


def _show(
    a: Session, lane_a: LaneRecord, b: Session, lane_b: LaneRecord, result: TokenDiff, broken_at: int | None
) -> None:
    console = make_console()
    label_a, label_b = _label(a, lane_a, b), _label(b, lane_b, a)
    legend = Text("A ").append(label_a).append(" → B ").append(label_b).append(": ")
    marks = colourless(console)
    if marks:
        legend.append("only in A [-x-]  only in B {+x+}")
    else:
        legend.append("only in A", style=ONLY_A).append(" ").append("only in B", style=ONLY_B)
    console.print(legend, style="dim")
    console.print(render_diff(lane_a, lane_b, result, marks))
    parts = [f"similarity {result.similarity:.3f}"]
    if result.identical:
        parts.append("identical")
    else:
        parts.append(f"first divergence at token {result.first_divergence}")
    parts.append(f"A {result.len_a} tokens, B {result.len_b} tokens")
    parts += [f"{name} incomplete" for name, lane in (("A", lane_a), ("B", lane_b)) if not lane.complete]
    console.print(" · ".join(parts), style="dim")
    if broken_at is not None:
        console.print(f"VIOLATION: lossless greedy run diverged at token {broken_at}", style="bold red")
        if (a.header.get("backend") or {}).get("backend") == "vllm":
            console.print(VLLM_CAVEAT, style="dim")
    for line in skipped_changes([lane_a, lane_b]):
        # A change this specplay cannot read may have made the run lossy: the check cannot tell.
        console.print(f"{line} (the lossless check read the settings without it)", style="dim")
