"""Suffix decoding (specplay/drafters/suffix.py): its index against its speed budget, and its
speedup against prompt lookup's on prompts seen before and on prompts never seen.

Part 1, the index (`--part index`): 100,000 tokens of memory (the standard library's source,
tokenized by the target's tokenizer, cut into outputs of 256 tokens) built as the drafter builds
it at load (median of 5; budget 1 s), and the proposal of every round along 4,000 held-out tokens
(median and 90th percentile; budget 0.1 ms median), a chain of up to 8 and a tree of width 3, each
round advancing by what the proposal got right plus one; prompt lookup's proposal on the same
rounds beside it, and the suffix chain timed twice (A/A).

Part 2, speedups (`--part speed`; greedy, k 4, the chat template where the target has one, EOS
ignored): the library's first N prompts are run once target-only and saved in a fresh sessions
folder (the history). A run configured from flags as `specplay run` is, with `lookup=prompt-lookup`
and `mem=suffix` (its memory read from that folder as the command starts), then measures three sets:
the same prompts again (repeat), each asked with a small change (changed: "Please " before it), and
the held-out prompts, never run (unseen). Per prompt: target-only, lookup, mem, mem again, lookup
again; the suffix drafter's memory is set back to what it read before each of its runs, so no run
learns from another of the measurement. Printed per set: each drafter's speedup over target-only
(median over prompts), mean acceptance lengths, and mem over lookup (per prompt, the geometric mean
of its two runs over lookup's two: the same target, alternating sides) beside the A/A controls
(mem again over mem, lookup again over lookup). With both repeat and changed measured, a row
"seen" reads them as one set: the prompts seen before, either kind.

    python benchmarks/bench_suffix.py [--target PATH|demo] [--prompts 8] [--max-tokens 96] [--part index|speed|both]
        [--width 3] [--sets repeat,changed,unseen] [--suffix factor=2] [--trees-beside 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import specplay.backends.mlx  # OpenBLAS before mlx.core

# isort: split
from specplay.backends import open_stream
from specplay.backends.mlx import load_mlx_backend
from specplay.backends.mlx.drafting import LoadedProposer
from specplay.cli import main as specplay
from specplay.cli.configure import run_config
from specplay.config.demo import demo_model_paths
from specplay.data.library import library_prompts, read_prompts
from specplay.drafters import EarlierOutput, EarlierOutputs, parse_model
from specplay.drafters.prompt_lookup import NgramIndex
from specplay.drafters.suffix import SuffixMemory, SuffixParams
from specplay.engine.events import DoneEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.tree import TreeShape, tree_shape
from specplay.train.model_files import read_texts, stdlib_sources

HELDOUT = Path(__file__).parent / "data" / "heldout_prompts.jsonl"
MEMORY_TOKENS = 100_000
OUTPUT_TOKENS = 256
REQUEST_TOKENS = 4_000
SMALL_CHANGE = "Please "


def target_path(given: str | None) -> str:
    if given in (None, "demo"):
        return str(demo_model_paths()[0])
    return parse_model("target", "target", given, "target").location


# --- part 1: the index -------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def index_part(target: str) -> None:
    tokenizer = load_mlx_backend(target).tokenizer
    ids: list[int] = []
    for text in read_texts(stdlib_sources()):
        ids += tokenizer.encode(text, add_special_tokens=False)
        if len(ids) >= MEMORY_TOKENS + REQUEST_TOKENS:
            break
    memory_ids, request = ids[:MEMORY_TOKENS], ids[MEMORY_TOKENS : MEMORY_TOKENS + REQUEST_TOKENS]
    outputs = tuple(
        EarlierOutput(tuple(memory_ids[i : i + OUTPUT_TOKENS]), f"output {i // OUTPUT_TOKENS}")
        for i in range(0, len(memory_ids), OUTPUT_TOKENS)
    )
    earlier = EarlierOutputs(folder=Path("."), outputs=outputs, sessions=len(outputs))
    builds = []
    for _ in range(5):
        began = time.perf_counter()
        memory = SuffixMemory(SuffixParams(), earlier)
        builds.append(time.perf_counter() - began)
    print(f"\n## The index: {memory.tokens:,} tokens of memory in {len(outputs)} outputs\n")
    print(f"build (as at load), median of 5: {statistics.median(builds) * 1000:.0f} ms (budget 1000 ms)\n")
    print("| proposer, shape | rounds | median µs | p90 µs | mean tokens proposed | share of them right |")
    print("|---|---|---|---|---|---|")
    chain8 = TreeShape(width=1, nodes=8, depth=8)
    for label, make, shape in (
        ("suffix, chain of 8", memory.open, chain8),
        ("suffix, tree width 3, k 8", memory.open, tree_shape(3, 0, 8)),
        ("prompt lookup n 2..4, 8", lambda: NgramIndex(2, 4), chain8),
        ("suffix, chain of 8 (A/A)", memory.open, chain8),
    ):
        times, proposed, right, rounds = proposal_times(make(), request, shape)
        print(
            f"| {label} | {rounds} | {statistics.median(times) * 1e6:.1f} | {quantile(times, 0.9) * 1e6:.1f} "
            f"| {proposed / rounds:.2f} | {right / max(proposed, 1):.2f} |"
        )


def proposal_times(proposer: Any, request: list[int], shape: TreeShape) -> tuple[list[float], int, int, int]:
    """Each round's proposal timed alone, the context growing as a generation's does: by the
    proposal's first branch as far as it was right, plus the token after it."""
    context = list(request[:64])
    times, proposed, right, rounds = [], 0, 0, 0
    while len(context) < len(request) - shape.depth - 1:
        began = time.perf_counter()
        if hasattr(proposer, "draft"):
            draft = proposer.draft(context, shape)
            tokens = [t for t, parent in zip(draft.tokens, draft.parents, strict=True) if parent == -1][:1]
            node = 0 if draft.tokens else None
            while node is not None:  # the first branch
                below = [n for n in range(node + 1, len(draft.tokens)) if draft.parents[n] == node]
                node = below[0] if below else None
                if node is not None:
                    tokens.append(draft.tokens[node])
        else:
            tokens = proposer.propose(context, shape.depth)
        times.append(time.perf_counter() - began)
        truth = request[len(context) : len(context) + len(tokens)]
        kept = next((i for i, (a, b) in enumerate(zip(tokens, truth, strict=False)) if a != b), len(tokens))
        proposed, right, rounds = proposed + len(tokens), right + kept, rounds + 1
        context += request[len(context) : len(context) + kept + 1]
    return times, proposed, right, rounds


