"""Spec-Bench's question file, read as it is (hemingkx/Spec-Bench, `data/spec_bench/question.jsonl`):
one `{"question_id", "category", "turns": [str, ...]}` per line, each turn a user message answered
after the earlier ones.

Spec-Bench groups its 480 questions into six tasks: MT-bench's 80 multi-turn questions (eight
categories) are one task, `mt_bench`; translation, summarization, qa, math_reasoning and rag are
80 each. A category outside those (a file of one's own in the same format) is a task of its own.
specplay does not ship the questions: their upstream datasets carry their own terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specplay.data.prompt import Prompt

MT_BENCH = "mt_bench"
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TASKS = (MT_BENCH, "translation", "summarization", "qa", "math_reasoning", "rag")
"""In the order Spec-Bench reports them (evaluation/speed.py), before `overall`."""
FORMAT = "{question_id, category, turns}"
FIX = "give each line a question_id, a category and turns, a list of non-empty texts (Spec-Bench's format)"


def is_question(row: Any) -> bool:
    """Whether a parsed line is meant as a Spec-Bench question: it has turns or a question_id."""
    return isinstance(row, dict) and ("turns" in row or "question_id" in row)


def task_of(category: str) -> str:
    """Spec-Bench's task of a question's category: the MT-bench categories are one task."""
    return MT_BENCH if category in MT_BENCH_CATEGORIES else category


class QuestionError(ValueError):
    """A line that is not a well-formed question: what is wrong with it."""


def question(row: Any) -> Prompt:
    """One question as a prompt: its category Spec-Bench's task, its name the question_id, its
    note the file's own category (`writing`), its first turn the text and the others follow-ups."""
    if not isinstance(row, dict) or not all(key in row for key in ("question_id", "category", "turns")):
        raise QuestionError(f"is not a {FORMAT} object")
    qid, category, turns = row["question_id"], row["category"], row["turns"]
    if isinstance(qid, bool) or not isinstance(qid, int | str) or not isinstance(category, str) or not category:
        raise QuestionError("needs a question_id (a number or a text) and a category (a text)")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise QuestionError("needs turns, a list of texts")
    for number, turn in enumerate(turns, 1):
        if not turn.strip():
            raise QuestionError(f"has an empty turn {number}")
    return Prompt(task_of(category), str(qid), turns[0], note=category, follow_ups=tuple(turns[1:]))


def pick(questions: Sequence[Prompt], per_task: int) -> list[Prompt]:
    """`per_task` questions of each task, the same every time: the first in file order, except that
    mt_bench takes its categories in turn (the first question of each category, in the order they
    first appear, then the second of each, ...), so a few questions still span its eight."""
    chosen: list[Prompt] = []
    for task in dict.fromkeys(q.category for q in questions):
        by_category: dict[str, list[Prompt]] = {}
        for q in questions:
            if q.category == task:
                by_category.setdefault(q.note, []).append(q)
        taken: list[Prompt] = []
        rank = 0
        while len(taken) < per_task and any(rank < len(group) for group in by_category.values()):
            taken += [group[rank] for group in by_category.values() if rank < len(group)]
            rank += 1
        chosen += taken[:per_task]
    return chosen


def task_order(tasks: Sequence[str]) -> list[str]:
    """Spec-Bench's six tasks in its order, then any others as they came."""
    known = [t for t in TASKS if t in tasks]
    return known + [t for t in dict.fromkeys(tasks) if t not in TASKS]
