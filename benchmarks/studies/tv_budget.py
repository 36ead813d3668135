"""The mentored-decoding experiment on a real model: what the TV budget does to acceptance, speed
and the text, per drafter, at temperature 0.7.

For each prompt and seed: the target alone, then every drafter at every k and TV budget, all with
EOS ignored, after one untimed warm-up of each model. It reports draft acceptance rate, mean
acceptance length, rounds per request, median end-to-end latency against target-only's, TV spent
and the outputs' log-likelihood per token under the target, writes the table (report.md), every
number (results.json), every run as a session (sessions/), and the texts of one seed side by side
(texts.md, and a review page per prompt: review-story.html, review-edit.html).

    python benchmarks/studies/tv_budget.py --out benchmarks/results/study-smollm2 \\
        --drafter exit15=early-exit:layers=15,head=HEAD --contrast lookup=prompt-lookup \\
        --contrast exit15-untrained=early-exit:layers=15
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from specplay.backends import open_stream, thread_cleanup
from specplay.config.run_config import TARGET, RequestConfig, RunConfig
from specplay.drafters import parse_model
from specplay.engine.events import DoneEvent, StartEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.fidelity.measure import mean_and_se
from specplay.review import review_sessions, to_html
from specplay.runner.session_run import local_token_text, open_writer
from specplay.runner.thread import ModelThread
from specplay.store import load_session

PROMPTS = {
    "story": (
        "Write a short story about two friends, Mara and Tobias, who find an old map in their "
        "grandmother's attic and decide to follow it."
    ),
    "edit": (
        "Rewrite this function so it uses a list comprehension. Keep the name and the docstring.\n\n"
        "def even_squares(numbers):\n"
        '    """The squares of the even numbers, in order."""\n'
        "    result = []\n"
        "    for n in numbers:\n"
        "        if n % 2 == 0:\n"
        "            result.append(n * n)\n"
        "    return result\n"
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2")
    parser.add_argument("--drafter", action="append", default=[], metavar="NAME=SOURCE", help="every k and budget")
    parser.add_argument("--contrast", action="append", default=[], metavar="NAME=SOURCE", help="k 4 only")
    parser.add_argument("--ks", default="4,6,8")
    parser.add_argument("--budgets", default="0,0.5,0.75,1")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    budgets = [float(b) for b in args.budgets.split(",")]
    named = [(v.split("=", 1)[0], v.split("=", 1)[1], True) for v in args.drafter]
    named += [(v.split("=", 1)[0], v.split("=", 1)[1], False) for v in args.contrast]
    config = RunConfig(
        target=parse_model(TARGET, "target", args.target, "target"),
        drafters=tuple(parse_model(name, "drafter", written, "draft") for name, written, _ in named),
        request=RequestConfig(max_tokens=args.max_tokens, ignore_eos=True),
        settings=SpecSettings(sampling=SamplingParams(args.temperature)),
        sessions_dir=args.out / "sessions",
    )
    plan = [(name, k) for name, _, full in named for k in (ks if full else ks[:1])]
    thread = ModelThread(on_exit=thread_cleanup(config))
    rows: list[dict[str, Any]] = []
    try:
        stream = thread.call(lambda: open_stream(config))
        study = Study(config, thread, stream, thread.call(stream.describe), args.max_tokens)
        for prompt_name, prompt in PROMPTS.items():
            ids = tuple(thread.call(lambda p=prompt: stream.encode(p, raw=False)))
            case = (prompt_name, prompt, ids)
            study.one(case, "target", 0)  # warm-up: the target, and each drafter once, untimed
            for name, _ in plan:
                study.one(case, "speculative", 0, name)
            for seed in range(args.seeds):
                rows.append(study.one(case, "target", seed))
                for name, k in plan:
                    for budget in budgets:
                        rows.append(study.one(case, "speculative", seed, name, k, budget))
                        print(f"{prompt_name} seed {seed} {name} k={k} D={budget:g}: {summary(rows[-1])}", flush=True)
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "results.json").write_text(json.dumps({"identity": study.identity, "rows": rows}, indent=1))
        thread.call(stream.close)
    finally:
        thread.close()
    (args.out / "report.md").write_text(report(rows, args), encoding="utf-8")
    (args.out / "texts.md").write_text(texts(rows), encoding="utf-8")
    for prompt, page in review_pages(rows).items():
        (args.out / f"review-{prompt}.html").write_text(page, encoding="utf-8")
    print(f"report in {args.out}")
    return 0


class Study:
    """One request at a time on the model thread, timed end to end, scored, and saved as a session."""

    def __init__(
        self, config: RunConfig, thread: ModelThread, stream: Any, identity: dict[str, Any], max_tokens: int
    ) -> None:
        self.config, self.thread, self.stream, self.identity = config, thread, stream, identity
        self.max_tokens = max_tokens

    def one(
        self,
        case: tuple[str, str, tuple[int, ...]],
        mode: str,
        seed: int,
        route: str | None = None,
        k: int = 4,
        budget: float = 0.0,
    ) -> dict[str, Any]:
        prompt_name, prompt, ids = case
        stream = self.stream
        settings = replace(self.config.settings, k=k, tv_budget=budget, route=route or "auto")
        request = Request(prompt, ids, mode, seed, self.max_tokens, True)  # type: ignore[arg-type]
        request_config = replace(self.config.request, prompt=prompt, seed=seed, mode=mode)  # type: ignore[arg-type]
        writer = open_writer(
            replace(self.config, settings=settings),
            request_config,
            prompt_token_ids=ids,
            lanes=[mode],
            identity=self.identity,
            capabilities=stream.capabilities,
            route_map={},
            token_text=local_token_text(stream),
        )

        def run() -> dict[str, Any]:
            start = time.perf_counter()
            events = list(stream.generate(request, LiveControls(settings, stream.drafters)))
            e2e_ms = 1000 * (time.perf_counter() - start)
            for event in events:
                writer.write_event(mode, event)
            done = events[-1]
            assert isinstance(done, DoneEvent) and isinstance(events[0], StartEvent)
            scores = stream.score(ids, done.token_ids)
            return {"done": done, "e2e_ms": e2e_ms, "ll": statistics.fmean(scores) if scores else None}

        result = self.thread.call(run)
        path = writer.finalize()
        done = result["done"]
        m = done.metrics
        return {
            "prompt": prompt_name,
            "mode": mode,
            "drafter": route,
            "k": k if mode == "speculative" else None,
            "tv_budget": budget if mode == "speculative" else None,
            "seed": seed,
            "e2e_ms": result["e2e_ms"],
            "log_likelihood_per_token": result["ll"],
            "draft_acceptance_rate": m.get("draft_acceptance_rate"),
            "mean_acceptance_length": m.get("mean_acceptance_length"),
            "rounds": m.get("num_spec_steps"),
            "tv_spent": m.get("tv_spent"),
            "text": done.text,
            "session": str(path),
        }


def summary(row: dict[str, Any]) -> str:
    return (
        f"acceptance {row['draft_acceptance_rate']:.2f}, length {row['mean_acceptance_length']:.2f}, "
        f"{row['e2e_ms']:.0f} ms, TV {row['tv_spent']:.2f}, ll {row['log_likelihood_per_token']:.3f}"
    )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "# The TV budget on a real model",
        "",
        f"Target {args.target}, temperature {args.temperature:g}, {args.max_tokens} tokens with EOS ignored, "
        f"{args.seeds} seeds per cell, after a warm-up. Latency is the median end-to-end time of a request; "
        "its ratio is target-only's median over the cell's (above 1: faster). TV spent is per request (the "
        "sum over judged positions of theta d); log-likelihood is per token under the target, mean ± s.e. over seeds.",
    ]
    header = (
        "| drafter | k | D | acceptance | mean acc. length | rounds | e2e ms | vs target-only | TV spent | log-lik |"
    )
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        base = [r for r in rows if r["prompt"] == prompt and r["mode"] == "target"]
        base_ms = _median([r["e2e_ms"] for r in base])
        base_ll, base_se = mean_and_se(r["log_likelihood_per_token"] for r in base)
        lines += ["", f"## {prompt}", "", header, "|" + " --- |" * 10]
        lines.append(
            f"| target-only | – | – | – | – | – | {base_ms:.0f} | 1.00× | – | {base_ll:.3f} ± {base_se or 0:.3f} |"
        )
        cells = dict.fromkeys((r["drafter"], r["k"], r["tv_budget"]) for r in rows if r["prompt"] == prompt)
        for drafter, k, budget in cells:
            if drafter is None:
                continue
            runs = [
                r for r in rows if (r["prompt"], r["drafter"], r["k"], r["tv_budget"]) == (prompt, drafter, k, budget)
            ]
            ms = _median([r["e2e_ms"] for r in runs])
            ll, se = mean_and_se(r["log_likelihood_per_token"] for r in runs)
            lines.append(
                f"| {drafter} | {k} | {budget:g} | {statistics.fmean(r['draft_acceptance_rate'] for r in runs):.1%} "
                f"| {statistics.fmean(r['mean_acceptance_length'] for r in runs):.2f} "
                f"| {statistics.fmean(r['rounds'] for r in runs):.1f} | {ms:.0f} | {base_ms / ms:.2f}× "
                f"| {statistics.fmean(r['tv_spent'] for r in runs):.2f} | {ll:.3f} ± {se or 0:.3f} |"
            )
    return "\n".join(lines) + "\n"


def seed0_runs(rows: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """Seed 0's target-only run, then the first drafter at its first k, budget by budget."""
    seed0 = [r for r in rows if r["prompt"] == prompt and r["seed"] == 0]
    first = next((r for r in seed0 if r["mode"] == "speculative"), None)
    chosen = [r for r in seed0 if r["mode"] == "target"]
    if first is not None:
        chosen += [r for r in seed0 if (r["drafter"], r["k"]) == (first["drafter"], first["k"])]
    return chosen


def texts(rows: list[dict[str, Any]]) -> str:
    lines = ["# Texts at seed 0", ""]
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        lines += [f"## {prompt}", ""]
        for r in seed0_runs(rows, prompt):
            title = "target-only" if r["mode"] == "target" else f"{r['drafter']}, k={r['k']}, D={r['tv_budget']:g}"
            lines += [f"### {title}", "", "```", r["text"].strip(), "```", ""]
    return "\n".join(lines)


def review_pages(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Per prompt, seed 0's runs as a review page (what `specplay export` makes of those sessions)."""
    return {
        prompt: to_html(review_sessions([load_session(Path(r["session"])) for r in seed0_runs(rows, prompt)]))
        for prompt in dict.fromkeys(r["prompt"] for r in rows)
    }


if __name__ == "__main__":
    raise SystemExit(main())