# --- part 2: speedups --------------------------------------------------------------------------


def history(target: str, prompts: list[str], folder: Path, max_tokens: int) -> None:
    """Each prompt run once target-only and saved in `folder`, as a user's earlier runs are."""
    for prompt in prompts:
        argv = ["run", "--target", target, "--mode", "target", "--prompt", prompt, "--max-tokens", str(max_tokens)]
        argv += ["--ignore-eos", "--save", "--sessions-dir", str(folder), "--json"]
        with contextlib.redirect_stdout(io.StringIO()):
            assert specplay(argv) == 0


def generate(engine: SpecEngine, prompt: str, mode: str, route: str, max_tokens: int, width: int) -> DoneEvent:
    settings = SpecSettings(k=4, route=route, width=width, sampling=SamplingParams(0.0))
    chat = engine.backend.tokenizer.has_chat_template  # type: ignore[attr-defined]
    ids = tuple(engine.encode(prompt, raw=not chat))
    request = Request(prompt, ids, mode, 0, max_tokens, ignore_eos=True)  # type: ignore[arg-type]
    last = list(engine.generate(request, LiveControls(settings, engine.drafters)))[-1]
    assert isinstance(last, DoneEvent)
    return last


def forget(engine: SpecEngine, name: str, earlier: EarlierOutputs | None) -> None:
    """The suffix drafter's memory back to what the command read: nothing from the measurement."""
    loaded = engine.backend.loaded[name]  # type: ignore[attr-defined]
    assert isinstance(loaded, LoadedProposer)
    engine.backend.loaded[name] = replace(loaded, proposers=loaded.kind.proposers(loaded.model_config, earlier))  # type: ignore[attr-defined]


