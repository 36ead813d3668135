"""A saved session as the `specplay run` flags that reproduce it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specplay.store.format import Session


def model_flags(backend: Mapping[str, Any]) -> list[str]:
    """The model flags of a session's backend record. Local folders are saved absolute (a Hugging
    Face id resolves to the same cached snapshot); servers by address, never with the API key,
    which comes again from --api-key or $SPECPLAY_API_KEY."""
    models = dict(backend["models"])
    target = models.pop("target")
    if backend.get("backend") != "vllm":
        flags = ["--target", target["path"]]
        for name, model in models.items():
            flags += ["--draft", f"{name}={model['path']}"]
        return flags
    flags = ["--backend", "vllm", "--target-url", target["source"]]
    if backend.get("mode") == "native":  # speculating servers are routed to by name, as drafters are
        if "route" in target:
            flags[-1] = f"{target['route']}={target['source']}"
        baseline = backend.get("baseline")
        flags += ["--vllm-native", *(["--baseline-url", baseline["source"]] if baseline else [])]
        return flags + [f for name, model in models.items() for f in ("--draft-url", f"{name}={model['source']}")]
    for name, model in models.items():
        # A drafter on this machine's MLX (mixed mode) has a folder; one on a server, an address.
        local = model.get("backend") == "mlx"
        flags += ["--draft", f"{name}={model['path']}"] if local else ["--draft-url", f"{name}={model['source']}"]
    flags += ["--vllm-strategy", backend.get("verify_strategy", "auto")]
    flags += ["--top-logprobs", str(backend.get("top_logprobs", 20))]
    flags += ["--vllm-exact-correction"] if backend.get("exact_correction") else []
    return flags


def replay_flags(session: Session) -> list[str]:
    """Models, prompt, request and the settings in force at the start of the main lane."""
    request, lane = session.header["request"], session.main
    settings, sampling, policy = lane.settings, lane.settings["sampling"], lane.settings["policy_params"]
    flags = model_flags(session.header["backend"])
    flags += ["--prompt", session.prompt, "--mode", request["mode"], "--seed", str(request["seed"])]
    flags += ["--max-tokens", str(request["max_tokens"])]
    flags += ["--raw"] if request.get("raw") else []
    flags += ["--ignore-eos"] if request.get("ignore_eos") else []
    for cls, drafter in request.get("route_map", {}).items():
        flags += ["--route-map", f"{cls}={drafter}"]
    flags += ["--k", str(settings["k"]), "--policy", settings["policy"], "--route", settings["route"]]
    flags += ["--tv", str(settings["tv_budget"]), "--temperature", str(sampling["temperature"])]
    flags += ["--top-p", str(sampling["top_p"]), "--top-k", str(sampling["top_k"]), "--min-p", str(sampling["min_p"])]
    for name, value in policy.items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    return flags
