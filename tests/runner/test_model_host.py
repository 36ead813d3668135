"""The playground's model host on real backends: a server's token texts fetched in the background,
what loading froze out of the collector released on close, and the thread count fitted to the
load before each run."""

from __future__ import annotations

import ctypes
import gc
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest

from specplay.backends.mlx import blas
from specplay.engine.live_controls import LiveControls
from specplay.runner.host import ModelHost
from specplay.runner.recording import RunRecorder
from specplay.store import load_session
from tests.support.busy import busy_cpu
from tests.support.fake_vllm import FakeVllm
from tests.support.tiny_models import TinyModels
from tests.support.ui_helpers import mlx_config, server_config


def test_a_servers_token_texts_never_hold_up_the_ui(servers: tuple[FakeVllm, FakeVllm], tmp_path: Path) -> None:
    """Drilling into a token asks a remote tokenizer: the view gets the id at once and the text
    when it arrives, never a wait on an HTTP round trip."""
    target, near = servers
    config = server_config(target.url, {"near": near.url}, tmp_path)
    host = ModelHost(config)
    arrived = threading.Event()
    host.on_decoded = arrived.set
    loaded = threading.Event()
    host.load(lambda *_: loaded.set())
    try:
        assert loaded.wait(30) and host.stream is not None
        assert not host.stream.capabilities.local_token_text
        token_id = host.stream.encode("def", raw=True)[0]
        assert host.decode(token_id) == f"<{token_id}>"  # not yet known: the request is on its way
        assert arrived.wait(30)
        text = host.decode(token_id)
        assert text == host.stream.token_text(token_id) and text and "def".startswith(text)
    finally:
        host.close()


def test_a_closed_hosts_models_can_be_collected(tiny: TinyModels, tmp_path: Path) -> None:
    """Loading freezes what it made out of the collector (no full collection walks the models
    during a run); closing thaws it, or a process that opens host after host keeps every model."""
    host = ModelHost(mlx_config(tiny, tmp_path))
    loaded = threading.Event()
    host.load(lambda *_: loaded.set())
    assert loaded.wait(60) and host.stream is not None
    assert gc.get_freeze_count() > 0
    stream = weakref.ref(host.stream)
    host.close()
    del host
    gc.collect()
    assert stream() is None


@pytest.mark.skipif(
    blas.OPENBLAS_PATH is None or blas.user_threads() is not None or blas.default_threads() < 2,
    reason="specplay fits OpenBLAS's thread count where it chose it, and takes a thread off only where there are two",
)
def test_a_run_fits_the_thread_count_to_load_that_began_after_loading_and_its_session_says_so(
    tiny: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A playground left open while other work starts: its next run takes a thread off the count
    as it starts, and that run's session records the count it ran with."""
    library = ctypes.CDLL(blas.OPENBLAS_PATH)
    before = library.openblas_get_num_threads()
    for name in ("THREADS_CHOSEN", "_FITTED_TO"):
        monkeypatch.setattr(blas, name, getattr(blas, name))  # put back after the test
    monkeypatch.setattr(blas, "SMALL_MODEL_PARAMETERS", 0)  # the tiny target's count follows the load
    config = mlx_config(tiny, tmp_path, prompt="def f(x):", raw=True, max_tokens=8)
    host = ModelHost(config)
    loaded, ended, described = threading.Event(), threading.Event(), {}

    def on_loaded(stream: Any, identity: dict[str, Any], error: BaseException | None) -> None:
        described.update(identity)
        loaded.set()

    host.load(on_loaded)
    try:
        assert loaded.wait(60) and host.stream is not None
        stream = host.stream
        recorder = RunRecorder(
            config,
            prompt="def f(x):",
            lanes=("speculative",),
            identity=described,
            capabilities=stream.capabilities,
            route_map=stream.routing.route_map,
            token_text=None,
            on_unsaved=lambda why: None,
        )
        with busy_cpu():
            controls = {"speculative": LiveControls(config.settings, stream.drafters)}
            host.start(
                config.request, controls, lambda lane, event, *_: recorder.record(lane, event), lambda _: ended.set()
            )
            assert ended.wait(60)
        path, _, failed = recorder.finish(None)
    finally:
        host.close()
        library.openblas_set_num_threads(before)
    assert path is not None and not failed
    threads = load_session(path).header["backend"]["blas_threads"]
    assert "busy as the run started" in threads and int(threads.split()[0]) <= blas.default_threads() - 1, threads