Row = dict[str, list[DoneEvent]]
"""One prompt's runs, by side: target, lookup, mem (and tree)."""


def measure_set(
    engine: SpecEngine, earlier: EarlierOutputs | None, prompts: list[str], args: argparse.Namespace
) -> list[Row]:
    rows = []
    # With --trees-beside W, mem's trees of width W run between its chains: lookup, mem, tree, tree,
    # mem, lookup, so each pair's ratio alternates sides.
    order = (
        ["lookup", "mem", "tree", "tree", "mem", "lookup"] if args.trees_beside else ["lookup", "mem", "mem", "lookup"]
    )
    for prompt in prompts:
        runs: dict[str, list[DoneEvent]] = {"target": [], **{name: [] for name in order}}
        runs["target"].append(generate(engine, prompt, "target", "lookup", args.max_tokens, 1))
        for name in order:
            if name != "lookup":
                forget(engine, "mem", earlier)
            width = args.trees_beside if name == "tree" else args.width if name == "mem" else 1
            done = generate(
                engine, prompt, "speculative", "lookup" if name == "lookup" else "mem", args.max_tokens, width
            )
            assert done.token_ids == runs["target"][0].token_ids, "greedy speculative output is the target's"
            runs[name].append(done)
        rows.append(runs)
    return rows


def tps(done: DoneEvent) -> float:
    return float(done.metrics["tokens_per_s"])


def summarize(rows: list[Row]) -> dict[str, Any]:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    def iqr(values: list[float]) -> str:
        return f"{quantile(values, 0.25):.3f}–{quantile(values, 0.75):.3f}"

    over_lookup = [
        math.sqrt(tps(r["mem"][0]) * tps(r["mem"][1]) / (tps(r["lookup"][0]) * tps(r["lookup"][1]))) for r in rows
    ]
    lookup_aa = [tps(r["lookup"][1]) / tps(r["lookup"][0]) for r in rows]
    mem_aa = [tps(r["mem"][1]) / tps(r["mem"][0]) for r in rows]
    speedup = {
        name: [statistics.fmean(tps(d) for d in r[name]) / tps(r["target"][0]) for r in rows]
        for name in ("lookup", "mem")
    }
    mal = {
        name: [statistics.fmean(d.metrics["mean_acceptance_length"] for d in r[name]) for r in rows]
        for name in ("lookup", "mem")
    }
    trees = {}
    if "tree" in rows[0]:
        pairs = {"tree_over_lookup": "lookup", "tree_over_mem": "mem"}
        for key, other in pairs.items():
            values = [
                math.sqrt(tps(r["tree"][0]) * tps(r["tree"][1]) / (tps(r[other][0]) * tps(r[other][1]))) for r in rows
            ]
            trees |= {key: med(values), f"{key}_iqr": iqr(values)}
        tree_aa = [tps(r["tree"][1]) / tps(r["tree"][0]) for r in rows]
        trees |= {"tree_aa": med(tree_aa), "tree_aa_iqr": iqr(tree_aa)}
        trees["tree_mal"] = med(
            [statistics.fmean(d.metrics["mean_acceptance_length"] for d in r["tree"]) for r in rows]
        )
    return trees | {
        "prompts": len(rows),
        "target_tokens_per_s": med([tps(r["target"][0]) for r in rows]),
        "lookup_speedup": med(speedup["lookup"]),
        "mem_speedup": med(speedup["mem"]),
        "lookup_mal": med(mal["lookup"]),
        "mem_mal": med(mal["mem"]),
        "mem_over_lookup": med(over_lookup),
        "mem_over_lookup_iqr": iqr(over_lookup),
        "lookup_aa": med(lookup_aa),
        "lookup_aa_iqr": iqr(lookup_aa),
        "mem_aa": med(mem_aa),
        "mem_aa_iqr": iqr(mem_aa),
    }


