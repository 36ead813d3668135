"""The run configuration: built once from flags, checked before anything loads, and round-tripped
through saved sessions (save, `run --replay`, `tui --open` with changed flags)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from specplay.catalog.models import CATALOG
from specplay.cli import build_parser, main
from specplay.cli import run as run_command
from specplay.cli import tui as tui_command
from specplay.cli.configure import given, run_config
from specplay.config.demo import DEMO_DIR, demo_model_paths
from specplay.config.run_config import RequestConfig, RunConfig, VllmOptions, check
from specplay.drafters import ModelConfig
from specplay.engine.capabilities import Capabilities
from specplay.engine.events import (
    ControlEvent,
    Counterfactual,
    DoneEvent,
    DraftPosition,
    RoundEvent,
    StartEvent,
    StepEvent,
    Token,
)
from specplay.engine.layout import chain
from specplay.engine.rules import RuleParams
from specplay.engine.settings import PolicyParams, SamplingParams, SpecSettings
from specplay.errors import ConfigError
from specplay.store import SessionWriter, load_session
from specplay.store.codec import decode_event, event_record, plain, request_from_record, request_record
from specplay.store.format import SessionError
from specplay.store.replay import session_config
from tests.support.catalog_files import fetched_smollm2
from tests.support.prompts import CODE_PROMPT
from tests.support.tiny_models import TinyModels

DEMO_TARGET, DEMO_BASE = str(DEMO_DIR / "target"), str(DEMO_DIR / "base")
"""Models that exist, where a check past the models' own is tested."""


def parsed(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(list(argv))
    args.argv = list(argv)
    return args


def test_flags_become_a_typed_configuration(tmp_path: Path) -> None:
    for name in ("t", "a", "b"):
        (tmp_path / "m" / name).mkdir(parents=True)
    m = tmp_path / "m"
    args = parsed(
        "run", "--target", f"{m}/t", "--draft", f"a={m}/a", "--draft", f"{m}/b", "--prompt", "hi", "--raw", "--k", "3",
        "--tv", "0.25", "--temperature", "0.5", "--top-k", "7", "--k-max", "6", "--route-map", "prose=a",
        "--seed", "9", "--max-tokens", "12", "--ignore-eos", "--sessions-dir", str(tmp_path),
    )  # fmt: skip
    config = run_config(given(args))
    assert config.target == ModelConfig("target", "target", "mlx", f"{m}/t")
    assert config.drafters == (
        ModelConfig("a", "drafter", "mlx", f"{m}/a"),
        ModelConfig("b", "drafter", "mlx", f"{m}/b"),
    )
    assert config.request == RequestConfig("hi", True, "speculative", 9, 12, True)
    sampling = SamplingParams(temperature=0.5, top_k=7)
    assert config.settings == SpecSettings(
        k=3, sampling=sampling, policy_params=PolicyParams(k_max=6), rule_params=RuleParams(tv_budget=0.25)
    )
    assert config.route_map == {"prose": "a"} and config.sessions_dir == tmp_path  # as given (code: the first, later)
    check(config)


def test_no_model_flags_means_the_demo_models_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPLAY_SESSIONS_DIR", "/elsewhere")
    config = run_config(given(parsed("run", "--prompt", "x")))  # the test run's cache holds no SmolLM2
    target, drafters = demo_model_paths()
    assert config.target.location == str(target) and [d.name for d in config.drafters] == list(drafters)
    assert config.settings == SpecSettings() and config.request == RequestConfig("x")
    assert config.sessions_dir == Path("/elsewhere") and config.backend == "mlx"
    assert config.route_map == {}  # each class to the drafter of its name: base is first, prose is named


def test_no_model_flags_open_on_smollm2_once_it_is_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / CATALOG["smollm2"].file_name).write_bytes(b"half a file")  # a fetch cut short
    assert run_config(given(parsed("run", "--prompt", "x"))).target.location == str(demo_model_paths()[0])
    (tmp_path / "models" / CATALOG["smollm2"].file_name).unlink()
    (tmp_path / "models").rmdir()
    path = fetched_smollm2(tmp_path)
    lookup = ModelConfig("lookup", "drafter", "prompt-lookup", "", {"n_min": 2, "n_max": 4})
    exit_ = ModelConfig("exit", "drafter", "early-exit", "", {"layers": 26, "head": None})
    for argv in ((), ("--target", "smollm2")):  # by default, or by name without --draft
        config = run_config(given(parsed("run", *argv, "--prompt", "x")))
        assert config.target == ModelConfig("target", "target", "gguf", str(path))
        assert config.drafters == (lookup, exit_)
        assert config.route_map == {"code": "lookup", "prose": "none"}  # exit loses on prose: no speculation
        assert "exit measured" in config.route_notes["prose"]
    # the demo models by name; a set's name as --target with drafters of the user's own is its target
    demo = run_config(given(parsed("run", "--target", "demo", "--prompt", "x")))
    assert demo.target.location == str(demo_model_paths()[0]) and [d.name for d in demo.drafters] == ["base", "prose"]
    mine = run_config(given(parsed("run", "--target", "demo", "--draft", "p=prompt-lookup", "--prompt", "x")))
    assert mine.target == demo.target and [d.name for d in mine.drafters] == ["p"]
    assert mine.route_map == {}  # the set's map named the set's drafters
    # the user's route map over the set's; a folder named like a set is that folder
    mapped = run_config(given(parsed("run", "--route-map", "code=exit", "--prompt", "x")))
    assert mapped.route_map == {"code": "exit", "prose": "none"}
    assert set(mapped.route_notes) == {"prose"}  # the set's note on code went with its mapping
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    assert run_config(given(parsed("run", "--target", "demo", "--prompt", "x"))).target.location == str(
        tmp_path / "demo"
    )


