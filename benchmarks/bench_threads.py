"""OpenBLAS's thread count against model size: where a second thread starts to pay (`blas.threads_for`).

Every run is `specplay run --json` in a fresh process, as a user starts it, so OpenBLAS loads and
picks its threads as it does for them. Per model and mode, each pair runs every setting once, in
an order that rotates from pair to pair so drift falls on all alike:

- `1` and `N` (N: the CPUs this process may use): OPENBLAS_NUM_THREADS set by hand;
- `default`: nothing set, specplay's own choice for the loaded target;
- with --control, `1` a second time (`1 again`): what two equal settings read apart here.

A row prints each setting's median tokens/s (the engine's: tokens after the first over the time
since the first), then ratios with their interquartile range over pairs: N over 1 (does a second
thread pay at this size?) and the default over the faster fixed setting (within a few percent of
1 when the default is right).

    python benchmarks/bench_threads.py                              # the ladder, the demo models, SmolLM2
    python benchmarks/bench_threads.py --models smallest,w256 --pairs 8 --control

Models: `smallest` (a 0.9M random llama, width 64 and 13 layers, drafting with its first layer),
random llamas `w128`, `w192`, `w256` (8 layers, a 4,096-token vocabulary, drafting with their
first layer; their later layers damped so the first agrees with the whole often), `demo` (the shipped demo models as
`specplay` opens them) and `smollm2` (as `specplay` opens it once fetched: prompt lookup on its
first library prompt), each at specplay's defaults otherwise (k 4).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specplay.backends.mlx import blas
from specplay.bench.stats import quartiles
from specplay.catalog.models import CATALOG, is_fetched
from specplay.data.library import library_prompts
from specplay.train import model_files

CODE_PROMPT = 'import os\nimport sys\n\n\ndef parse_args(argv):\n    """Parse the command line arguments."""\n'
DAMPING = 0.07
"""How strongly a random target's later layers write into the residual stream: its first layer, the
drafter, then agrees with the whole about half the time, as a trained pair might."""


@dataclass(frozen=True)
class Model:
    name: str
    flags: list[str]
    """`specplay run` model and prompt flags."""
    env: dict[str, str]
    """What the run's environment needs beyond the settings (a cache holding SmolLM2, or none)."""


def random_llama(root: Path, name: str, width: int, layers: int, vocab: int) -> Model:
    folder = root / name
    if not (folder / "model.safetensors").exists():
        tokenizer = root / f"tokenizer-{vocab}"
        if not (tokenizer / "tokenizer.json").exists():
            texts = model_files.read_texts(model_files.stdlib_sources(40))
            model_files.train_tokenizer(texts, tokenizer, vocab_size=vocab)
        config = model_files.llama_config(width, layers, vocab, tie_word_embeddings=False)
        model_files.write_model(folder, config, tokenizer, seed=0, output_scale=4.0)
        model_files.damp_layers(folder, 1, DAMPING)
    flags = ["--target", str(folder), "--draft", "first=early-exit:layers=1", "--prompt", CODE_PROMPT, "--raw"]
    return Model(name, flags, {})


def models(names: list[str], root: Path, empty_cache: Path) -> list[Model]:
    ladder: dict[str, Callable[[], Model]] = {
        "smallest": lambda: random_llama(root, "smallest", 64, 13, 512),
        "w128": lambda: random_llama(root, "w128", 128, 8, 4096),
        "w192": lambda: random_llama(root, "w192", 192, 8, 4096),
        "w256": lambda: random_llama(root, "w256", 256, 8, 4096),
        # No model flags, as `specplay` starts: the demo models while the cache holds no real model...
        "demo": lambda: Model("demo", ["--prompt", CODE_PROMPT], {"SPECPLAY_CACHE_DIR": str(empty_cache)}),
        # ...and SmolLM2 once fetched, on the playground's first prompt.
        "smollm2": lambda: Model("smollm2", ["--prompt", library_prompts()[0].text], {}),
    }
    chosen = []
    for name in names:
        if name not in ladder:
            sys.exit(f"unknown model {name!r}: choose from {', '.join(ladder)}")
        if name == "smollm2" and not is_fetched(CATALOG["smollm2"]):
            print("smollm2: skipped, not fetched (specplay fetch smollm2)")
            continue
        chosen.append(ladder[name]())
    return chosen


def run(model: Model, mode: str, threads: str | None, args: argparse.Namespace) -> dict[str, float]:
    """One fresh `specplay run`: its tokens/s, and the target's parameters and threads it reported."""
    env = {k: v for k, v in os.environ.items() if k not in blas.THREAD_VARIABLES} | model.env
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = threads
    command = [sys.executable, "-m", "specplay", "run", *model.flags, "--mode", mode, "--json", "--ignore-eos"]
    command += ["--max-tokens", str(args.max_tokens)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{model.name} {mode} failed:\n{done.stderr[-2000:]}")
    return {"tokens_per_s": json.loads(done.stdout.splitlines()[-1])["metrics"]["tokens_per_s"]}


def row(model: Model, mode: str, args: argparse.Namespace) -> str:
    cpus = str(blas.default_threads())
    settings: dict[str, str | None] = {"1": "1", cpus: cpus, "default": None}
    if args.control:
        settings["1 again"] = "1"
    names = list(settings)
    speeds: dict[str, list[float]] = {name: [] for name in names}
    run(model, mode, None, args)  # warm the file cache and any conversion, untimed
    for pair in range(args.pairs):
        shift = pair % len(names)
        for name in names[shift:] + names[:shift]:
            speeds[name].append(run(model, mode, settings[name], args)["tokens_per_s"])
    line = f"{model.name:<9} {mode:<12}" + "  ".join(f"{n} {statistics.median(speeds[n]):7.1f}" for n in names)
    line += "  tok/s;  " + _ratio(f"{cpus} over 1", speeds[cpus], speeds["1"])
    best = cpus if statistics.median(speeds[cpus]) > statistics.median(speeds["1"]) else "1"
    line += ";  " + _ratio(f"default over {best}", speeds["default"], speeds[best])
    if args.control:
        line += ";  " + _ratio("1 again over 1", speeds["1 again"], speeds["1"])
    return line


def _ratio(label: str, over: list[float], under: list[float]) -> str:
    q1, median, q3 = quartiles([a / b for a, b in zip(over, under, strict=True)])
    return f"{label} {median:.3f} (IQR {q1:.3f}-{q3:.3f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smallest,w128,w192,w256,demo,smollm2")
    parser.add_argument("--modes", default="speculative,target")
    parser.add_argument("--pairs", type=int, default=5, help="rounds of every setting per row (default 5)")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--control", action="store_true", help="add a second `1`: the A/A spread")
    parser.add_argument("--root", type=Path, help="folder to build the random models in, or reuse")
    args = parser.parse_args()
    print(f"OpenBLAS: {blas.OPENBLAS_PATH or 'none (threads do not apply)'}; CPUs: {blas.default_threads()}")
    small = blas.SMALL_MODEL_PARAMETERS / 1e6
    print(
        f"specplay's rule: one thread below {small:.0f}M target parameters, else one per CPU that other "
        "processes leave free"
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root or Path(scratch)
        empty_cache = Path(scratch) / "empty-cache"
        for model in models(args.models.split(","), root, empty_cache):
            for mode in args.modes.split(","):
                print(row(model, mode, args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