def speed_part(target: str, args: argparse.Namespace) -> None:
    library = [p.text for p in library_prompts()[: args.prompts]]
    unseen = [p.text for p in read_prompts(HELDOUT)[: args.prompts]]
    with tempfile.TemporaryDirectory() as folder:
        sessions = Path(folder)
        began = time.perf_counter()
        history(target, library, sessions, args.max_tokens)
        print(
            f"\n## Speedups: history of {len(library)} prompts run target-only in {time.perf_counter() - began:.0f} s"
        )
        mem = f"mem=suffix:{args.suffix}" if args.suffix else "mem=suffix"
        flags = {"target": target, "draft": ["lookup=prompt-lookup", mem], "sessions_dir": str(sessions)}
        config = run_config(flags)
        earlier = config.earlier_outputs
        assert earlier is not None
        print(f"mem: {earlier.describe()}")
        engine = open_stream(config)
        assert isinstance(engine, SpecEngine)
        generate(engine, library[0], "speculative", "lookup", 8, 1)  # warm-up: every first call
        sets = {
            "repeat": library,
            "changed": [SMALL_CHANGE + p[0].lower() + p[1:] for p in library],
            "unseen": unseen,
        }
        results, measured = {}, {}
        for name, prompts in sets.items():
            if name not in args.sets:
                continue
            began = time.perf_counter()
            measured[name] = measure_set(engine, earlier, prompts, args)
            results[name] = summarize(measured[name])
            results[name]["seconds"] = round(time.perf_counter() - began)
        if "repeat" in measured and "changed" in measured:  # the "seen before": both kinds of repeat
            results["seen (repeat + changed)"] = summarize(measured["repeat"] + measured["changed"])
    shape = "chains" if args.width == 1 else f"trees of width {args.width}"
    options = f"suffix:{args.suffix}" if args.suffix else "suffix's defaults"
    print(f"\n(greedy, k 4, {shape} for mem, {options}, {args.max_tokens} tokens, medians over prompts)\n")
    print(
        "| set | prompts | target-only tokens/s | lookup speedup | mem speedup | mean acceptance length lookup / mem "
        "| mem over lookup (IQR) | A/A lookup again (IQR) | A/A mem again (IQR) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['prompts']} | {r['target_tokens_per_s']:.1f} | {r['lookup_speedup']:.2f}× "
            f"| {r['mem_speedup']:.2f}× | {r['lookup_mal']:.2f} / {r['mem_mal']:.2f} "
            f"| {r['mem_over_lookup']:.3f} ({r['mem_over_lookup_iqr']}) | {r['lookup_aa']:.3f} ({r['lookup_aa_iqr']}) "
            f"| {r['mem_aa']:.3f} ({r['mem_aa_iqr']}) |"
        )
    if args.trees_beside:
        print(f"\nmem's trees of width {args.trees_beside} beside its chains (the same prompts, alternating):\n")
        print(
            "| set | mean acceptance length | trees over lookup (IQR) | trees over chains (IQR) "
            "| A/A trees again (IQR) |"
        )
        print("|---|---|---|---|---|")
        for name, r in results.items():
            print(
                f"| {name} | {r['tree_mal']:.2f} | {r['tree_over_lookup']:.3f} ({r['tree_over_lookup_iqr']}) "
                f"| {r['tree_over_mem']:.3f} ({r['tree_over_mem_iqr']}) | {r['tree_aa']:.3f} ({r['tree_aa_iqr']}) |"
            )
    print("\n" + json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", help="a folder or GGUF file (default, or `demo`: the demo target)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per set (default 8)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--width", type=int, default=1, help="mem's tree width (default 1: chains)")
    parser.add_argument("--part", choices=("index", "speed", "both"), default="both")
    parser.add_argument("--sets", default="repeat,changed,unseen", help="which prompt sets to measure")
    parser.add_argument("--suffix", default="", metavar="OPTIONS", help="mem's options (e.g. factor=2)")
    parser.add_argument(
        "--trees-beside",
        type=int,
        default=0,
        metavar="W",
        help="also mem's trees of width W, alternating with its chains",
    )
    args = parser.parse_args()
    args.sets = set(args.sets.split(","))
    target = target_path(args.target)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, target {target}")
    if args.part in ("index", "both"):
        index_part(target)
    if args.part in ("speed", "both"):
        speed_part(target, args)


if __name__ == "__main__":
    main()
