"""A saved session as the `specplay run` flags that reproduce it."""

from __future__ import annotations

from specplay.store.format import Session


def replay_flags(session: Session) -> list[str]:
    """Models, prompt, request and the settings in force at the start of the main lane."""
    models = dict(session.header["backend"]["models"])
    request, lane = session.header["request"], session.main
    settings, sampling, policy = lane.settings, lane.settings["sampling"], lane.settings["policy_params"]
    # Absolute local folders: a Hugging Face id resolves to the same cached snapshot.
    flags = ["--target", models.pop("target")["path"]]
    for name, model in models.items():
        flags += ["--draft", f"{name}={model['path']}"]
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
