"""`specplay diff` of a conversation: turn i of A against turn i of B (or of A's own target-only
lane), each turn diffed as a single run is; where the conversations have different numbers of
turns, or a turn was asked with different prompts, it says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from specplay.cli.diff import ONLY_A, ONLY_B, VLLM_CAVEAT, render_diff
from specplay.cli.render import colourless, make_console
from specplay.display.text import counted, token_repr
from specplay.files.json_text import dump_json
from specplay.store import LaneRecord, Session
from specplay.store.changes import skipped_changes
from specplay.store.diff import Side, TurnComparison, compare_turns

PROMPT_CHARS = 60
"""How much of a turn's prompt a heading quotes."""


def _answered(lane: LaneRecord | None) -> LaneRecord | None:
    """A lane that started answering its turn; one that never ran (a run cut short before it) is no answer."""
    return lane if lane is not None and lane.start is not None else None


def sides(a: Session, b: Session | None) -> tuple[Side, Side]:
    """A's main lane turn by turn, against B's main lane or, without B, A's own target-only lane."""
    side_a = [(turn.prompt, _answered(turn.main)) for turn in a.turns]
    if b is None:
        return side_a, [(turn.prompt, _answered(turn.baseline)) for turn in a.turns]
    return side_a, [(turn.prompt, _answered(turn.main)) for turn in b.turns]


def diff_conversation(a: Session, b: Session | None, as_json: bool) -> int:
    """`b` None: A against its own target-only lane. Exits 1 where a turn broke the lossless promise."""
    side_a, side_b = sides(a, b)
    turns = compare_turns(side_a, side_b, own_baseline=b is None)
    if as_json:
        print(dump_json(_json(a, b if b is not None else a, turns), ensure_ascii=False))
    else:
        _show(a, b, turns)
    return 1 if any(t.violation is not None for t in turns) else 0


def _lanes(turns: Sequence[TurnComparison]) -> list[LaneRecord]:
    return [lane for t in turns for lane in (t.lane_a, t.lane_b) if lane is not None]


def _turn_side(lane: LaneRecord | None) -> dict[str, Any] | None:
    if lane is None:
        return None
    return {"lane": lane.name, "num_tokens": len(lane.token_ids), "complete": lane.complete}


def _turn_json(t: TurnComparison) -> dict[str, Any]:
    record: dict[str, Any] = {
        "turn": t.turn,
        "prompt_a": t.prompt_a,
        "prompt_b": t.prompt_b,
        "same_prompt": t.same_prompt,
        "same_earlier_turns": t.same_earlier_turns,
        "a": _turn_side(t.lane_a),
        "b": _turn_side(t.lane_b),
        "identical": t.identical,
    }
    if t.diff is not None:
        record |= t.diff.to_dict()
    lanes = [lane for lane in (t.lane_a, t.lane_b) if lane is not None]
    return record | {"lossless_greedy": t.checked, "violation": t.violation, "skipped_changes": skipped_changes(lanes)}


def _json(a: Session, b: Session, turns: Sequence[TurnComparison]) -> dict[str, Any]:
    own = a is b
    broken = next((t for t in turns if t.violation is not None), None)
    side_b = {"session": b.id, "lane": "target" if own else b.main.name, "num_turns": len(b.turns)}
    return {
        "a": {"session": a.id, "lane": a.main.name, "num_turns": len(a.turns), "complete": a.complete},
        "b": side_b | {"complete": b.complete},
        "identical": all(t.identical for t in turns),
        "lossless_greedy": any(t.checked for t in turns),
        "violation": broken.violation if broken is not None else None,
        "violation_turn": broken.turn if broken is not None else None,
        "turns": [_turn_json(t) for t in turns],
        "skipped_changes": skipped_changes(_lanes(turns)),
    }


def _quote(prompt: str) -> str:
    return token_repr(prompt, PROMPT_CHARS)


