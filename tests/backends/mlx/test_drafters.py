"""Drafters made from no model (prompt lookup) or from the target itself (early exit), on real tiny
models: lossless like any drafter, routed like any drafter, and their caches always consistent."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from specplay.backends.mlx import MlxBackend, load_mlx_backend, release_thread
from specplay.backends.mlx.drafting import LoadedEarlyExit, ProposerDrafter, load_drafter
from specplay.backends.mlx.early_exit import ExitHead, save_exit_head
from specplay.backends.mlx.loading import folder_identity, load_model
from specplay.drafters.prompt_lookup import NgramIndex, copy_after
from specplay.engine.events import Event, RoundEvent
from specplay.engine.live_controls import LiveControls
from specplay.engine.loop import SpecEngine
from specplay.engine.request import Request
from specplay.engine.settings import POLICIES, SamplingParams, SpecSettings
from specplay.errors import ConfigError, ModelError, error_line
from specplay.files.outputs import OUTPUTS_RECORD
from specplay.runner.thread import ModelThread
from specplay.store import load_session
from specplay.store.format import SessionError
from specplay.store.replay import local_model
from specplay.store.writer import SessionWriter
from specplay.train.data import Windows, token_stream
from specplay.train.exit_head import ExitHeadConfig, train_exit_head
from specplay.train.model_files import llama_config, write_model
from specplay.train.teacher import fixed_windows
from specplay.train.trainer import TrainConfig
from specplay.ui.stats import LaneTally
from specplay.ui.widgets.tape import round_line
from tests.support.checks import every
from tests.support.distributions import follows
from tests.support.drafters import early_exit, lookup
from tests.support.engine_runs import done, events_from, rounds, run, sources
from tests.support.observed import Observed
from tests.support.prompts import CODE_PROMPT, PROSE_PROMPT
from tests.support.tiny_models import TinyModels

REPEATING_PROMPT = "for i in range(10):\n    total += values[i]\nfor i in range(10):\n    total += values[i]\nfor i in "
PROMPTS = (CODE_PROMPT, PROSE_PROMPT, REPEATING_PROMPT)
ROUTES = ("lookup", "lookup5", "exit")
DEMO_TARGET = Path(__file__).resolve().parents[3] / "specplay" / "models" / "target"


@pytest.fixture(scope="module")
def kinds(tiny: TinyModels) -> MlxBackend:
    """The tiny target with a model drafter and each new kind."""
    drafters = [
        ("near", str(tiny.near)),
        ("lookup", lookup(1, 3)),
        ("lookup5", lookup(5, 5)),  # vLLM's default range: matches seldom, so many rounds draft nothing
        ("exit", early_exit(1)),
    ]
    return load_mlx_backend(str(tiny.target), drafters)


@pytest.fixture(scope="module")
def references(kinds: MlxBackend) -> dict[str, tuple[int, ...]]:
    return {prompt: done(run(kinds, prompt, mode="target", max_tokens=60)).token_ids for prompt in PROMPTS}


def brute_force_proposal(tokens: list[int], n_min: int, n_max: int, k: int) -> list[int]:
    """The definition, O(n^2): the longest suffix (n_max down to n_min) found earlier, its latest
    occurrence, and the k tokens after it, reading on through the proposal itself."""
    end = len(tokens)
    for n in range(n_max, n_min - 1, -1):
        for last in range(end - 2, n - 2, -1):
            if n <= end - 1 and tokens[last - n + 1 : last + 1] == tokens[end - n :]:
                extended = list(tokens)
                for j in range(k):
                    extended.append(extended[last + 1 + j])
                return extended[end:]
    return []


def test_the_index_proposes_what_the_definition_does() -> None:
    rng = random.Random(0)
    for _ in range(1500):
        vocab, n_min = rng.choice([2, 3, 8, 40]), rng.randint(1, 4)
        n_max = rng.randint(n_min, 6)
        index = NgramIndex(n_min, n_max)
        tokens = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
        for _ in range(8):  # one index per generation, extended as tokens are committed
            k = rng.randint(1, 6)
            assert index.propose(tokens, k) == brute_force_proposal(tokens, n_min, n_max, k), (tokens, n_min, n_max)
            tokens += [rng.randrange(vocab) for _ in range(rng.randint(0, 4))]
    # A repeating stretch at the very end proposes whole periods, not just what is left before the end.
    assert copy_after([7, 1, 2, 1, 2], 3, 5) == [1, 2, 1, 2, 1]
    assert NgramIndex(1, 3).propose([5, 1, 2, 3, 1, 2], 4) == [3, 1, 2, 3]


def test_greedy_output_equals_target_only_for_every_kind(
    kinds: MlxBackend, references: dict[str, tuple[int, ...]]
) -> None:
    accepted_by_lookup = empty_rounds = 0
    for prompt in PROMPTS:
        for route in ROUTES:
            for k in (1, 3, 6):
                events = run(kinds, prompt, route=route, k=k, max_tokens=60)
                assert done(events).token_ids == references[prompt], (prompt, route, k)
                if route.startswith("lookup"):
                    accepted_by_lookup += done(events).metrics["num_accepted_draft_tokens"]
                    empty_rounds += sum(r.nodes == 0 for r in rounds(events))
    assert accepted_by_lookup > 50 and empty_rounds > 50  # it proposes, it is accepted, and it sometimes has nothing


def check_caches(observed: Observed, event: RoundEvent) -> None:
    """Every cache holds committed tokens only: KV caches as the model drafter's do, and an n-gram
    index exactly the committed tokens it was last brought up to, never a draft."""
    generation = observed.generations[-1]
    lengths = generation.cache_lengths()
    committed = len(generation.tokens)
    assert lengths["target"] == committed - 1
    assert set(lengths) == {"target", *observed.drafters}
    assert every(length <= committed - 1 for length in lengths.values())
    drafter = generation.drafters[event.drafter]
    if isinstance(drafter, ProposerDrafter):
        index = drafter.proposer
        assert isinstance(index, NgramIndex)
        assert lengths[event.drafter] == committed - len(event.tokens) - 1  # the round's context, but its last token
        fresh = NgramIndex(index.n_min, index.n_max)
        fresh.extend(generation.tokens, index.length)
        assert fresh.last_end == index.last_end
    else:  # the round's drafter lags by one only after a bonus token: it never saw d_k
        assert lengths[event.drafter] == committed - 1 - (event.tokens[-1].source == "bonus")


def test_live_k_policy_and_route_changes_across_kinds(
    kinds: MlxBackend, references: dict[str, tuple[int, ...]]
) -> None:
    observed = Observed(kinds)
    rng = random.Random(1)
    seen: set[str] = set()

    def change(event: Event, controls: LiveControls) -> None:
        if isinstance(event, RoundEvent):
            check_caches(observed, event)
            seen.add(event.drafter)
            if rng.random() < 0.7:
                route = rng.choice(["near", *ROUTES])
                controls.update(k=rng.randint(1, 8), policy=rng.choice(POLICIES), route=route)

    for prompt in (REPEATING_PROMPT, CODE_PROMPT):
        assert (
            done(run(observed, prompt, route="lookup", max_tokens=60, on_event=change)).token_ids == references[prompt]
        )
    assert seen == {"near", *ROUTES}


def test_route_changes_from_another_thread_reach_each_kind(tiny: TinyModels) -> None:
    """As the playground does it: the model thread generates, the UI thread changes k and route
    (each change once the previous one has shown up, however far the model thread runs ahead)."""
    thread = ModelThread(on_exit=release_thread)
    drafters = [("near", str(tiny.near)), ("lookup", lookup(1, 3)), ("exit", early_exit(1))]
    try:
        backend = thread.call(lambda: load_mlx_backend(str(tiny.target), drafters))
        engine = SpecEngine(backend)
        ids = tuple(backend.encode(REPEATING_PROMPT, raw=True))

        def generate(mode: str, controls: LiveControls) -> list[Event]:
            request = Request(REPEATING_PROMPT, ids, mode, max_tokens=400, ignore_eos=True)  # type: ignore[arg-type]
            events = []
            for event in events_from(thread, lambda: engine.generate(request, controls)):
                events.append(event)
                if isinstance(event, RoundEvent) and plan and event.drafter == plan[0][0] and event.index >= 2:
                    plan.pop(0)
                    if plan:
                        controls.update(route=plan[0][0], k=plan[0][1])  # from this (the main) thread
                    else:
                        controls.request_stop()
            return events

        plan: list[tuple[str, int]] = []
        reference = done(generate("target", LiveControls(SpecSettings(route="near"), backend.drafters)))
        plan = [("near", 5), ("lookup", 2), ("exit", 3), ("lookup", 6)]
        events = generate("speculative", LiveControls(SpecSettings(k=5, route="near"), backend.drafters))
    finally:
        thread.close()
    output = done(events)
    assert output.finish_reason == "cancelled" and not plan
    assert output.token_ids == reference.token_ids[: len(output.token_ids)]
    seen = [(r.drafter, r.nodes) for r in rounds(events)]
    assert {route for route, _ in seen} == {"near", "lookup", "exit"}
    assert every(k <= 3 for route, k in seen if route == "exit")


def test_a_round_that_drafts_nothing_is_one_target_step(kinds: MlxBackend, tmp_path: Path) -> None:
    for temperature in (0.0, 1.0):
        events = run(kinds, CODE_PROMPT, route="lookup", k=4, temperature=temperature, max_tokens=60)
        all_rounds = rounds(events)
        empty = [r for r in all_rounds if r.nodes == 0]
        assert empty and len(empty) < len(all_rounds)
        for r in empty:
            assert r.drafted == () and r.positions == () and r.num_accepted == 0
            # The target's own token, as vLLM emits it; no draft was kept for it to be a bonus after.
            assert [t.source for t in r.tokens] == ["target"]
        metrics = done(events).metrics
        # A round is a target pass whether or not it drafted: the mean acceptance length stays
        # tokens per target pass, and per-position acceptance counts only rounds that drafted.
        assert metrics["num_spec_steps"] == len(all_rounds)
        assert metrics["num_draft_tokens"] == sum(r.nodes for r in all_rounds)
        accepted = metrics["num_accepted_draft_tokens"]
        assert metrics["mean_acceptance_length"] == pytest.approx(1 + accepted / len(all_rounds))
        assert metrics["num_drafted_per_position"][0] == len(all_rounds) - len(empty)

    # The playground's statistics and draft tape, and a session, take such rounds as they are.
    tally = LaneTally()
    for event in events:
        tally.add(event, 1.0)
    assert tally.rounds == len(all_rounds) and tally.tokens == len(done(events).token_ids)
    line = round_line(empty[0], ()).plain
    assert "k 0" in line and "nothing drafted" in line and "→" in line  # draft_size: a chain of none
    writer = SessionWriter(
        tmp_path,
        prompt=CODE_PROMPT,
        prompt_token_ids=[],
        lanes=["speculative"],
        backend=kinds.describe(),
        request={},
        capabilities=kinds.capabilities,
    )
    for event in events:
        writer.write_event("speculative", event)
    session = load_session(writer.finalize())
    assert session.main.rounds == all_rounds and session.main.metrics == metrics


def test_policies_take_rounds_with_nothing_drafted(kinds: MlxBackend, references: dict[str, tuple[int, ...]]) -> None:
    for policy in POLICIES:
        events = run(kinds, CODE_PROMPT, route="lookup5", policy=policy, max_tokens=60)
        assert done(events).token_ids == references[CODE_PROMPT]
        assert any(r.nodes == 0 for r in rounds(events))


def test_sampled_prompt_lookup_is_judged_on_the_targets_own_probability(tiny: TinyModels, kinds: MlxBackend) -> None:
    """Its distribution is one-hot on its proposal: p_draft(x) = 1, d = 1 - p_target(x), and lossless
    acceptance is u < p_target(x), p_target as the target computes it without a cache."""
    model = kinds.models["target"].model
    prompt_ids = kinds.encode(REPEATING_PROMPT, raw=True)
    judged = set()
    for seed in range(3):
        events = run(kinds, REPEATING_PROMPT, route="lookup", temperature=1.0, seed=seed, max_tokens=40)
        output = done(events).token_ids
        for r in rounds(events):
            for i, p in enumerate(r.positions):
                assert p.p_draft == 1.0 and p.tv_distance == pytest.approx(1 - p.p_target, abs=1e-5)
                if p.outcome == "unreached":
                    continue
                judged.add(p.outcome)
                assert (p.outcome == "accepted") == (p.uniform < p.p_target)
                context = [*prompt_ids, *output[: r.token_index + i]]
                logits = model(mx.array([context]))[0, -1].astype(mx.float32)
                assert p.p_target == pytest.approx(mx.softmax(logits)[p.token_id].item(), abs=1e-4)
    assert judged == {"accepted", "rejected"}


SAMPLES = 2000


def test_sampled_output_follows_the_target_where_prompt_lookup_proposes(kinds: MlxBackend) -> None:
    """A prompt s + [x] + s makes prompt lookup propose x first; x is chosen where the target gives
    it 0.3..0.7, so both acceptance and the residual matter. The first token over 2,000 seeds must
    follow p_target within 4.5 standard errors on every token of 2% or more (test_statistical's
    tolerance), and must not follow the proposal's one-hot."""
    model = kinds.models["target"].model
    rng = np.random.default_rng(0)
    found = None
    for _ in range(40):
        s = [int(t) for t in rng.integers(10, kinds.vocab_size, size=3)]
        after_s = mx.softmax(model(mx.array([s]))[0, -1].astype(mx.float32))
        candidates = [int(t) for t in mx.argsort(-after_s)[:8].tolist()]
        probs = mx.softmax(model(mx.array([[*s, x, *s] for x in candidates]))[:, -1].astype(mx.float32), axis=-1)
        for x, row in zip(candidates, np.array(probs).astype(np.float64), strict=True):
            if 0.3 <= row[x] <= 0.7:
                found = ([*s, x, *s], x, row)
                break
        if found:
            break
    assert found is not None
    prompt_ids, x, p_target = found
    engine = SpecEngine(kinds)
    settings = SpecSettings(k=1, route="lookup", sampling=SamplingParams(temperature=1.0))
    counts = np.zeros(kinds.vocab_size)
    outcomes = set()
    for seed in range(SAMPLES):
        request = Request("", tuple(prompt_ids), "speculative", seed, 1, True)
        events = list(engine.generate(request, LiveControls(settings, kinds.drafters)))
        (first,) = rounds(events)
        assert first.drafted == (x,)
        outcomes.add(first.positions[0].outcome)
        counts[done(events).token_ids[0]] += 1
    assert outcomes == {"accepted", "rejected"}
    assert follows(counts, p_target)
    assert not follows(counts, np.eye(kinds.vocab_size)[x])


