"""CodeProseRouter: time per classify call on 2 KB prompts, and accuracy on a labelled set.

The labelled set comes from this Python installation: windows of the standard library's *.py
source are code; docstrings (found with `ast`) and windows of `pydoc_data.topics` are prose.
Window lengths run from 60 to 2000 characters, drawn with a fixed seed. Then the hand-written set
specplay/data/router_prompts.jsonl (held out from that corpus): accuracy per label, confusion
counts, and where the "mixed" prompts go against the route each one is expected to take.

    python benchmarks/bench_router.py [--samples 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import platform
import random
import statistics
import sysconfig
import time
from collections import Counter
from collections.abc import Callable, Sequence
from importlib import resources
from pydoc_data.topics import topics

from specplay.bench.sweep import load_prompts
from specplay.engine.routers.routing import CodeProseRouter

MIN_CHARS, MAX_CHARS = 60, 2000
PROMPT_CHARS = 2048  # what the router reads of a prompt
LENGTH_BUCKETS = ((60, 250), (250, 800), (800, 2001))


def stdlib_files() -> list[str]:
    return sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))


def read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def docstrings(sources: Sequence[str]) -> list[str]:
    """Module, class and function docstrings long enough to be a window."""
    found = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a few test-data modules are deliberately broken
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= MIN_CHARS:
                    found.append(doc)
    return found


def window(texts: Sequence[str], rng: random.Random) -> str:
    """A window of 60..2000 characters from a random text (the whole text when shorter)."""
    while True:
        text = rng.choice(texts)
        if len(text) >= MIN_CHARS:
            break
    length = min(rng.randint(MIN_CHARS, MAX_CHARS), len(text))
    start = rng.randint(0, len(text) - length)
    return text[start : start + length]


def labelled_set(samples: int, seed: int) -> list[tuple[str, str, str]]:
    """(source, label, text): `samples` code windows and `samples` prose, half from each prose source."""
    rng = random.Random(seed)
    code = [read(path) for path in stdlib_files()]
    docs, pages = docstrings(code), list(topics.values())
    rows = [("stdlib source", "code", window(code, rng)) for _ in range(samples)]
    rows += [("docstrings", "prose", window(docs, rng)) for _ in range(samples // 2)]
    rows += [("pydoc topics", "prose", window(pages, rng)) for _ in range(samples - samples // 2)]
    return rows


def time_per_call_us(classify: Callable[[str], str], prompt: str, calls: int, batches: int) -> float:
    """Median over batches of the mean time per call, in microseconds."""
    per_call = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            classify(prompt)
        per_call.append((time.perf_counter() - start) / calls)
    return 1e6 * statistics.median(per_call)


def timing_prompts() -> dict[str, str]:
    """2 KB prompts: code (a stdlib module's body), prose (pydoc topics, which hold curly quotes),
    and that prose made ASCII, since str.translate takes a slower path on non-ASCII text."""
    module = read(os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py"))
    code = module[module.index("\nclass ") :][:PROMPT_CHARS]
    prose = "\n\n".join(topics[name] for name in ("lambda", "with", "if", "for"))[:PROMPT_CHARS]
    return {"code": code, "prose": prose, "prose, ASCII only": prose.encode("ascii", "replace").decode()}


def report_timing(router: CodeProseRouter, calls: int, batches: int) -> None:
    print(f"classify time, median of {batches} batches x {calls} calls:")
    for name, prompt in timing_prompts().items():
        us = time_per_call_us(router.classify, prompt, calls, batches)
        print(f"  {name} prompt, {len(prompt)} chars -> {router.classify(prompt)!r}: {us:.2f} µs per call")


def accuracy(rows: list[tuple[str, str, str]], predicted: list[str], keep: Callable[[str, str, str], bool]) -> str:
    hits = [
        guess == label
        for (source, label, text), guess in zip(rows, predicted, strict=True)
        if keep(source, label, text)
    ]
    return f"{sum(hits) / len(hits):7.1%}  ({sum(hits)}/{len(hits)})" if hits else "   n/a"


def report_accuracy(router: CodeProseRouter, samples: int, seed: int) -> None:
    rows = labelled_set(samples, seed)
    predicted = [router.classify(text) for _, _, text in rows]
    print(f"\naccuracy on {len(rows)} windows of {MIN_CHARS}..{MAX_CHARS} chars (seed {seed}):")
    for label in router.classes:
        print(f"  {label:<24}{accuracy(rows, predicted, lambda s, lab, t, want=label: lab == want)}")
    for source in dict.fromkeys(s for s, _, _ in rows):
        print(f"    from {source:<19}{accuracy(rows, predicted, lambda s, lab, t, want=source: s == want)}")
    print(f"  {'overall':<24}{accuracy(rows, predicted, lambda s, lab, t: True)}")
    print("  by window length:")
    for low, high in LENGTH_BUCKETS:
        name = f"{low}..{high - 1} chars"
        print(f"    {name:<22}{accuracy(rows, predicted, lambda s, lab, t, lo=low, hi=high: lo <= len(t) < hi)}")
    confusion = Counter((label, guess) for (_, label, _), guess in zip(rows, predicted, strict=True))
    print("  confusion (label -> predicted): " + ", ".join(f"{a}->{b} {n}" for (a, b), n in sorted(confusion.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000, help="windows per class (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the windows (default 0)")
    parser.add_argument("--calls", type=int, default=2000, help="classify calls per timing batch (default 2000)")
    parser.add_argument("--batches", type=int, default=15, help="timing batches (default 15)")
    args = parser.parse_args()

    router = CodeProseRouter()
    print(f"python {platform.python_version()} ({platform.python_implementation()}), {platform.platform()}")
    weights = (
        f"threshold={router.threshold}, indent_weight={router.indent_weight}, "
        f"word_weight={router.word_weight}, prose_weight={router.prose_weight}"
    )
    print(f"router: CodeProseRouter({weights})\n")
    report_timing(router, args.calls, args.batches)
    report_accuracy(router, args.samples, args.seed)
    report_labelled_prompts(router)
    report_library(router)


def report_labelled_prompts(router: CodeProseRouter) -> None:
    """The shipped labelled set: code and prose scored, mixed prompts against their expected route."""
    text = resources.files("specplay.data").joinpath("router_prompts.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    guesses = [router.classify(row["text"]) for row in rows]
    print(f"\nlabelled set (specplay/data/router_prompts.jsonl, {len(rows)} prompts):")
    for label, expected in (("code", "label"), ("prose", "label"), ("mixed", "route")):
        picked = [(row, guess) for row, guess in zip(rows, guesses, strict=True) if row["label"] == label]
        wrong = [row["kind"] for row, guess in picked if guess != row[expected]]
        right = len(picked) - len(wrong)
        name = "mixed, expected route" if label == "mixed" else label
        print(f"  {name:<24}{right / len(picked):7.1%}  ({right}/{len(picked)}); wrong: {', '.join(wrong) or '-'}")
    scored = [(row["label"], guess) for row, guess in zip(rows, guesses, strict=True) if row["label"] != "mixed"]
    hits = sum(label == guess for label, guess in scored)
    print(f"  {'code + prose':<24}{hits / len(scored):7.1%}  ({hits}/{len(scored)})")
    confusion = Counter((row.get("route", row["label"]), guess) for row, guess in zip(rows, guesses, strict=True))
    mixed = Counter((row["route"], guess) for row, guess in zip(rows, guesses, strict=True) if row["label"] == "mixed")
    print("  confusion, all (label or expected route -> predicted): " + confusion_line(confusion))
    print("  mixed only (expected route -> predicted): " + confusion_line(mixed))


def confusion_line(counts: Counter[tuple[str, str]]) -> str:
    return ", ".join(f"{a}->{b} {n}" for (a, b), n in sorted(counts.items()))


def report_library(router: CodeProseRouter) -> None:
    """The prompts specplay ships, each labelled code or prose."""
    prompts = load_prompts(None, per_category=1000)
    wrong = [p.name for p in prompts if router.classify(p.text) != p.category]
    right = len(prompts) - len(wrong)
    print(f"\nshipped prompt library: {right}/{len(prompts)} right; wrong: {', '.join(wrong) or '-'}")


if __name__ == "__main__":
    main()
