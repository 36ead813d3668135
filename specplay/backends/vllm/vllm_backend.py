"""The vLLM backend: a target on a vLLM server, drafters on servers or on this machine's MLX."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specplay.backends.vllm.client import VllmClient
from specplay.backends.vllm.connect import PROBE_TEXT, check_same_tokens, connect, tokenize
from specplay.backends.vllm.detok import RemoteDetokenizer, RemoteTokenizer
from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.generation import Strategy, VllmGeneration
from specplay.backends.vllm.remote import RemoteModel
from specplay.config.capabilities import VLLM_INSPECTION
from specplay.config.urls import server_root
from specplay.engine.backend_protocol import Detokenizer, Generation
from specplay.engine.conversation import Exchange, chat_messages, raw_text

TARGET = "target"
MAX_EOS_QUESTIONS = 64
"""A drafter server may stop on any token it likes: the target is asked about this many at most
(a real model has a few EOS ids)."""

if TYPE_CHECKING:  # local drafters run on MLX, loaded only when a configuration has one
    from specplay.backends.vllm.local import LocalDrafter


def drafters_eos(remote: Iterable[RemoteModel], local: Iterable[LocalDrafter]) -> set[int]:
    """The EOS ids the drafters know: those their servers stopped on, their local tokenizers'."""
    served = {token_id for model in remote for token_id in model.eos_token_ids}
    return served | {int(token_id) for drafter in local for token_id in drafter.loaded.tokenizer.eos_token_ids}


class VllmBackend:
    """Inspection mode. Connected once; each `open_generation` is an independent sequence."""

    capabilities = VLLM_INSPECTION

    def __init__(
        self,
        target: RemoteModel,
        *,
        remote: dict[str, RemoteModel],
        local: dict[str, LocalDrafter],
        strategy: Strategy = "auto",
        exact_correction: bool = False,
    ) -> None:
        self.target, self.remote, self.local, self.strategy = target, remote, local, strategy
        self.exact_correction = exact_correction
        """Draw corrections exactly, by rejection from target samples (exact.py)."""
        self.drafters = tuple([*remote, *local])
        self.context_length = target.max_model_len
        self._tokenizer = next(iter(local.values())).loaded.tokenizer if local else None
        self.tokenizer: Any = self._tokenizer or RemoteTokenizer(target.client, target.model)
        self._asked: set[int] = set()
        """Drafters' EOS ids the target has been asked about."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The EOS ids the target showed by stopping on them. Only the target ends its text: a
        drafter's EOS (its tokenizer's, or one its server stopped on) ends its own draft and is a
        guess at the target's, asked of the target once, never taken on the drafter's word."""
        unasked = sorted(drafters_eos(self.remote.values(), self.local.values()) - self._asked)
        for token_id in unasked[: max(0, MAX_EOS_QUESTIONS - len(self._asked))]:
            self._asked.add(token_id)
            self.target.ask_ends_text(token_id)
        return frozenset(self.target.eos_token_ids)

    def describe(self) -> dict[str, Any]:
        """Backend and model identity for session files: addresses and versions, never the API key."""
        models = {TARGET: self.target.describe()}
        models |= {name: model.describe() for name, model in self.remote.items()}
        for name, drafter in self.local.items():
            from specplay.backends.mlx.loading import folder_identity

            models[name] = {"backend": "mlx", **folder_identity(drafter.loaded)}
        return {
            "backend": "vllm",
            "mode": "inspection",
            "verify_strategy": self.strategy,
            "exact_correction": self.exact_correction,
            "top_logprobs": self.target.top_logprobs,
            "models": models,
        }

    def encode(self, prompt: str, raw: bool, earlier: Sequence[Exchange] = ()) -> list[int]:
        client, model = self.target.client, self.target.model
        if not raw:
            messages = chat_messages(prompt, earlier)
            body = {"model": model, "messages": messages, "add_generation_prompt": True}
            try:
                return self.target.tokenize(body)
            except VllmError as error:
                if "chat template" not in str(error).lower():
                    raise
        return tokenize(client, model, raw_text(prompt, earlier), self.target.token_limit)

    def score(self, prompt_token_ids: Sequence[int], token_ids: Sequence[int]) -> list[float]:
        """The target's log-probability, at temperature 1, of each of `token_ids` after the prompt."""
        return self.target.score(prompt_token_ids, token_ids)

    def detokenizer(self) -> Detokenizer:
        if self._tokenizer is not None:
            return self._tokenizer.detokenizer
        return RemoteDetokenizer(self.target.client, self.target.model)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def open_generation(
        self,
        prompt_token_ids: Sequence[int],
        prefill: Sequence[str | None] = (None,),
        previous: Generation | None = None,
    ) -> VllmGeneration:
        """`prefill` and `previous` are ignored: servers fill their caches on the first request,
        and a conversation's earlier turns are in a server's prefix cache where it keeps one."""
        return VllmGeneration(
            target=self.target,
            remote=self.remote,
            local=self.local,
            prompt_token_ids=prompt_token_ids,
            strategy=self.strategy,
            exact_correction=self.exact_correction,
        )

    def close(self) -> None:
        for model in [self.target, *self.remote.values()]:
            model.client.close()


def connect_vllm_backend(
    target_url: str,
    *,
    remote_drafters: Sequence[tuple[str, str]] = (),
    local_drafters: Sequence[tuple[str, str]] = (),
    api_key: str | None = None,
    top_logprobs: int = 20,
    strategy: Strategy = "auto",
    timeout_s: float = 60.0,
    exact_correction: bool = False,
    auth: Mapping[str, tuple[str, str]] | None = None,
) -> VllmBackend:
    """Connect and check every server; load local MLX drafters (call on the MLX thread if any).
    A refusal closes the connections made before it."""
    target_url = server_root(target_url)
    logins = dict(auth or {})  # server root -> (user, password) the address held
    with contextlib.ExitStack() as opened:

        def client(name: str, root: str) -> VllmClient:
            made = VllmClient(name, root, api_key, timeout_s, auth=logins.get(root))
            opened.callback(made.close)
            return made

        target = connect(client(TARGET, target_url), top_logprobs, is_target=True)
        remote = {
            name: connect(client(name, root), top_logprobs, is_target=False)
            for name, root in ((name, server_root(url, "draft_url")) for name, url in remote_drafters)
        }
        local: dict[str, LocalDrafter] = {}
        if local_drafters:
            from specplay.backends.mlx.loading import load_model
            from specplay.backends.vllm.local import LocalDrafter

            local = {name: LocalDrafter(load_model(name, path)) for name, path in local_drafters}
            # Every server's ids reach the local drafters (the target's tokens are their input): an
            # id past their vocabulary would crash MLX, so each server is held to the smallest.
            limit = min(d.vocab_size for d in local.values())
            for model in [target, *remote.values()]:
                model.token_limit = limit
        ids = {f"target ({target_url})": tokenize(target.client, target.model, PROBE_TEXT)}
        ids |= {
            f"drafter {name!r} ({m.client.root})": tokenize(m.client, m.model, PROBE_TEXT) for name, m in remote.items()
        }
        ids |= {f"drafter {name!r} (local)": list(d.loaded.tokenizer.encode(PROBE_TEXT)) for name, d in local.items()}
        check_same_tokens(ids)
        opened.pop_all()  # connected: the backend closes them
    return VllmBackend(target, remote=remote, local=local, strategy=strategy, exact_correction=exact_correction)
