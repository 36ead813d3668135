"""`specplay run --backend vllm --vllm-native`: the server speculates, specplay colours and counts."""

from __future__ import annotations

import argparse
import json

from rich.text import Text

from specplay.cli.backends import api_key, check_models
from specplay.cli.options import warn
from specplay.cli.render import legend, make_console
from specplay.engine.settings import SpecSettings
from specplay.errors import ConfigError
from specplay.palette import SOURCE_STYLES, visible

FIXED_NOTE = "k, drafter and acceptance rule are fixed by the server's --speculative-config (a restart changes them)"


def run_native(args: argparse.Namespace, settings: SpecSettings, prompt: str) -> int:
    from specplay.backends.vllm.client import VllmClient
    from specplay.backends.vllm.connect import tokenize
    from specplay.backends.vllm.detok import RemoteDetokenizer
    from specplay.backends.vllm.native import NativeServer
    from specplay.backends.vllm.urls import server_root

    check_models(args)
    if args.draft or args.draft_url:
        raise ConfigError("vllm_native", "uses the server's own drafter; drop --draft / --draft-url")
    if settings.tv_budget > 0 or settings.policy != "fixed":
        raise ConfigError("vllm_native", f"cannot change the TV budget or policy: {FIXED_NOTE}")
    if args.save:
        warn("--save is not supported with --vllm-native yet; nothing is saved")
    client = VllmClient("target", server_root(args.target_url), api_key(args), args.timeout)
    try:
        server = NativeServer(client)
        if args.raw:
            token_ids = tokenize(client, server.model, prompt)
        else:
            from specplay.backends.vllm.backend import VllmBackend
            from specplay.backends.vllm.remote import RemoteModel

            token_ids = VllmBackend(RemoteModel(client, server.model), {}, {}).encode(prompt, raw=False)
        console = make_console()
        if not args.json:
            console.print(legend(), style="dim")
            console.print(f"native speculation: {FIXED_NOTE}", style="dim")
        for seed in range(args.seed, args.seed + args.samples):
            result = server.generate(token_ids, settings.sampling, seed, args.max_tokens, args.ignore_eos)
            if args.json:
                print(json.dumps(result.to_json() | {"seed": seed, "server": server.describe()}), flush=True)
                continue
            text = Text()
            detokenizer = RemoteDetokenizer(client, server.model)
            for token, source in zip(result.token_ids, result.sources, strict=False):
                detokenizer.add_token(token)
                text.append(visible(detokenizer.last_segment), style=SOURCE_STYLES[source])
            console.print(text)
            spec = result.spec_metrics or {}
            parts = [f"k {result.k if result.k is not None else '?'} (server)", f"{len(result.token_ids)} tokens"]
            if result.tokens_per_s:
                parts.append(f"{result.tokens_per_s:.1f} tokens/s")
            if spec.get("mean_acceptance_length") is not None:
                parts.append(f"mean acceptance length {spec['mean_acceptance_length']:.2f}")
            parts.append("colours exact (per-step metrics)" if result.exact else "colours approximate (chunk sizes)")
            if result.counters_contaminated:
                parts.append("server counters include other requests")
            console.print(" · ".join(parts), style="dim")
    finally:
        client.close()
    return 0
