"""The playground's model host on real backends: a server's token texts fetched in the background,
and what loading froze out of the collector released on close."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

from specplay.runner.host import ModelHost
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
        assert loaded.wait(30) and host.source is not None
        assert not host.source.capabilities.local_token_text
        token_id = host.source.encode("def", raw=True)[0]
        assert host.decode(token_id) == f"<{token_id}>"  # not yet known: the request is on its way
        assert arrived.wait(30)
        text = host.decode(token_id)
        assert text == host.source.token_text(token_id) and text and "def".startswith(text)
    finally:
        host.close()


def test_a_closed_hosts_models_can_be_collected(tiny: TinyModels, tmp_path: Path) -> None:
    """Loading freezes what it made out of the collector (no full collection walks the models
    during a run); closing thaws it, or a process that opens host after host keeps every model."""
    host = ModelHost(mlx_config(tiny, tmp_path))
    loaded = threading.Event()
    host.load(lambda *_: loaded.set())
    assert loaded.wait(60) and host.source is not None
    assert gc.get_freeze_count() > 0
    source = weakref.ref(host.source)
    host.close()
    del host
    gc.collect()
    assert source() is None
