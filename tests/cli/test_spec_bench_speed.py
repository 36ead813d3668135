"""Spec-Bench's arithmetic (evaluation/speed.py) on hand-computed numbers: per question, its turns'
tokens over their time; per task, a ratio of means; over runs, the mean speedup; mean accepted
tokens over every step."""

from __future__ import annotations

import pytest

from specplay.bench.spec_bench import QuestionRun, run_speedup, task_speed
from specplay.bench.spec_bench_report import spec_bench_entries, spec_bench_markdown
from specplay.bench.sweep import BenchConfig, Measurement
from specplay.data.prompt import Prompt
from specplay.engine.settings import SpecSettings


def test_a_task_is_a_ratio_of_means_over_questions_of_summed_turns() -> None:
    # Run 0. Method: question 1 answers 10 then 20 tokens in 0.5 s and 1.5 s: 30 / 2.0 = 15 tokens/s
    # (the mean of its turns' rates would be 16.7); question 2, 40 tokens in 2 s: 20. Mean 17.5.
    # Baseline: 30 / 3.0 = 10 and 40 / 1.0 = 40, mean 25. Speedup 17.5 / 25 = 0.7 (the mean of
    # the questions' ratios would be (1.5 + 0.5) / 2 = 1.0).
    method0 = [QuestionRun((10, 20), (0.5, 1.5), steps=12, accepted=18), QuestionRun((40,), (2.0,), 20, 20)]
    base0 = [QuestionRun((10, 20), (1.0, 2.0)), QuestionRun((40,), (1.0,))]
    assert method0[0].tokens_per_s == 15.0
    assert run_speedup(method0, base0) == pytest.approx(0.7)
    # Run 1: method 30 / 1.5 = 20 and 40 / 1 = 40 (mean 30); baseline 10 and 20 (mean 15): 2.0.
    method1 = [QuestionRun((10, 20), (1.0, 0.5), steps=10, accepted=20), QuestionRun((40,), (1.0,), 20, 20)]
    base1 = [QuestionRun((10, 20), (1.0, 2.0)), QuestionRun((40,), (2.0,))]
    speed = task_speed([method0, method1], [base0, base1])
    assert speed.questions == 2
    assert speed.speedup == pytest.approx((0.7 + 2.0) / 2)  # Spec-Bench's --mean-report: runs' speedups averaged
    assert speed.speedup_std == pytest.approx(0.919239, abs=1e-6)  # sample std of 0.7 and 2.0
    assert speed.tokens_per_s == pytest.approx((17.5 + 30) / 2)
    assert speed.baseline_tokens_per_s == pytest.approx((25 + 15) / 2)
    # accept_lengths: each step's accepted drafts + 1, averaged over all 62 steps: (78 + 62) / 62
    assert speed.mean_accepted_tokens == pytest.approx(140 / 62)
    # the baseline has no steps: no accepted tokens; one run: no spread
    alone = task_speed([base0], [base0])
    assert alone.speedup == 1.0 and alone.mean_accepted_tokens is None and alone.speedup_std is None
    # a baseline that made no tokens gives no speedup
    silent = [QuestionRun((0,), (1.0,))]
    assert task_speed([method0[:1]], [silent]).speedup is None


def _question(task: str, name: str, turns: int) -> Prompt:
    return Prompt(task, name, "first turn", follow_ups=("a later turn",) * (turns - 1))


def _turn(
    config: str,
    task: str,
    question: str,
    turn: int,
    tokens: int,
    ms: float,
    steps: int = 0,
    accepted: int = 0,
    repeat: int = 0,
) -> Measurement:
    return Measurement(
        config,
        task,
        question,
        0.0,
        repeat,
        repeat,
        route=None,
        num_tokens=tokens,
        e2e_ms=ms,
        tokens_per_s=None,
        num_spec_steps=steps,
        num_accepted_draft_tokens=accepted,
        turn=turn,
    )


