"""`specplay run --backend vllm --vllm-native`: the server speculates, specplay colours and counts."""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

from rich.text import Text

from specplay.cli.backends import api_key, check_models, remote_drafters
from specplay.cli.options import route_map_from, warn
from specplay.cli.render import RunRecord, json_line, legend, make_console, token_text
from specplay.engine.controls import LiveControls
from specplay.engine.loop import Request, SpecEngine
from specplay.engine.settings import SpecSettings
from specplay.errors import ConfigError

FIXED_NOTE = "k, drafter and acceptance rule are fixed by the server's --speculative-config (a restart changes them)"


def check_native(args: argparse.Namespace, settings: SpecSettings) -> None:
    """The flags make sense for a server that speculates on its own (checked before connecting)."""
    check_models(args)
    if args.draft:
        raise ConfigError(
            "vllm_native", "uses each server's own drafter; drop --draft (--draft-url adds a speculating server)"
        )
    if settings.tv_budget > 0 or settings.policy != "fixed":
        raise ConfigError("vllm_native", f"cannot change the TV budget or policy: {FIXED_NOTE}")
    if args.baseline_url:
        from specplay.backends.vllm.urls import server_root

        server_root(args.baseline_url, "baseline_url")


def run_native(args: argparse.Namespace, settings: SpecSettings, prompt: str, directory: Path | None) -> int:
    """Each sample streams live into its session (when saving); the text is printed at the end,
    when the server's per-step account has replaced the chunk-size guess of every token's source."""
    from specplay.backends.vllm.native_run import connect_native
    from specplay.cli.run import stream_lane
    from specplay.runner.thread import ModelThread
    from specplay.store import SessionWriter

    check_native(args, settings)
    if args.baseline_url:
        warn("--baseline-url is for the playground's target-only lane; `specplay run` ignores it")
    thread = ModelThread()
    try:
        more = remote_drafters(args)
        backend = thread.call(lambda: connect_native(args.target_url, more, None, api_key(args), args.timeout))
        engine = SpecEngine(backend, route_map=route_map_from(args) or None)  # routes among the servers
        auto_route = engine.auto_route(prompt)
        token_ids = tuple(backend.encode(prompt, raw=args.raw))
        console = make_console()
        if not args.json:
            console.print(legend(), style="dim")
            console.print(f"native speculation: {FIXED_NOTE}", style="dim")
        for seed in range(args.seed, args.seed + args.samples):
            request = Request(prompt, token_ids, "speculative", seed, args.max_tokens, args.ignore_eos)
            controls = LiveControls(settings, backend.drafters)
            writer = None
            if directory is not None:
                about = {"mode": "speculative", "seed": seed, "max_tokens": args.max_tokens}
                about |= {"ignore_eos": args.ignore_eos, "raw": args.raw, "route_map": engine.route_map}
                writer = SessionWriter(directory, prompt, list(token_ids), ["speculative"], backend.describe(), about)
            try:
                generate = partial(backend.events, request, controls, time.perf_counter, auto_route)
                record = stream_lane(thread, generate, "speculative", controls, console, False, writer)
                if writer is not None:
                    record.session = str(writer.finalize())
            finally:
                if writer is not None:
                    writer.close()
            assert record.done is not None
            server = record.done.metrics["server"]
            if args.json:
                print(json.dumps(json.loads(json_line(record)) | {"vllm": server}), flush=True)
            else:
                console.print(Text().join(token_text(token) for token in record.tokens))
                console.print(native_summary(record), style="dim")
            if record.done.finish_reason == "cancelled":
                return 130
    finally:
        thread.close()
    return 0


def native_summary(record: RunRecord) -> str:
    assert record.done is not None
    metrics, server = record.done.metrics, record.done.metrics["server"]
    spec = server["speculative_decoding"] or {}
    parts = [f"k {server['k'] if server['k'] is not None else '?'} (server)", f"{metrics['num_tokens']} tokens"]
    if metrics["tokens_per_s"]:
        parts.append(f"{metrics['tokens_per_s']:.1f} tokens/s")
    if spec.get("mean_acceptance_length") is not None:
        parts.append(f"mean acceptance length {spec['mean_acceptance_length']:.2f}")
    parts.append("colours exact (per-step metrics)" if server["sources_exact"] else "colours approximate (chunk sizes)")
    if server["counters_contaminated"]:
        parts.append("server counters include other requests")
    if record.session:
        parts.append(f"saved {record.session}")
    return " · ".join(parts)
