"""A bench of Spec-Bench questions reported as Spec-Bench reports it: per task (its six, then
`overall`) and configuration, the speedup over target-only and the mean accepted tokens, from
each question's turns (the arithmetic: bench/spec_bench.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from specplay.bench.report import cell
from specplay.bench.spec_bench import QuestionRun, TaskSpeed, task_speed
from specplay.bench.sweep import BASELINE, ROUTER_CHECK, BenchConfig, Measurement
from specplay.data.prompt import Prompt
from specplay.data.spec_bench import task_order

OVERALL = "overall"


@dataclass(frozen=True)
class SpecBenchEntry:
    temperature: float
    config: str
    task: str
    speed: TaskSpeed


def _question_runs(
    measurements: Sequence[Measurement], turns: Mapping[str, int]
) -> dict[tuple[float, str, int], dict[str, QuestionRun]]:
    """(temperature, config, repeat) -> question -> its run, for questions with every turn measured."""
    by_question: dict[tuple[float, str, int, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        by_question[(m.temperature, m.config, m.repeat, m.prompt)].append(m)
    runs: dict[tuple[float, str, int], dict[str, QuestionRun]] = defaultdict(dict)
    for (temperature, config, repeat, question), answered in by_question.items():
        if len(answered) != turns.get(question):  # a bench stopped mid-question
            continue
        answered.sort(key=lambda m: m.turn)
        runs[(temperature, config, repeat)][question] = QuestionRun(
            new_tokens=tuple(m.num_tokens for m in answered),
            wall_time_s=tuple(m.e2e_ms / 1000 for m in answered),
            steps=sum(m.num_spec_steps for m in answered),
            accepted=sum(m.num_accepted_draft_tokens for m in answered),
        )
    return runs


def spec_bench_entries(
    configs: Sequence[BenchConfig],
    measurements: Sequence[Measurement],
    questions: Sequence[Prompt],
    remote: bool = False,
) -> list[SpecBenchEntry]:
    """Per temperature, configuration and task (then overall): the speed over the repeats in which
    both the configuration and target-only answered every question of the task (`questions`: the
    bench's, their categories Spec-Bench's tasks); in a bench stopped before any such repeat, over
    the questions both answered. Draft-only rows are no method of Spec-Bench's, and the router
    check is an accuracy: neither is reported here. `remote` (vLLM inspection): a speculative
    request's wall time is HTTP round trips, so only its mean accepted tokens are given."""
    speculative = {c.label for c in configs if c.mode == "speculative"}
    runs = _question_runs(measurements, {q.name: len(q.turns) for q in questions})
    tasks = task_order([q.category for q in questions])
    methods = [c.label for c in configs if c.mode != "draft" and c.group != ROUTER_CHECK]
    entries = []
    for temperature in dict.fromkeys(m.temperature for m in measurements):
        repeats = sorted({m.repeat for m in measurements if m.temperature == temperature})
        for config in methods:
            for task in [*tasks, OVERALL]:
                wanted = [q.name for q in questions if task in (OVERALL, q.category)]
                answered = []  # per repeat: the questions both answered
                for repeat in repeats:
                    mine = runs.get((temperature, config, repeat), {})
                    base = runs.get((temperature, BASELINE, repeat), {})
                    both = [q for q in wanted if q in mine and q in base]
                    if both:
                        answered.append(([mine[q] for q in both], [base[q] for q in both], len(both) == len(wanted)))
                full = [(m, b) for m, b, whole in answered if whole]
                chosen = full or [(m, b) for m, b, _ in answered]
                if chosen:
                    speed = task_speed([m for m, _ in chosen], [b for _, b in chosen])
                    if remote and config in speculative:
                        speed = replace(speed, tokens_per_s=None, speedup=None, speedup_std=None)
                    entries.append(SpecBenchEntry(temperature, config, task, speed))
    return entries


def spec_bench_markdown(entries: Sequence[SpecBenchEntry]) -> list[str]:
    lines = [
        "",
        "## Spec-Bench tasks",
        "",
        "As Spec-Bench's evaluation/speed.py computes them: a question's tokens/s is its turns' new tokens over",
        "their wall time (each turn's whole request, prefill included); a task's speedup is the mean of its",
        "questions' tokens/s over target-only's mean on the same questions (a ratio of means), averaged over",
        "the repeats (± their standard deviation); mean accepted tokens is the mean over every round (target",
        "forward pass) of the tokens it committed, accepted drafts + 1. Each question ran under every",
        "configuration in turn; `target-only (A/A)` is target-only again, last: its distance from 1.00x is",
        "the noise a speedup here carries.",
    ]
    tasks = list(dict.fromkeys(e.task for e in entries))
    for temperature in dict.fromkeys(e.temperature for e in entries):
        here = [e for e in entries if e.temperature == temperature]
        for title, show in TABLES:
            lines += ["", f"### {title}, temperature {temperature:g}", "", *_table(here, tasks, show)]
    return lines


TABLES = (("Speedup over target-only", "speedup"), ("Mean accepted tokens", "accepted"), ("Tokens/s", "tokens_per_s"))


def _table(entries: Sequence[SpecBenchEntry], tasks: Sequence[str], show: str) -> list[str]:
    """Configurations by tasks, each task headed with its number of questions."""
    speeds = {(e.config, e.task): e.speed for e in entries}
    questions: dict[str, int] = {}
    for e in entries:  # a bench stopped part-way answered fewer under its last configurations
        questions[e.task] = max(questions.get(e.task, 0), e.speed.questions)
    lines = ["| configuration | " + " | ".join(f"{t} ({questions.get(t, 0)})" for t in tasks) + " |"]
    lines.append("| --- |" + " --- |" * len(tasks))
    for config in dict.fromkeys(e.config for e in entries):
        lines.append(f"| {config} | " + " | ".join(_cell(speeds.get((config, t)), show) for t in tasks) + " |")
    return lines


def _cell(speed: TaskSpeed | None, show: str) -> str:
    if speed is None:
        return "–"
    if show == "accepted":
        return cell(speed.mean_accepted_tokens, "{:.2f}")
    if show == "tokens_per_s":
        return cell(speed.tokens_per_s, "{:.1f}")
    spread = f" ± {speed.speedup_std:.2f}" if speed.speedup_std is not None else ""
    return cell(speed.speedup, "{:.2f}x") + (spread if speed.speedup is not None else "")
