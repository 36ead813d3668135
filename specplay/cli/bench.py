"""`specplay bench`: sweeps over a prompt set that answer "when does speculation pay?"."""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from specplay import __version__
from specplay.backends import blas_warning, open_stream, thread_cleanup
from specplay.bench.execute import BenchPlan, OnProgress, run_bench
from specplay.bench.k_advice import advice_rows, k_advice, k_advice_markdown
from specplay.bench.plots import PLOT_FILES, write_plots
from specplay.bench.report import build_rows, markdown, router_report, to_csv, to_json
from specplay.bench.routes import route_comparison, route_markdown
from specplay.bench.spec_bench_report import spec_bench_entries, spec_bench_markdown
from specplay.bench.sweep import SWEEPS, BenchConfig, Measurement, load_prompts, plan, warm_up_configs
from specplay.cli.configure import comma_floats, given, path_flag, run_config
from specplay.cli.flags import add_backend_flags, add_model_flags, add_raw_flag, add_router_flag
from specplay.cli.render import inform, make_console, warn
from specplay.cli.shown import shown_command
from specplay.cli.stopping import sigterm_stops
from specplay.config.capabilities import capabilities_of
from specplay.config.model_sets import models_named
from specplay.config.run_config import check_models, check_router, remembered_line
from specplay.data.prompt import Prompt
from specplay.drafters import kind_of
from specplay.engine.costs import RoundCosts, measure_costs
from specplay.engine.loop import SpecEngine
from specplay.engine.settings import SamplingParams, SpecSettings
from specplay.engine.stream import EventStream
from specplay.errors import ConfigError, SpecplayError
from specplay.files.outputs import OUT_FIX, check_outputs, claim_outputs, write_output
from specplay.runner.thread import ModelThread