def test_early_exit_after_more_layers_accepts_much_more() -> None:
    """On the shipped 6-layer demo target (trained, so its layers refine one another): exiting after
    5 layers drafts far better than after 1."""
    backend = load_mlx_backend(str(DEMO_TARGET), [("exit1", early_exit(1)), ("exit5", early_exit(5))])
    rates = {}
    for route in ("exit1", "exit5"):
        accepted = drafted = 0
        for prompt in (CODE_PROMPT, PROSE_PROMPT):
            reference = done(run(backend, prompt, mode="target", max_tokens=32)).token_ids
            events = run(backend, prompt, route=route, max_tokens=32)
            assert done(events).token_ids == reference
            accepted += done(events).metrics["num_accepted_draft_tokens"]
            drafted += done(events).metrics["num_draft_tokens"]
        rates[route] = accepted / drafted
    assert rates["exit5"] > rates["exit1"] + 0.25, rates


def test_early_exit_shares_the_targets_weights(tiny: TinyModels, kinds: MlxBackend) -> None:
    exit_ = kinds.loaded["exit"]
    assert isinstance(exit_, LoadedEarlyExit)
    target = kinds.target.model
    assert exit_.model.split.inner is target.model
    assert every(a is b for a, b in zip(exit_.model.split.layers, target.model.layers, strict=True))
    assert exit_.model.own_parameters() == 0
    # Building one more over a loaded target allocates nothing but its (empty) bookkeeping.
    loaded = load_model("target", str(tiny.target))
    mx.eval(loaded.model.parameters())
    before = mx.get_active_memory()
    drafter = load_drafter("exit", early_exit(1), target=loaded)
    assert mx.get_active_memory() - before < 1024
    assert isinstance(drafter, LoadedEarlyExit) and drafter.model.own_parameters() == 0


