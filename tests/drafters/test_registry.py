"""The drafter kinds: one object each, read from one registry by every layer.

A kind defined here, in a test module only, and put in the registry runs end to end: parsed from
`--draft`, checked, loaded and drafted with on MLX, lossless, recorded in a session and replayed
from it. So adding a kind to specplay is its own module plus its entry in KINDS.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import specplay
from specplay.cli import main
from specplay.drafters import KINDS, MODEL, DrafterKind, ModelConfig, Role, drafter_syntax, kind_of, parse_model
from specplay.errors import ConfigError
from specplay.store import load_session
from specplay.store.replay import local_model
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

KIND_NAMES = {kind.name for kind in KINDS.values()}


class RepeatLast:
    """Proposes the last committed token k times: right in runs of a repeated token, free."""

    def __init__(self) -> None:
        self.length = 0

    def extend(self, tokens: Sequence[int], length: int) -> None:
        self.length = max(length, 0)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        return [tokens[-1]] * k if tokens else []


class RepeatLastKind(DrafterKind):
    """The smallest kind there is: no options, no weights, a proposer."""

    name = "repeat-last"
    syntax = "repeat-last"
    summary = "proposes the last token again"
    form = "proposer"
    cannot_write = "repeat-last only repeats, it cannot write alone"

    def parse(self, name: str, role: Role, given: str | None, field: str) -> ModelConfig:
        if given is not None:
            raise ConfigError(field, "repeat-last takes no options")
        return ModelConfig(name, role, self.name, "")

    def describe(self, model: ModelConfig) -> str:
        return "repeats the last token"

    def replay(self, name: str, role: Role, record: Mapping[str, Any]) -> ModelConfig:
        return ModelConfig(name, role, self.name, "")

    def proposer(self, model: ModelConfig) -> RepeatLast:
        return RepeatLast()


@pytest.fixture
def repeat_last(monkeypatch: pytest.MonkeyPatch) -> Iterator[DrafterKind]:
    kind = RepeatLastKind()
    monkeypatch.setitem(KINDS, kind.name, kind)
    yield kind


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["run", *args])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")], err


def test_a_kind_added_in_a_test_module_runs_end_to_end(
    repeat_last: DrafterKind, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drafter = parse_model("rep", "drafter", "repeat-last", "draft")
    assert kind_of(drafter) is repeat_last and drafter.kind == "repeat-last"
    assert "repeat-last" in drafter_syntax()  # the help of --draft lists it
    common = ["--prompt", CODE_PROMPT, "--raw", "--max-tokens", "24", "--ignore-eos", "--json"]
    models = ["--target", str(tiny.target), "--draft", "rep=repeat-last"]
    code, (target_only,), _ = _run(capsys, *models, *common, "--mode", "target")
    assert code == 0
    sessions = tmp_path / "sessions"
    code, (speculative,), err = _run(
        capsys, *models, *common, "--route", "rep", "--save", "--no-baseline", "--sessions-dir", str(sessions)
    )
    assert code == 0, err
    # Lossless at temperature 0: the target's own tokens, drafted by the new kind.
    assert speculative["token_ids"] == target_only["token_ids"]
    assert {r["route"] for r in speculative["rounds"]} == {"rep"}
    assert sum(len(r["drafted"]) for r in speculative["rounds"]) > 0
    # Recorded by its kind, and replayed from that record as the drafter the run was given.
    (path,) = sessions.glob("*.jsonl")
    record = load_session(path).header["backend"]["models"]["rep"]
    assert record == {"kind": "repeat-last", "source": "repeats the last token"}
    assert local_model("rep", "drafter", record) == drafter
    code, (replayed,), err = _run(capsys, "--replay", str(path), "--json", "--sessions-dir", str(sessions))
    assert code == 0, err
    assert replayed["token_ids"] == speculative["token_ids"]
    # The configuration's checks read it too: it cannot write alone, in its own words.
    code, _, err = _run(capsys, *models, *common, "--route", "rep", "--mode", "draft")
    assert code != 0 and "repeat-last only repeats, it cannot write alone" in err and "Traceback" not in err


def test_a_source_names_its_kind_or_is_a_model() -> None:
    assert kind_of(parse_model("l", "drafter", "prompt-lookup:n=1-3", "draft")).name == "prompt-lookup"
    assert kind_of(parse_model("e", "drafter", "early-exit:layers=3", "draft")).name == "early-exit"
    assert kind_of(parse_model("m", "drafter", "some/model", "draft")) is MODEL
    with pytest.raises(ConfigError, match="none is a route, not a drafter: pick it with --route none"):
        parse_model("n", "drafter", "none", "draft")
    with pytest.raises(ConfigError, match="prompt-lookup is a drafter, not a target"):
        parse_model("target", "target", "prompt-lookup", "target")


def test_every_kind_says_what_it_is() -> None:
    assert {"model", "prompt-lookup", "early-exit", "none"} <= KIND_NAMES
    for name, kind in KINDS.items():
        assert kind.name == name and kind.summary and kind.syntax and kind.form
        assert kind.__doc__ is not None


def _compared_kind_names(tree: ast.AST) -> list[int]:
    """Lines comparing a value with a kind's name written out (`kind == "prompt-lookup"`,
    `kind in ("model", "early-exit")`)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            # A literal tuple counts where it is a set of kinds; ["model", "layers"] is a weight's path.
            elements = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            names = [e.value for e in elements if isinstance(e, ast.Constant)]
            if names and set(names) <= KIND_NAMES and set(names) - {"none"}:
                lines.append(node.lineno)
    return lines


def test_no_module_but_the_registry_compares_a_kinds_name() -> None:
    """A comparison with a kind's name elsewhere is a branch a new kind would have to be added to.
    (`none` is also a word of other formats, a GGUF file's rope scaling among them; the none route
    is compared through its constant.)"""
    package = Path(specplay.__file__).parent
    found = {}
    for path in package.rglob("*.py"):
        where = path.relative_to(package).as_posix()
        if where.startswith("drafters/"):
            continue
        if lines := _compared_kind_names(ast.parse(path.read_text(encoding="utf-8"))):
            found[where] = lines
    assert found == {}