REPORT_FILES = ("report.md", "results.json", "results.csv", *PLOT_FILES)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="sweep k, policies, tree widths, TV budgets, temperatures and routes over prompts"
    )
    add_model_flags(parser)
    add_backend_flags(parser)
    add_router_flag(parser)
    add_raw_flag(parser)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a small sweep (k 2 and 4, the cost policy, a tree of width 2 beside k 4, D 0.5 and 1, temperature 0, "
        "one prompt per category, 32 "
        f"tokens), on the models the other flags give (none: the default models, as every command): {QUICK_TIME}",
    )
    parser.add_argument("--out", default=None, help="report folder (default: bench-<time> in the sessions folder)")
    parser.add_argument(
        "--prompts",
        type=Path,
        help="JSONL of {category, text}, or Spec-Bench's question.jsonl as it is ({question_id, category, turns}: "
        "reported by Spec-Bench's six tasks); default: the shipped library",
    )
    parser.add_argument(
        "--per-category",
        type=int,
        default=None,
        help="prompts per category, the first in file order; of a Spec-Bench file, questions per task, the first "
        "in file order with mt_bench's eight categories taken in turn (default 3, quick 1)",
    )
    parser.add_argument(
        "--sweeps",
        default=None,
        help=f"comma list of the sweeps to run, of {', '.join(SWEEPS)} (default: all; target-only always runs)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="fixed output length, EOS ignored; of a Spec-Bench file, each answer's longest (default 128, quick 32)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="at least 3; 5 when a throughput's CV exceeds 5%%")
    parser.add_argument("--temperatures", default=None, help="comma list (default 0,0.7; quick 0)")
    parser.add_argument(
        "--compare-mlx-lm",
        action="store_true",
        help="also time mlx-lm's own generation of each greedy target-only and fixed-k request",
    )
    parser.set_defaults(command=bench)


def _temperatures(text: str) -> list[float]:
    values = comma_floats(text, "temperatures", "temperatures of 0 or more")
    if not values or not all(0 <= v < math.inf for v in values):
        raise ConfigError("temperatures", f"takes temperatures of 0 or more (got {text!r})")
    return values


def bench(args: argparse.Namespace) -> int:
    flags = given(args)
    config = run_config(flags)
    check_models(config)
    check_router(config)
    if config.native:
        raise ConfigError("vllm_native", "does not apply: the bench sweeps k, policies and budgets, which vLLM fixes")
    if args.compare_mlx_lm and config.backend != "mlx":
        raise ConfigError("compare_mlx_lm", "needs local MLX models; leave out --backend vllm")
    drafters = config.drafter_names
    if not drafters:
        raise ConfigError("draft", "is needed: give at least one drafter")
    if args.repeats < 3:
        raise ConfigError("repeats", f"must be at least 3 (got {args.repeats})")
    temperatures = _temperatures(args.temperatures or ("0" if args.quick else "0,0.7"))
    per_category = (1 if args.quick else 3) if args.per_category is None else args.per_category
    if per_category < 1:
        raise ConfigError("per_category", f"must be at least 1 (got {per_category})")
    prompt_file = load_prompts(args.prompts, per_category)
    prompts, spec_bench = prompt_file.prompts, prompt_file.spec_bench
    sweeps = _sweeps(args.sweeps) if args.sweeps is not None else SWEEPS
    max_tokens = (32 if args.quick else 128) if args.max_tokens is None else args.max_tokens
    if max_tokens < 2:
        raise ConfigError("max_tokens", f"must be at least 2 (got {max_tokens})")
    default_out = config.sessions_dir / f"bench-{datetime.now(UTC).strftime('%Y-%m-%dT%H-%M-%S')}"
    out = path_flag(args.out, "out") if args.out is not None else default_out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecplayError(f"cannot write the report to {out}: {exc.strerror or exc}; choose another --out") from None
    check_outputs(out, REPORT_FILES, OUT_FIX)  # now, not after the measurements
    copy_only = [d.name for d in config.drafters if kind_of(d).cannot_write is not None]
    capabilities = capabilities_of(config)
    configs = plan(
        drafters,
        args.quick,
        copy_only,
        counterfactual=capabilities.counterfactual,
        round_routes=capabilities.round_routes,
        trees=capabilities.trees,
        sweeps=sweeps,
        control=spec_bench,
    )
    if all(c.mode == "target" for c in configs):
        fix = "add k, or give a second --draft for the route sweep"
        raise ConfigError("sweeps", f"{args.sweeps!r} leaves nothing but target-only to run; {fix}")

    def time_mlx_lm(ids: tuple[int, ...], max_tokens: int, drafter: str | None, k: int) -> float | None:
        from specplay.bench.mlx_lm import mlx_lm_tokens_per_s

        assert isinstance(stream, SpecEngine)  # on MLX: checked above
        return mlx_lm_tokens_per_s(stream.backend, ids, max_tokens, drafter, k)

    warm_up = warm_up_configs(drafters, copy_only)
    mlx_lm = time_mlx_lm if args.compare_mlx_lm else None
    bench_plan = BenchPlan(
        configs=configs,
        prompts=prompts,
        temperatures=temperatures,
        repeats=args.repeats,
        max_tokens=max_tokens,
        raw=config.request.raw,
        warm_up=warm_up,
        mlx_lm=mlx_lm,
        ignore_eos=not spec_bench,
        by_prompt=spec_bench,
    )
    if message := blas_warning(config):
        warn(message)
    if line := remembered_line(config):
        inform(line)
    thread = ModelThread(on_exit=thread_cleanup(config))
    measurements: list[Measurement] = []
    planned = [0]
    costs: dict[float, RoundCosts] = {}
    stopped = False
    try:
        stream = thread.call(lambda: open_stream(config))
        with _progress() as on_progress, sigterm_stops():
            try:

                def counted(what: str, done: int, total: int) -> None:
                    planned[0] = total
                    on_progress(what, done, total)

                run_bench(stream, bench_plan, thread.call, counted, measurements)
                on_progress("round costs, for the k advice", len(measurements), len(measurements))
                first = prompts[0].text
                costs = thread.call(lambda: _round_costs(stream, first, temperatures, configs, config.request.raw))
            except KeyboardInterrupt:
                stopped = True
                warn(f"stopped after {len(measurements)} of {planned[0]} requests: writing the report of those")
        about = _about(
            args,
            config,
            identity=thread.call(stream.describe),
            prompts=prompts,
            spec_bench=spec_bench,
            temperatures=temperatures,
            max_tokens=max_tokens,
            measurements=measurements,
        )
        if stopped:
            about["measured"] = f"{len(measurements)} of {planned[0]} requests: stopped part-way, a partial report"
        remote = not stream.capabilities.wall_time_is_speed
        router = router_report(measurements, dict(stream.routing.route_map))
        thread.call(stream.close)
    finally:
        thread.close()

    rows = build_rows(configs, measurements, remote=remote)
    advice = k_advice(configs, rows, measurements, costs)
    routes = route_comparison(configs, rows)
    replacing = (out / "report.md").exists()
    claim_outputs(out, REPORT_FILES, OUT_FIX)
    if replacing:
        warn(f"replacing the bench report in {out}")
    fix = OUT_FIX
    tasks = spec_bench_entries(configs, measurements, prompts, remote) if spec_bench else []
    sections = [*k_advice_markdown(advice), *route_markdown(routes)]
    report = markdown(rows, about, router, remote, spec_bench_markdown(tasks) if spec_bench else None)
    report += "\n".join(sections) + "\n"
    # The measurements first, the report last: a disk that fills part-way keeps what was measured.
    write_output(
        out / "results.json",
        to_json(rows, measurements, about, router, k_advice=advice, routes=routes, spec_bench=tasks),
        fix,
    )
    write_output(out / "results.csv", to_csv(rows), fix)
    write_plots(rows, out)
    write_output(out / "report.md", report, fix)
    print(f"report in {out}: report.md, results.json, results.csv, and three PNG plots", file=sys.stderr)
    return 130 if stopped else 0


def _prompt_name(prompt: Prompt, spec_bench: bool) -> str:
    """category/name; a Spec-Bench question of mt_bench with its own category: mt_bench/81 (writing)."""
    own = f" ({prompt.note})" if spec_bench and prompt.note != prompt.category else ""
    return f"{prompt.category}/{prompt.name}{own}"


def _questions_line(prompts: Sequence[Prompt]) -> str:
    turns = sum(len(p.turns) for p in prompts)
    return (
        f"Spec-Bench questions {{question_id, category, turns}}: {len(prompts)} questions, {turns} turns, each "
        "configuration's later turns answered after its own earlier answers, its caches kept"
    )


QUICK_TIME = (
    "on the demo models about a minute on a 2-core x86-64 CPU (72 s with a draft tree added, measured "
    "2026-12-06); SmolLM2's target step is about 7 times theirs (docs/performance.md), so longer there"
)
PLAIN_EVERY_S = 5.0
"""Where stderr is not a terminal, a progress line at most this often (and at the first request)."""


@contextmanager
def _progress() -> Iterator[OnProgress]:
    """(what runs now, requests done, requests planned) shown as it goes: a bar on a terminal,
    else a line now and then with the time left, so a log or a pipe shows the bench is alive."""
    if sys.stderr.isatty():
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=make_console(), transient=True) as bar:
            task = bar.add_task("bench", total=None)
            yield lambda what, done, total: bar.update(task, description=what, completed=done, total=total)
        return
    start, last = time.monotonic(), [-math.inf]

    def line(what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] < PLAIN_EVERY_S and done < total:
            return
        last[0] = now
        left = f", about {_duration((now - start) / done * (total - done))} left" if 0 < done < total else ""
        print(f"specplay bench: {done}/{total} requests{left} · {what}", file=sys.stderr, flush=True)

    yield line


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _round_costs(
    stream: EventStream, prompt: str, temperatures: Sequence[float], configs: Sequence[BenchConfig], raw: bool
) -> dict[float, RoundCosts]:
    """The round's costs at each temperature (sampling changes the verify pass's work), at the
    first prompt's length, for the k advice; none where the server runs the rounds."""
    if not isinstance(stream, SpecEngine):
        return {}
    rows = advice_rows(configs)
    if not rows:
        return {}
    ids = stream.encode(prompt, raw=raw)
    lossless = SpecSettings().acceptance_rule
    return {t: measure_costs(stream, ids, SamplingParams(temperature=t), lossless, max_rows=rows) for t in temperatures}


