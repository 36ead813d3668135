"""`bench --prompts` reads Spec-Bench's question file as it is: its multi-turn questions run as
conversations (each configuration's later turns after its own answers, its caches kept), the
report groups by Spec-Bench's six tasks, `--per-category` picks the same questions every time,
and a malformed or mixed file is refused in one line.

tests/data/spec_bench_questions.jsonl is made up for these tests in Spec-Bench's format (a few
questions of each task, the MT-bench ones with two turns); Spec-Bench's own questions are not
shipped (docs/bench.md says where to get them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specplay.backends.mlx import load_mlx_backend
from specplay.bench.execute import BenchPlan, execute
from specplay.bench.sweep import BenchConfig, load_prompts
from specplay.cli import main
from specplay.config.demo import DEMO_DIR
from specplay.data.library import read_prompt_file
from specplay.data.spec_bench import TASKS
from specplay.engine.conversation import Exchange
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SpecSettings
from tests.support.checks import every

QUESTIONS = Path(__file__).parents[1] / "data" / "spec_bench_questions.jsonl"
OVERALL = "overall"


def test_a_spec_bench_file_is_read_as_it_is() -> None:
    found = read_prompt_file(QUESTIONS)
    assert found.spec_bench and len(found.prompts) == 15
    first = found.prompts[0]
    assert (first.category, first.name, first.note) == ("mt_bench", "81", "writing")
    assert first.turns == (
        "Write a short note inviting the neighbours to a street party on Saturday.",
        "Rewrite your note in exactly three sentences.",
    )
    assert {p.category for p in found.prompts} == set(TASKS)  # the eight MT-bench categories are one task
    rag = next(p for p in found.prompts if p.category == "rag")
    assert rag.follow_ups == () and rag.turns == (rag.text,)
    library = load_prompts(None, 1)  # the {category, text} format as before
    assert not library.spec_bench and [p.category for p in library.prompts] == ["code", "prose", "mixed", "editing"]


def test_per_category_picks_the_same_questions_of_each_task_every_time() -> None:
    picked = [p.name for p in load_prompts(QUESTIONS, 2).prompts]
    assert picked == [p.name for p in load_prompts(QUESTIONS, 2).prompts]
    # mt_bench takes its categories in turn (writing's first, then roleplay's); the others the first in file order
    assert picked == ["81", "91", "161", "162", "241", "242", "321", "322", "401", "402", "481", "482"]
    assert [p.name for p in load_prompts(QUESTIONS, 5).prompts][:5] == ["81", "91", "111", "121", "82"]
    assert [p.name for p in load_prompts(QUESTIONS, 1).prompts] == ["81", "161", "241", "321", "401", "481"]


ASKED = ("What is two and two?",)


def _question(qid: Any = 1, category: Any = "qa", turns: Any = ASKED) -> str:
    """A question line; `turns` as given (a tuple: the list JSON writes)."""
    return json.dumps({"question_id": qid, "category": category, "turns": turns}) + "\n"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            [_question(), json.dumps({"category": "code", "text": "x"}) + "\n"],
            "line 2 of {path} is a {{category, text}}",
        ),
        ([json.dumps({"category": "code", "text": "x"}) + "\n", _question()], "line 2 of {path} is a Spec-Bench"),
        ([_question(), _question(2, turns="one text")], "line 2 of {path} needs turns, a list of texts"),
        ([_question(turns=["a question", " "])], "line 1 of {path} has an empty turn 2"),
        ([_question(), _question(2, turns=[])], "line 2 of {path} needs turns"),
        (["\n", _question(category=None)], "line 2 of {path} needs a question_id"),
        ([_question(), json.dumps({"question_id": 2, "turns": ["x"]})], "line 2 of {path} is not a {{question_id"),
        ([_question(), "{not json\n"], "line 2 of {path} is not a {{question_id, category, turns}} object"),
        ([_question(), _question()], "line 2 of {path} repeats question_id 1 (line 1)"),
    ],
    ids=[
        "text-in-questions",
        "question-in-texts",
        "turns-text",
        "empty-turn",
        "no-turns",
        "no-category",
        "no-key",
        "not-json",
        "repeated-id",
    ],
)
def test_a_malformed_or_mixed_file_is_one_line(
    lines: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "question.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    assert main(["bench", "--target", "demo", "--prompts", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(path=path) in err, err
    assert "Traceback" not in err and ("one format per file" in err or "give each" in err), err
    assert not (tmp_path / "out" / "report.md").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--sweeps", "k,trees"], "--sweeps takes a comma list of draft-only, k, policy, width, tv, route, router"),
        (["--sweeps", "route", "--draft", "lookup=prompt-lookup"], "leaves nothing but target-only to run"),
    ],
)
def test_sweeps_that_run_nothing_are_one_line(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--target", "demo", "--prompts", str(QUESTIONS), *flags, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err


class Recording(SpecEngine):
    """The engine on the demo models, noting each request."""

    def __init__(self) -> None:
        backend = load_mlx_backend(str(DEMO_DIR / "target"), [("base", str(DEMO_DIR / "base"))])
        super().__init__(backend)
        self.requests: list[Request] = []

    def generate(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        self.requests.append(request)
        return super().generate(request, *args, **kwargs)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_each_configuration_continues_its_own_conversation(temperature: float) -> None:
    """Turn 2's prompt is the conversation so far with the configuration's OWN first answer, sent
    as a continuing request; greedy, speculative and target-only answer each turn alike."""
    engine = Recording()
    question = next(p for p in load_prompts(QUESTIONS, 1).prompts if p.follow_ups)
    plan = BenchPlan(
        configs=(),
        prompts=(question,),
        temperatures=(temperature,),
        repeats=3,
        max_tokens=10,
        raw=False,
        warm_up=(),
        ignore_eos=False,
    )
    lanes = {
        "speculative": BenchConfig("k=4", "k", settings=SpecSettings(route="base")),
        "target": BenchConfig("target-only", "baseline", mode="target"),
    }
    answers: dict[str, list[str]] = {}
    for mode, config in lanes.items():
        results = execute(engine, plan, config, question, temperature, seed=1)
        first, second = engine.requests[-2:]
        answers[mode] = [r["answer"] for r in results]
        assert (first.mode, first.continues, second.continues) == (mode, False, True)
        assert first.prompt_token_ids == tuple(engine.encode(question.text, raw=False))
        own = [Exchange(question.text, answers[mode][0])]
        assert second.prompt_token_ids == tuple(engine.encode(question.follow_ups[0], raw=False, earlier=own))
        assert len(second.prompt_token_ids) > len(first.prompt_token_ids) + 2
        assert every(r["metrics"]["num_tokens"] >= 1 for r in results)
    if temperature == 0:
        assert answers["speculative"] == answers["target"]
    else:  # sampled: the lanes' first answers differ, so each second turn shows whose answer it follows
        assert answers["speculative"][0] != answers["target"][0]
        other = [Exchange(question.text, answers["target"][0])]
        spec_second = engine.requests[1]
        assert spec_second.prompt_token_ids != tuple(engine.encode(question.follow_ups[0], raw=False, earlier=other))


def test_bench_reports_spec_bench_tasks_with_speedup_and_mean_accepted_tokens(tmp_path: Path) -> None:
    out = tmp_path / "report"
    drafter = ["--draft", f"base={DEMO_DIR / 'base'}"]  # one drafter: the k sweep, without routes
    args = ["bench", "--target", "demo", *drafter, "--prompts", str(QUESTIONS), "--quick", "--sweeps", "k"]
    assert main([*args, "--max-tokens", "6", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    about = results["about"]
    picked = "mt_bench/81 (writing), translation/161, summarization/241, qa/321, math_reasoning/401, rag/481"
    assert about["prompts"] == picked
    assert "6 questions, 7 turns" in about["prompt file"] and "end of text" in about["output length"]
    entries = {(e["config"], e["task"]): e["speed"] for e in results["spec_bench"]}
    configs = ["target-only", "k=2", "k=4", "target-only (A/A)"]
    assert list(dict.fromkeys(config for config, _ in entries)) == configs
    assert every([task for c, task in entries if c == config] == [*TASKS, OVERALL] for config in configs)
    assert every(entries[("k=4", task)]["speedup"] > 0 for task in [*TASKS, OVERALL])
    assert every(entries[("k=4", task)]["mean_accepted_tokens"] >= 1 for task in [*TASKS, OVERALL])
    assert entries[("target-only", OVERALL)]["speedup"] == 1.0
    assert entries[("target-only", OVERALL)]["mean_accepted_tokens"] is None
    assert entries[("k=4", OVERALL)]["questions"] == 6
    # the two-turn question ran as a conversation, each turn answered alike greedily by every configuration
    turns = {(m["config"], m["prompt"], m["turn"]) for m in results["measurements"]}
    assert ("k=4", "81", 1) in turns and ("k=4", "161", 1) not in turns
    answers: dict[tuple[str, int], set[str]] = {}
    for m in results["measurements"]:
        answers.setdefault((m["prompt"], m["turn"]), set()).add(m["answer"])
    assert len(answers) == 7 and every(len(texts) == 1 for texts in answers.values())
    # question by question: the first question's turns under every configuration before the next question
    order = [(m["config"], m["prompt"]) for m in results["measurements"] if m["repeat"] == 0]
    assert list(dict.fromkeys(order))[:4] == [(config, "81") for config in configs]
    report = (out / "report.md").read_text()
    header = "| configuration | mt_bench (1) | translation (1) | summarization (1) | qa (1) | math_reasoning (1) | "
    assert report.count(header + "rag (1) | overall (6) |") == 3  # speedup, mean accepted tokens, tokens/s
    for title in ("Speedup over target-only", "Mean accepted tokens", "Tokens/s"):
        assert f"### {title}, temperature 0" in report
    assert "## mt_bench, temperature 0" in report  # specplay's own measures, by task