def test_vllm_flags_and_the_api_key_stay_out_of_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPLAY_API_KEY", "s3cret")
    urls = ("--backend", "vllm", "--target-url", "http://gpu:8000/v1", "--draft-url", "http://gpu:8001")
    config = run_config(given(parsed("run", *urls, "--draft", "p=/m/p", "--vllm-strategy", "prefixes")))
    assert config.target == ModelConfig("target", "target", "server", "http://gpu:8000")
    assert config.drafters == (
        ModelConfig("draft1", "drafter", "server", "http://gpu:8001"),
        ModelConfig("p", "drafter", "mlx", "/m/p"),
    )
    assert config.vllm.strategy == "prefixes" and config.vllm.api_key == "s3cret"
    assert "s3cret" not in repr(config)
    native = run_config(given(parsed("run", "--backend", "vllm", "--vllm-native", "--target-url", "code=http://g:1")))
    assert native.native and native.drafter_names == ("code",)


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--target-url", "http://g:1"), "--backend is mlx, which takes --target and --draft"),
        (("--backend", "vllm"), "--target-url is required with --backend vllm"),
        (("--backend", "vllm", "--target", "/m"), "--target is for local models"),
        (("--draft", "x=/m"), "--target is needed with --draft"),
        (("--target", "/m", "--target-url", "http://g:1"), "--backend is mlx, which takes --target and --draft"),
        (("--backend", "vllm", "--target", "/m", "--target-url", "http://g:1"), "--target is for local models"),
        (("--vllm-native",), "--vllm-native is for vLLM servers"),
        (("--baseline-url", "http://g:1"), "--baseline-url is for vLLM servers"),
        (("--target", "/m", "--draft", "target=/d"), "cannot name a drafter 'target'"),
        (("--target", "/m", "--draft", "none=/d"), "cannot name a drafter 'none', a route setting"),
        (("--target", DEMO_TARGET, "--draft", f"a={DEMO_BASE}", "--route", "b"), "--route 'b' is not a drafter"),
        (("--target", "/m", "--draft", "a=/d", "--route-map", "poetry=a"), "--route-map names class 'poetry'"),
        (("--target", DEMO_TARGET, "--mode", "draft"), "--draft is needed in draft mode"),
        (("--backend", "vllm", "--target-url", "x", "--vllm-native"), "--target-url takes an http://"),
        (("--backend", "vllm", "--target-url", "http://g:1", "--vllm-native", "--tv", "0.5"), "--vllm-native cannot"),
        (
            ("--backend", "vllm", "--target-url", "http://g:1", "--draft-url", "http://g:2", "--rule", "typical"),
            "--rule typical needs full distributions to account its TV, and this backend reports only the top-K",
        ),
        (
            ("--backend", "vllm", "--target-url", "http://g:1", "--vllm-native", "--rule", "lenience"),
            "--rule lenience cannot run here: k, drafter and acceptance rule are fixed by the server's",
        ),
        (
            ("--backend", "vllm", "--target-url", "http://g:1", "--draft-url", "http://g:2", "--counterfactual"),
            "--counterfactual routes run on the MLX backend only",
        ),
        (
            ("--backend", "vllm", "--target-url", "http://g:1", "--timeout", "0"),
            "--timeout must be a finite number",
        ),
    ],
)
def test_bad_flags_are_one_line_before_anything_loads(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--prompt", "x", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_events_and_the_request_record_round_trip_through_the_codec() -> None:
    top = ((5, 0.5), (6, 0.25))
    position = DraftPosition(1, 0.5, 0.4, 0.1, 0.2, 0.0, "accepted", 0.1, 0.01, top, top)
    tokens = (Token(1, "a", "accepted"), Token(2, "b", "bonus"))
    settings = SpecSettings(
        k=3,
        policy="confidence",
        route="near",
        sampling=SamplingParams(temperature=0.7, top_p=0.9, top_k=5, min_p=0.05),
        policy_params=PolicyParams(k_min=2, k_max=7),
        rule_params=RuleParams(tv_budget=0.5),
    )
    ruled = DraftPosition(1, 0.5, 0.4, 0.1, 0.2, 0.0, "relaxed", accept_probability=1.0, tv_spent=0.05)
    relaxed = settings.changed(rule="typical", typical_epsilon=0.2, typical_delta=0.7, counterfactual=True)
    for event in (
        RoundEvent(0, 0, "near", (1,), chain(1), (position,), 1, tokens, 2.0, 3.0, 1.0, top),
        RoundEvent(
            1,
            2,
            "near",
            (1,),
            chain(1),
            (ruled,),
            1,
            tokens,
            2.0,
            3.0,
            1.0,
            None,
            (Counterfactual("far", (4, 5), 1, 2.5),),
        ),
        StartEvent("speculative", "near", "far", (1, 2), 4, settings),
        StartEvent("speculative", "near", "far", (1, 2), 4, relaxed),
    ):
        assert plain(event) == asdict(event)  # the writer's fast path builds what asdict would
        record = json.loads(json.dumps(event_record("speculative", event)))
        assert decode_event(record["kind"], record["data"]) == event
    metrics = {"num_tokens": 2, "acceptance_per_position": (1.0, 0.5), "counterfactual": {"far": {"x": (1, 2)}}}
    for event in (  # the shapes the writer's fast path must build as asdict does
        DoneEvent("length", (1, 2), "ab", metrics),
        ControlEvent(3, (("k", 3, 4), ("route", "near", "far"))),
        StepEvent(0, None, tokens[0], 1.5),
    ):
        assert plain(event) == asdict(event)
    request = RequestConfig("hi", True, "target", 3, 17, True)
    record = json.loads(json.dumps(request_record(request, {"code": "a"}, source="tui")))
    assert request_from_record(record, "hi") == request and record["route_map"] == {"code": "a"}


def test_a_saved_run_replays_and_opens_with_its_configuration(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = ["--target", str(tiny.target), "--draft", f"near={tiny.near}", "--draft", f"far={tiny.far}"]
    chosen = ["--k", "3", "--tv", "0.2", "--temperature", "0.5", "--seed", "5", "--route", "far"]
    chosen += ["--route-map", "code=far", "--max-tokens", "9", "--raw", "--ignore-eos", "--k-max", "6"]
    chosen += ["--rule", "lenience", "--lenience", "3", "--typical-delta", "0.4", "--counterfactual"]
    argv = ["run", *models, "--prompt", CODE_PROMPT, *chosen, "--save", "--sessions-dir", str(tmp_path)]
    original = run_command.configure(parsed(*argv))
    assert main([*argv, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    session = load_session(Path(first["session"]))

    # The session records the route map as the run resolved it (prose: the first drafter, by default)
    assert original.route_map == {"code": "far"}
    resolved = replace(original, route_map={"code": "far", "prose": "near"})
    saved = session_config(session)
    assert replace(saved, sessions_dir=original.sessions_dir) == resolved  # nothing lost, nothing added

    replayed = run_command.configure(parsed("run", "--replay", session.id, "--sessions-dir", str(tmp_path)))
    assert replayed == resolved
    assert main(["run", "--replay", session.id, "--sessions-dir", str(tmp_path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["token_ids"] == first["token_ids"] and again["sources"] == first["sources"]

    assert original.settings.rule == "lenience" and original.settings.counterfactual
    assert original.settings.rule_params == RuleParams(tv_budget=0.2, lenience=3.0, typical_delta=0.4)
    changed = run_command.configure(parsed("run", "--replay", str(session.path), "--k", "2", "--temperature", "0"))
    assert changed.settings == replace(original.settings, k=2, sampling=SamplingParams(0.0))
    ruled = run_command.configure(parsed("run", "--replay", str(session.path), "--rule", "typical", "--lenience", "2"))
    assert ruled.settings == original.settings.changed(rule="typical", lenience=2.0)
    assert (changed.target, changed.drafters, changed.request) == (original.target, original.drafters, original.request)

    opened, path = tui_command.configure(
        parsed("tui", "--open", session.id, "--sessions-dir", str(tmp_path), "--tv", "0.75")
    )
    assert path == session.path
    assert opened.settings == original.settings.changed(tv_budget=0.75) and opened.drafters == original.drafters
    other_models = ("--target", str(tiny.near), "--draft", f"d={tiny.far}")
    elsewhere, _ = tui_command.configure(parsed("tui", "--open", str(session.path), *other_models))
    assert elsewhere.target.location == str(tiny.near)  # model flags replace the session's models, all of them
    assert [d.name for d in elsewhere.drafters] == ["d"] and elsewhere.settings.route == "auto"
    assert elsewhere.route_map == {} and elsewhere.settings.k == 3  # the session's map named its own drafters

    # A session whose models cannot be read replays on the models given, and only on them.
    lines = session.path.read_text().splitlines()
    header = json.loads(lines[0]) | {"backend": {"backend": "mlx"}}
    nameless = tmp_path / "nameless.jsonl"
    nameless.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(SessionError, match="does not name its models; give them with --target and --draft"):
        run_command.configure(parsed("run", "--replay", str(nameless)))
    given_models = run_command.configure(parsed("run", "--replay", str(nameless), *models))
    assert (given_models.target, given_models.drafters) == (original.target, original.drafters)
    assert given_models.settings == original.settings and given_models.request == original.request


def test_a_vllm_session_names_its_servers_and_folders_never_its_key(tmp_path: Path) -> None:
    backend = {"backend": "vllm", "mode": "inspection", "verify_strategy": "prefixes", "top_logprobs": 8}
    backend |= {"exact_correction": True}
    backend["models"] = {
        "target": {"source": "http://gpu:8000", "path": "http://gpu:8000"},
        "code": {"source": "http://gpu:8001", "path": "http://gpu:8001"},
        "prose": {"backend": "mlx", "path": "/m/prose"},
    }
    request = request_record(RequestConfig("hi", seed=3), {})
    path = SessionWriter(
        tmp_path,
        prompt="hi",
        prompt_token_ids=[1],
        lanes=["speculative"],
        backend=backend,
        request=request,
        capabilities=Capabilities(),
    ).finalize()
    config = session_config(load_session(path))
    assert config == RunConfig(
        target=ModelConfig("target", "target", "server", "http://gpu:8000"),
        drafters=(
            ModelConfig("code", "drafter", "server", "http://gpu:8001"),
            ModelConfig("prose", "drafter", "mlx", "/m/prose"),
        ),
        backend="vllm",
        vllm=VllmOptions(top_logprobs=8, strategy="prefixes", exact_correction=True),
        request=RequestConfig("hi", seed=3),
    )
    native = {"backend": "vllm", "mode": "native", "baseline": {"source": "http://gpu:9"}}
    native["models"] = {"target": {"source": "http://gpu:1", "route": "code"}, "prose": {"source": "http://gpu:2"}}
    path = SessionWriter(
        tmp_path,
        prompt="hi",
        prompt_token_ids=[1],
        lanes=["speculative"],
        backend=native,
        request=request,
        capabilities=Capabilities(),
    ).finalize()
    config = session_config(load_session(path))
    assert config.native and config.drafter_names == ("code", "prose") and config.vllm.baseline_url == "http://gpu:9"
    with pytest.raises(ConfigError, match="cannot relax the acceptance rule"):
        check(replace(config, settings=SpecSettings(rule_params=RuleParams(tv_budget=0.5))))


@pytest.mark.parametrize(
    "source, kind, params",
    [
        ("prompt-lookup", "prompt-lookup", {"n_min": 2, "n_max": 4}),
        ("prompt-lookup:n=2-5", "prompt-lookup", {"n_min": 2, "n_max": 5}),
        ("prompt-lookup:n=4", "prompt-lookup", {"n_min": 4, "n_max": 4}),
        ("early-exit:layers=8", "early-exit", {"layers": 8, "head": None}),
        ("early-exit:layers=3,head=/h", "early-exit", {"layers": 3, "head": "/h"}),
        ("/m/small.gguf", "gguf", {}),
        ("./prompt-lookup", "mlx", {}),
    ],
)
def test_drafter_sources(source: str, kind: str, params: dict[str, object]) -> None:
    config = run_config(given(parsed("run", "--target", "/m/t", "--draft", source, "--prompt", "x")))
    (drafter,) = config.drafters
    assert (drafter.kind, dict(drafter.params)) == (kind, params)
    assert drafter.location == source or kind in ("prompt-lookup", "early-exit")  # built-ins live nowhere
    named = run_config(given(parsed("run", "--target", "/m/t", "--draft", f"mine={source}", "--prompt", "x")))
    assert named.drafters[0].name == "mine" and named.drafters[0].kind == kind


@pytest.mark.parametrize(
    "draft, message",
    [
        ("prompt-lookup:n=3-1", "--draft prompt-lookup:n=3-1 needs n=MIN-MAX with 1 <= MIN <= MAX <= 16"),
        ("prompt-lookup:n=0", "needs n=MIN-MAX"),
        ("prompt-lookup:k=2", "prompt-lookup takes n=MIN-MAX, not k"),
        ("early-exit", "early-exit takes layers=L"),
        ("early-exit:layers=0", "early-exit:layers=0 must be a whole number of layers, 1 or more"),
        ("early-exit:layers=x", "early-exit:layers=x must be a whole number"),
        ("early-exit:layers", "takes KEY=VALUE options"),
    ],
)
def test_bad_drafter_sources_are_one_line(draft: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--target", "/m/t", "--draft", draft, "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_targets_made_of_drafter_kinds_and_unfetched_models_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--target", "prompt-lookup", "--prompt", "x", "--mode", "target"]) == 2
    assert "--target prompt-lookup is a drafter, not a target" in capsys.readouterr().err
    monkeypatch.setenv("SPECPLAY_CACHE_DIR", str(tmp_path))
    assert main(["run", "--target", "smollm2", "--prompt", "x", "--mode", "target"]) == 2
    assert "--target smollm2 is not downloaded yet: `specplay fetch smollm2` gets it (98 MB)" in capsys.readouterr().err
    fetched = tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fetched.parent.mkdir()
    fetched.write_bytes(b"")
    config = run_config(given(parsed("run", "--target", "smollm2", "--prompt", "x")))
    assert config.target == ModelConfig("target", "target", "gguf", str(fetched))
    urls = ["--backend", "vllm", "--target-url", "http://g:1", "--prompt", "x"]
    assert main(["run", *urls, "--draft", "e=early-exit:layers=2"]) == 2
    assert "drafts with the target's own layers: it needs --backend mlx" in capsys.readouterr().err


def test_local_model_paths_are_recorded_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session replayed from another folder must still find its models."""
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    drafts = ["--draft", "a=small.gguf", "--draft", "b=early-exit:layers=2,head=heads/h", "--draft", "c=org/hub-id"]
    config = run_config(given(parsed("run", "--target", "folder", *drafts, "--prompt", "x")))
    a, b, c = config.drafters
    assert config.target.location == str(tmp_path / "folder") and a.location == str(tmp_path / "small.gguf")
    assert b.params["head"] == str(tmp_path / "heads" / "h") and c.location == "org/hub-id"  # a Hugging Face id


def test_the_lossless_rule_goes_by_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`--rule lossless`, as the docs and the panel name it: mentored decoding at TV budget 0; the
    rules' own names work as before."""
    config = run_config(given(parsed("run", "--target", DEMO_TARGET, "--draft", DEMO_BASE, "--rule", "lossless")))
    assert config.settings.rule == "mentored" and config.settings.acceptance_rule.lossless
    base = given(parsed("run", "--target", DEMO_TARGET, "--draft", DEMO_BASE, "--tv", "0.5"))
    assert run_config(base | {"rule": "lossless", "tv_budget": 0.0}).settings.acceptance_rule.lossless
    assert run_config(given(parsed("run", "--rule", "typical"))).settings.rule == "typical"
    assert main(["run", "--target", DEMO_TARGET, "--draft", DEMO_BASE, "--rule", "lossless", "--tv", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err == "specplay: error: --rule lossless keeps --tv at 0: drop --tv, or give --rule mentored\n"