def _sweeps(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SWEEPS]
    if not names or unknown:
        raise ConfigError("sweeps", f"takes a comma list of {', '.join(SWEEPS)} (got {text!r})")
    return names


def _about(args, config, identity, prompts, spec_bench, temperatures, max_tokens, measurements) -> dict[str, Any]:
    repeats = max(m.repeat for m in measurements) + 1
    about = {
        "specplay": __version__,
        "machine": f"{platform.platform()}, {platform.machine()}, {__import__('os').cpu_count()} CPUs",
        "python": platform.python_version(),
    }
    if config.local_models:  # MLX ran models here (a vLLM-only bench never loads it)
        import mlx.core as mx
        import mlx_lm

        from specplay.backends.mlx import blas

        about |= {
            "mlx": mx.__version__,
            "mlx_lm": mlx_lm.__version__,
            "blas": blas.OPENBLAS_PATH or "platform default",
            "blas threads": blas.THREADS_CHOSEN,  # every speed here depends on it, and load at start-up lowers it
        }
    return about | {
        "command": shown_command(["specplay", *args.argv], "$SPECPLAY_API_KEY"),
        "prompts": ", ".join(_prompt_name(p, spec_bench) for p in prompts),
        **({"prompt file": _questions_line(prompts)} if spec_bench else {}),
        "prompt format": config.request.prompt_format,
        "temperatures": ", ".join(f"{t:g}" for t in temperatures),
        "output length": f"at most {max_tokens} tokens a turn, ending at the end of text"
        if spec_bench
        else f"{max_tokens} tokens, EOS ignored",
        "repeats": f"{repeats} (seeds 0..{repeats - 1}), after one untimed warm-up of each model",
        "backend": config.backend,
        "model set": models_named(config),
        "models": identity["models"],
    }