def test_entries_group_turns_by_question_and_questions_by_task() -> None:
    configs = [
        BenchConfig("target-only", "baseline", mode="target"),
        BenchConfig("draft-only d", "baseline", mode="draft", settings=SpecSettings(route="d")),
        BenchConfig("k=4", "k"),
    ]
    questions = [_question("mt_bench", "81", 2), _question("mt_bench", "82", 2), _question("translation", "161", 1)]
    measurements = [
        # target-only: 81 makes 40 tokens in 2 s, 82 20 in 2 s, 161 20 in 1 s: 20, 10 and 20 tokens/s
        _turn("target-only", "mt_bench", "81", 0, 10, 1000.0),
        _turn("target-only", "mt_bench", "81", 1, 30, 1000.0),
        _turn("target-only", "mt_bench", "82", 0, 10, 1000.0),
        _turn("target-only", "mt_bench", "82", 1, 10, 1000.0),
        _turn("target-only", "translation", "161", 0, 20, 1000.0),
        _turn("draft-only d", "translation", "161", 0, 20, 100.0),  # no method of Spec-Bench's
        # k=4: 81 in 1 s (40 tokens/s, 14 steps, 26 accepted); 161 in 0.4 s (50 tokens/s, 5 steps, 15 accepted)
        _turn("k=4", "mt_bench", "81", 0, 10, 500.0, steps=4, accepted=6),
        _turn("k=4", "mt_bench", "81", 1, 30, 500.0, steps=10, accepted=20),
        _turn("k=4", "mt_bench", "82", 0, 10, 100.0, steps=1, accepted=9),  # stopped before its second turn
        _turn("k=4", "translation", "161", 0, 20, 400.0, steps=5, accepted=15),
    ]
    entries = {(e.config, e.task): e.speed for e in spec_bench_entries(configs, measurements, questions)}
    assert not any(config == "draft-only d" for config, _ in entries)
    assert [task for config, task in entries if config == "k=4"] == ["mt_bench", "translation", "overall"]
    mt = entries[("k=4", "mt_bench")]
    assert mt.questions == 1 and mt.speedup == pytest.approx(2.0)  # 82 left out: half answered
    assert mt.mean_accepted_tokens == pytest.approx(1 + 26 / 14)
    assert entries[("k=4", "translation")].speedup == pytest.approx(2.5)
    overall = entries[("k=4", "overall")]
    assert overall.questions == 2 and overall.speedup == pytest.approx(45 / 20)  # ratio of means, not (2 + 2.5) / 2
    assert overall.mean_accepted_tokens == pytest.approx(1 + 41 / 19)
    assert entries[("target-only", "mt_bench")].questions == 2  # both answered in full
    report = "\n".join(spec_bench_markdown(list(spec_bench_entries(configs, measurements, questions))))
    assert "| k=4 | 2.00x | 2.50x | 2.25x |" in report
    assert "| configuration | mt_bench (2) | translation (1) | overall (3) |" in report
    assert "| k=4 | 2.86 | 4.00 | 3.16 |" in report


def test_through_a_server_a_speculative_row_keeps_only_its_mean_accepted_tokens() -> None:
    """vLLM inspection: a speculative request's wall time is HTTP round trips, not a speed."""
    configs = [BenchConfig("target-only", "baseline", mode="target"), BenchConfig("k=4", "k")]
    measurements = [
        _turn("target-only", "qa", "321", 0, 20, 1000.0),
        _turn("k=4", "qa", "321", 0, 20, 400.0, steps=5, accepted=15),
    ]
    entries = {
        (e.config, e.task): e.speed
        for e in spec_bench_entries(configs, measurements, [_question("qa", "321", 1)], remote=True)
    }
    remote = entries[("k=4", "qa")]
    assert remote.speedup is None and remote.tokens_per_s is None and remote.mean_accepted_tokens == 4.0
    assert entries[("target-only", "qa")].tokens_per_s == 20.0
    report = "\n".join(
        spec_bench_markdown(list(spec_bench_entries(configs, measurements, [_question("qa", "321", 1)], remote=True)))
    )
    assert "| k=4 | – | – |" in report and "| k=4 | 4.00 | 4.00 |" in report


def test_a_repeat_stopped_part_way_is_left_out_where_a_whole_one_was_measured() -> None:
    """Repeat 0 answered both questions (k=4 at 2x); the bench stopped in repeat 1 after one question
    (at 4x): a run of one question would weigh as much as a run of the task."""
    configs = [BenchConfig("target-only", "baseline", mode="target"), BenchConfig("k=4", "k")]
    questions = [_question("qa", "321", 1), _question("qa", "322", 1)]
    measurements = [
        _turn("target-only", "qa", "321", 0, 20, 1000.0),
        _turn("target-only", "qa", "322", 0, 20, 1000.0),
        _turn("k=4", "qa", "321", 0, 20, 500.0),
        _turn("k=4", "qa", "322", 0, 20, 500.0),
        _turn("target-only", "qa", "321", 0, 20, 1000.0, repeat=1),
        _turn("k=4", "qa", "321", 0, 20, 250.0, repeat=1),
    ]
    speed = {(e.config, e.task): e.speed for e in spec_bench_entries(configs, measurements, questions)}[("k=4", "qa")]
    assert speed.speedup == 2.0 and speed.speedup_std is None and speed.questions == 2
