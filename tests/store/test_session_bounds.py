"""Sessions whose tree rounds, token ids or counts no run writes: every command that reads sessions
refuses them in one line naming the file and the record, or reads what there is to read; and
reading one takes memory in proportion to its size, whatever its counts say."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specplay.cli import main
from specplay.review import FORMATS, export_sessions
from specplay.store import SessionError, load_session
from specplay.store.codec import TOKEN_ID_LIMIT
from tests.support.session_events import write_tree_session

Records = list[dict[str, Any]]


def _records(path: Path) -> Records:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def _write(path: Path, records: Records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _event(records: Records, kind: str, lane: str = "speculative") -> dict[str, Any]:
    """The data of the first `kind` event of `lane`."""
    return next(r for r in records if r.get("kind") == kind and r.get("lane") == lane)["data"]


def _tree_round(records: Records) -> dict[str, Any]:
    """The first round that branched."""
    return next(
        r["data"]
        for r in records
        if r.get("kind") == "round" and r["data"]["parents"] != list(range(-1, len(r["data"]["parents"]) - 1))
    )


def _crafted(tmp_path: Path, change: Callable[[Records], None]) -> tuple[Path, Path]:
    """A real tree session and a copy of it that `change` edited."""
    good = write_tree_session(tmp_path)
    records = _records(good)
    change(records)
    return good, _write(tmp_path / "bad.jsonl", records)


def _commands_refuse(bad: Path, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every command that reads the session ends in one line naming it and the record."""
    with pytest.raises(SessionError, match="is corrupt") as error:
        load_session(bad)
    assert message in str(error.value) and str(bad) in str(error.value), str(error.value)
    for command in (
        ["diff", str(bad)],
        ["export", str(bad)],
        ["run", "--replay", str(bad)],
        ["tui", "--open", str(bad)],
        ["costs", "--prompt", "x", "--sessions", str(bad)],
    ):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err and message in err, (command, err)
    assert main(["sessions", "--sessions-dir", str(bad.parent), "--json"]) == 0
    rows = {row["id"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert message in rows["bad"]["error"]


def _commands_read(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every command that reads the session without its models reads it."""
    session = load_session(bad)
    for fmt in FORMATS:
        export_sessions([session], fmt)
    for command in (["diff", str(bad)], ["export", str(bad), "--format", "html"]):
        assert main(command) == 0, (command, capsys.readouterr().err)
        assert capsys.readouterr().out
    assert main(["sessions", "--sessions-dir", str(bad.parent), "--json"]) == 0
    rows = {row["id"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert "error" not in rows["bad"]


# --- item: a tree round whose parents, drafted tokens and positions disagree ----------------------


def _old_chain_of(k: int) -> Callable[[Records], None]:
    def change(records: Records) -> None:
        data = _tree_round(records)
        del data["parents"]  # a session from before trees: the round reads as a chain of its k
        data["k"] = k

    return change


def _set(key: str, value: Callable[[dict[str, Any]], Any]) -> Callable[[Records], None]:
    def change(records: Records) -> None:
        data = _tree_round(records)
        data[key] = value(data)

    return change


DISAGREEING = {
    "k 3 for 6 drafted": (_old_chain_of(3), "(round).drafted holds 6 tokens for 3 nodes"),
    "positions cut to 2": (_set("positions", lambda d: d["positions"][:2]), "(round).positions holds 2 for 6"),
    "drafted cut to 2": (_set("drafted", lambda d: d["drafted"][:2]), "(round).drafted holds 2 tokens for 6 nodes"),
    "a parent after its child": (_set("parents", lambda d: [-1, 3, *d["parents"][2:]]), "(round).parents is no tree"),
    "parents for more nodes": (_set("parents", lambda d: [*d["parents"], 0]), "(round).drafted holds 6 tokens for 7"),
    "num_accepted past the depth": (_set("num_accepted", lambda d: 9), "(round).num_accepted is 9, not 0 to its depth"),
}


@pytest.mark.parametrize("name", list(DISAGREEING))
def test_a_tree_round_whose_parts_disagree_is_one_line_in_every_command(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, message = DISAGREEING[name]
    _, bad = _crafted(tmp_path, change)
    _commands_refuse(bad, message, capsys)


READABLE = {
    # A speculating server's rounds: how many it drafted, not what nor how each was judged.
    "drafted and positions unknown": lambda d: d.update(drafted=[], positions=[]),
    "positions unknown": lambda d: d.update(positions=[]),
}


@pytest.mark.parametrize("name", list(READABLE))
def test_a_tree_round_without_its_judgements_is_read_by_every_command(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, bad = _crafted(tmp_path, lambda records: READABLE[name](_tree_round(records)))
    _commands_read(bad, capsys)


# --- item: token ids are range-checked where they are read ---------------------------------------


COUNTERFACTUAL = {"route": "far", "drafted": [5], "num_accepted": 0, "elapsed_ms": 1.0}


def _given(data: dict[str, Any], key: str, value: list[Any]) -> list[Any]:
    """`data[key]`, set to `value` where the run recorded none (a top the run did not ask for)."""
    if not data.get(key):
        data[key] = value
    return data[key]


def _id_at(where: Callable[[Records], tuple[Any, Any]], value: int) -> Callable[[Records], None]:
    def change(records: Records) -> None:
        container, key = where(records)
        container[key] = value

    return change


PLACES: dict[str, tuple[Callable[[Records], tuple[Any, Any]], str]] = {
    "drafted": (lambda r: (_tree_round(r)["drafted"], 1), "(round).drafted[1]"),
    "a position's token": (lambda r: (_tree_round(r)["positions"][1], "token_id"), "(round).positions[1].token_id"),
    "a committed token": (lambda r: (_tree_round(r)["tokens"][0], "token_id"), "(round).tokens[0].token_id"),
    "a position's top candidate": (
        lambda r: (_given(_tree_round(r)["positions"][0], "top_target", [[5, 0.5]])[0], 0),
        "(round).positions[0].top_target[0]",
    ),
    "the bonus's top candidate": (
        lambda r: (_given(_tree_round(r), "bonus_top_target", [[5, 0.5]])[0], 0),
        "(round).bonus_top_target[0]",
    ),
    "a counterfactual's draft": (
        lambda r: (_given(_tree_round(r), "counterfactuals", [COUNTERFACTUAL])[0]["drafted"], 0),
        "(round).counterfactuals[0].drafted[0]",
    ),
    "a target step's token": (lambda r: (_event(r, "step", "target")["token"], "token_id"), "(step).token.token_id"),
    "the output": (lambda r: (_event(r, "done")["token_ids"], 0), "(done).token_ids[0]"),
    "the start's prompt": (lambda r: (_event(r, "start")["prompt_token_ids"], 0), "(start).prompt_token_ids[0]"),
    "the header's prompt": (lambda r: (r[0]["prompt_token_ids"], 0), "header.prompt_token_ids[0]"),
}


@pytest.mark.parametrize("value", [-1, TOKEN_ID_LIMIT, 2**70])
@pytest.mark.parametrize("place", list(PLACES))
def test_a_token_id_no_vocabulary_holds_is_one_line_in_every_command(
    place: str, value: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where, field = PLACES[place]
    _, bad = _crafted(tmp_path, _id_at(where, value))
    _commands_refuse(bad, f"{field} is {value}, not a token id", capsys)


def test_a_token_text_keyed_by_no_token_id_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Texts records say nothing of the run: an entry of no token id is skipped, as one of the wrong shape."""
    far, digits = str(TOKEN_ID_LIMIT), "9" * 5000  # a 5,000-digit number is more than int() reads
    texts = {"type": "texts", "texts": {"104": "h", far: "x", digits: "y", "-3": "z"}}
    _, bad = _crafted(tmp_path, lambda records: records.insert(1, texts))
    session = load_session(bad)
    assert session.token_texts[104] == "h" and TOKEN_ID_LIMIT not in session.token_texts
    _commands_read(bad, capsys)


# --- item: counts read from a session are bounded by what a run produces -------------------------


def _huge_old_k(records: Records) -> None:
    data = _tree_round(records)
    del data["parents"]  # read as a chain of k: 20 million nodes, were it built
    data.update(k=20_000_000, drafted=[], positions=[])


def _all_root_parents(records: Records) -> None:
    data = _tree_round(records)
    data.update(parents=[-1] * 1_000_000, drafted=[], positions=[])


def _long_metric(records: Records) -> None:
    _event(records, "done")["metrics"]["acceptance_per_position"] = [0.5] * 200_000


HUGE: dict[str, tuple[Callable[[Records], None], str]] = {
    "an old round's k of 20 million": (_huge_old_k, "(round).parents holds 65 nodes, more than a round drafts (64)"),
    "a million roots": (_all_root_parents, "(round).parents holds 1000000 nodes, more than a round drafts (64)"),
    "a million positions of acceptance": (
        _long_metric,
        "(done).metrics.acceptance_per_position holds 200000 positions, more than a draft has (64)",
    ),
    "a k asked of a trillion": (
        _set("k_asked", lambda d: 10**12),
        "(round).k_asked is 1000000000000, not 0 to a draft's most (64)",
    ),
    "a round's negative token index": (_set("token_index", lambda d: -3), "(round).token_index is -3, not 0 to"),
    "a round's catch-up of a trillion tokens": (
        _set("catch_up_tokens", lambda d: 10**12),
        "(round).catch_up_tokens is 1000000000000, not 0 to",
    ),
}


@pytest.mark.parametrize("name", list(HUGE))
def test_a_count_no_run_produces_is_refused_within_a_multiple_of_the_files_size(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, message = HUGE[name]
    _, bad = _crafted(tmp_path, change)
    size = bad.stat().st_size
    tracemalloc.start()
    try:
        with pytest.raises(SessionError, match="is corrupt") as error:
            load_session(bad)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message in str(error.value) and str(bad) in str(error.value), str(error.value)
    # Reading holds the file's bytes, its text and its records: a few times its size, never its counts'.
    assert peak < 12 * size + 2_000_000, (peak, size)
    _commands_refuse(bad, message, capsys)