def _numbers(t: TurnComparison) -> str:
    assert t.diff is not None and t.lane_a is not None and t.lane_b is not None
    parts = [f"similarity {t.diff.similarity:.3f}"]
    parts.append("identical" if t.diff.identical else f"first divergence at token {t.diff.first_divergence}")
    parts.append(f"A {t.diff.len_a} tokens, B {t.diff.len_b} tokens")
    parts += [f"{name} incomplete" for name, lane in (("A", t.lane_a), ("B", t.lane_b)) if not lane.complete]
    return " · ".join(parts)


def _missing(t: TurnComparison, count_a: int, count_b: int) -> str:
    if t.prompt_a is None:
        return f"only B has this turn (A has {counted(count_a, 'turn')})"
    if t.prompt_b is None:
        return f"only A has this turn (B has {counted(count_b, 'turn')})"
    return f"{'A' if t.lane_a is None else 'B'} has no answer to it: its run was cut short first"


def _show(a: Session, b: Session | None, turns: Sequence[TurnComparison]) -> None:
    console = make_console()
    marks = colourless(console)
    label_a = a.main.name if b is None else f"{a.id} {a.main.name}"
    label_b = "target" if b is None else f"{b.id} {b.main.name}"
    legend = Text(f"A {label_a} → B {label_b}, turn by turn: ")
    if marks:
        legend.append("only in A [-x-]  only in B {+x+}")
    else:
        legend.append("only in A", style=ONLY_A).append(" ").append("only in B", style=ONLY_B)
    console.print(legend, style="dim")
    count_a, count_b = len(a.turns), len((b or a).turns)
    for t in turns:
        console.print()
        prompt = t.prompt_a if t.prompt_a is not None else t.prompt_b
        assert prompt is not None
        console.print(Text(f"Turn {t.turn + 1} of {len(turns)} · {_quote(prompt)}"), style="bold")
        if t.prompt_a is not None and t.prompt_b is not None and not t.same_prompt:
            console.print(Text(f"the prompts differ: B asked {_quote(t.prompt_b)}"), style="yellow")
        if t.diff is None:
            console.print(_missing(t, count_a, count_b), style="dim")
            continue
        assert t.lane_a is not None and t.lane_b is not None
        if not t.same_earlier_turns:
            console.print("asked after different earlier turns: each side continues its own conversation", style="dim")
        console.print(render_diff(t.lane_a, t.lane_b, t.diff, marks))
        console.print(_numbers(t), style="dim")
    console.print()
    console.print(_verdict(turns, count_a, count_b), style="dim")
    broken = next((t for t in turns if t.violation is not None), None)
    if broken is not None:
        console.print(
            f"VIOLATION: lossless greedy run diverged in turn {broken.turn + 1} at token {broken.violation}",
            style="bold red",
        )
        if (a.header.get("backend") or {}).get("backend") == "vllm":
            console.print(VLLM_CAVEAT, style="dim")
    for line in skipped_changes(_lanes(turns)):
        console.print(f"{line} (the lossless check read the settings without it)", style="dim")


def _turn_list(turns: Sequence[TurnComparison]) -> str:
    return ", ".join(str(t.turn + 1) for t in turns)


def _verdict(turns: Sequence[TurnComparison], count_a: int, count_b: int) -> str:
    """One line for the whole conversation: which turns are identical, which differ and where."""
    counts = f"A {count_a} turns, B {count_b} turns" if count_a != count_b else f"{count_a} turns"
    parts = [f"conversation: {counts}"]
    same = [t for t in turns if t.identical]
    if same:
        parts.append(f"identical in turn{'s' * (len(same) > 1)} {_turn_list(same)}")
    differ = [t for t in turns if t.diff is not None and not t.identical]
    for t in differ:
        assert t.diff is not None
        where = "same tokens" if t.diff.identical else f"first divergence at token {t.diff.first_divergence}"
        asked = "" if t.same_prompt else ", asked differently"
        parts.append(f"turn {t.turn + 1} differs ({where}{asked})")
    unmatched = [t for t in turns if t.diff is None]
    if unmatched:
        parts.append(f"not compared: turn{'s' * (len(unmatched) > 1)} {_turn_list(unmatched)}")
    return " · ".join(parts)