def test_early_exit_runs_draft_only_as_its_layers_would(kinds: MlxBackend) -> None:
    events = run(kinds, CODE_PROMPT, mode="draft", route="exit", max_tokens=12)
    assert set(sources(events)) == {"draft"}
    # Cached, step by step, it produces what the same layers give without a cache.
    loaded = kinds.loaded["exit"]
    assert isinstance(loaded, LoadedEarlyExit)
    exit_model = loaded.model
    tokens = list(kinds.encode(CODE_PROMPT, raw=True))
    for _ in range(12):
        tokens.append(int(mx.argmax(exit_model(mx.array([tokens]))[0, -1]).item()))
    assert list(done(events).token_ids) == tokens[-12:]


def test_early_exit_on_a_sliding_window_target(tiny: TinyModels) -> None:
    backend = load_mlx_backend(str(tiny.swa_target), [("exit", early_exit(1))])
    reference = done(run(backend, PROSE_PROMPT, mode="target", max_tokens=40)).token_ids
    for k in (2, 5):
        assert done(run(backend, PROSE_PROMPT, route="exit", k=k, max_tokens=40)).token_ids == reference


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: lookup(0, 3), "prompt-lookup:n=0-3 needs n=MIN-MAX with 1 <= MIN <= MAX <= 16"),
        (lambda: lookup(4, 2), "prompt-lookup:n=4-2 needs n=MIN-MAX"),
        (lambda: lookup(1, 17), "prompt-lookup:n=1-17 needs n=MIN-MAX"),
        (lambda: early_exit(0), "early-exit:layers=0 must be a whole number of layers, 1 or more"),
    ],
)
def test_bad_parameters_are_one_line(make: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make()  # type: ignore[operator]
    line = error_line(caught.value)
    assert expected in line and line.startswith("--draft ") and "\n" not in line


@pytest.mark.parametrize("layers", [2, 7])
def test_an_exit_layer_out_of_range_is_refused(tiny: TinyModels, layers: int) -> None:
    with pytest.raises(ModelError) as caught:
        load_mlx_backend(str(tiny.target), [("exit", early_exit(layers))])
    line = error_line(caught.value)
    assert f"layers={layers} is out of range; the target has 2 layers, so use 1..1" in line and "\n" not in line


def test_an_architecture_that_cannot_be_split_is_refused(tiny: TinyModels, tmp_path: Path) -> None:
    gemma = llama_config(64, 2, 512) | {"model_type": "gemma", "head_dim": 16}
    write_model(tmp_path / "gemma", gemma, tiny.root / "tok", seed=0)
    with pytest.raises(ModelError) as caught:
        load_mlx_backend(str(tmp_path / "gemma"), [("exit", early_exit(1))])
    line = error_line(caught.value)
    assert "is a 'gemma' model, which early exit cannot split" in line and "\n" not in line
    load_mlx_backend(str(tmp_path / "gemma"), [("lookup", lookup())])  # lookup needs no layers


def test_prompt_lookup_cannot_run_draft_only(kinds: MlxBackend) -> None:
    with pytest.raises(ConfigError) as caught:
        run(kinds, CODE_PROMPT, mode="draft", route="lookup")
    line = error_line(caught.value)
    assert line.startswith("--mode draft cannot run on 'lookup': prompt lookup only copies") and "\n" not in line


def test_sessions_record_each_drafters_kind_and_parameters(tiny: TinyModels, kinds: MlxBackend) -> None:
    models = kinds.describe()["models"]
    assert models["lookup"] == {"kind": "prompt-lookup", "n_min": 1, "n_max": 3, "source": "prompt lookup, n 1..3"}
    assert models["exit"]["kind"] == "early-exit" and models["exit"]["layers"] == 1
    assert models["exit"]["head"] is None and models["exit"]["target_layers"] == 2
    assert models["near"]["kind"] == "model" and len(models["near"]["weights_sha256"]) == 64
    assert "path" not in models["lookup"] and "path" not in models["exit"]  # nothing replays them as models
    # A replay reads each record back as the drafter the run was given.
    replayed = {name: local_model(name, "drafter", record) for name, record in models.items() if name != "target"}
    assert {name: (d.kind, d.location, dict(d.params)) for name, d in replayed.items()} == {
        "near": ("mlx", str(tiny.near.resolve()), {}),
        "lookup": ("prompt-lookup", "", {"n_min": 1, "n_max": 3}),
        "lookup5": ("prompt-lookup", "", {"n_min": 5, "n_max": 5}),
        "exit": ("early-exit", "", {"layers": 1, "head": None}),
    }
    # Sessions from before drafter kinds name a model drafter by its folder.
    assert local_model("d", "drafter", {"source": "x", "path": "/m"}).location == "/m"
    with pytest.raises(SessionError, match="a drafter of kind 'medusa', which this specplay does not know"):
        local_model("d", "drafter", {"kind": "medusa"})
    described = kinds.describe()["models"]
    assert described["lookup"]["kind"] == "prompt-lookup" and described["near"]["kind"] == "model"


def test_a_trained_exit_head_drafts_losslessly_and_is_checked(tiny: TinyModels, tmp_path: Path) -> None:
    target = load_model("target", str(tiny.target))
    ids = [target.tokenizer.encode(p) for p in (CODE_PROMPT * 8, PROSE_PROMPT * 8, REPEATING_PROMPT * 4)]
    stream = token_stream(ids, 0)
    windows = fixed_windows(ids, 0, 32)
    held_out = Windows([stream], [1.0], seq_len=32, seed=1).batch(0, 4)
    config = ExitHeadConfig(layers=1, train=TrainConfig(steps=30, batch_size=4, seq_len=32, warmup_steps=3))
    result = train_exit_head(target.model, windows, held_out, tmp_path / "head", config, folder_identity(target))
    assert result.held_out_kl_after < result.held_out_kl_before

    backend = load_mlx_backend(str(tiny.target), [("exit", early_exit(1, head=tmp_path / "head"))])
    assert backend.describe()["models"]["exit"]["own_parameters"] == 64 * 64  # the head's, not the target's
    reference = done(run(backend, CODE_PROMPT, mode="target", max_tokens=40)).token_ids
    assert done(run(backend, CODE_PROMPT, route="exit", max_tokens=40)).token_ids == reference
    head = backend.describe()["models"]["exit"]["head"]
    assert head["path"] == str((tmp_path / "head").resolve()) and len(head["sha256"]) == 64
    record = backend.describe()["models"]["exit"]
    assert local_model("exit", "drafter", record).params == {"layers": 1, "head": str((tmp_path / "head").resolve())}

    # Another target of the same width, or another exit layer, is refused in one line.
    with pytest.raises(ModelError, match="was trained on other target weights"):
        load_mlx_backend(str(tiny.swa_target), [("exit", early_exit(1, head=tmp_path / "head"))])
    save_exit_head(tmp_path / "layer2", ExitHead(64), layers=2)
    with pytest.raises(ModelError, match="was trained after layer 2, not 1; use layers=2"):
        load_mlx_backend(str(tiny.target), [("exit", early_exit(1, head=tmp_path / "layer2"))])
    with pytest.raises(ModelError, match="not found"):
        load_mlx_backend(str(tiny.target), [("exit", early_exit(1, head=tmp_path / "nowhere"))])
    # Weights that are not the ones the config was written with (a save cut between the two files).
    save_exit_head(tmp_path / "other", ExitHead(64), layers=1)
    (tmp_path / "head" / "exit_head.safetensors").write_bytes(
        (tmp_path / "other" / "exit_head.safetensors").read_bytes()
    )
    with pytest.raises(ModelError, match=r"is not the file exit_head\.json describes"):
        load_mlx_backend(str(tiny.target), [("exit", early_exit(1, head=tmp_path / "head"))])
    # no partial files left beside a head: only the record of what specplay wrote there
    assert [p.name for p in (tmp_path / "head").glob(".*")] == [OUTPUTS_RECORD]


def test_other_kinds_of_drafter_as_alternatives_leave_the_output_alone(tiny: TinyModels) -> None:
    drafters = [("near", str(tiny.near)), ("lookup", lookup()), ("exit", early_exit(1))]
    backend = load_mlx_backend(str(tiny.target), drafters)
    for route, temperature in itertools.product(("near", "lookup", "exit"), (0.0, 1.0)):
        common = {"route": route, "temperature": temperature, "max_tokens": 40, "seed": 3}
        off, on = run(backend, CODE_PROMPT, **common), run(backend, CODE_PROMPT, counterfactual=True, **common)
        assert (done(on).token_ids, sources(on)) == (done(off).token_ids, sources(off)), (route, temperature)
        metrics = done(on).metrics
        assert set(metrics["counterfactual"]) == {"near", "lookup", "exit"}
