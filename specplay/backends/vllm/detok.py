"""Streaming text of generated tokens when the tokenizer lives on the server."""

from __future__ import annotations

from specplay.backends.vllm.client import VllmClient

_HELD = "\ufffd"  # a character whose bytes have not all arrived yet


class RemoteDetokenizer:
    """Decodes the generated ids so far with the server's /detokenize and hands out the new text;
    text ending in a partial character is held back until its last byte arrives."""

    def __init__(self, client: VllmClient, model: str) -> None:
        self._client, self._model = client, model
        self._ids: list[int] = []
        self._emitted = ""
        self._segment = ""

    def _decode(self) -> str:
        body = self._client.post_json("/detokenize", {"model": self._model, "tokens": self._ids})
        return str(body.get("prompt", "")) if isinstance(body, dict) else ""

    def add_token(self, token: int) -> None:
        self._ids.append(token)
        text = self._decode()
        if text.endswith(_HELD) or not text.startswith(self._emitted):
            self._segment = ""
            return
        self._segment, self._emitted = text[len(self._emitted) :], text

    def finalize(self) -> None:
        text = self._decode() if self._ids else ""
        self._segment = text[len(self._emitted) :] if text.startswith(self._emitted) else ""
        self._emitted = text

    @property
    def last_segment(self) -> str:
        return self._segment


class RemoteTokenizer:
    """Just enough of a tokenizer for views that show single drafted tokens: `decode` through the
    server's /detokenize, remembered per sequence of ids."""

    def __init__(self, client: VllmClient, model: str) -> None:
        self._client, self._model = client, model
        self._known: dict[tuple[int, ...], str] = {}

    def decode(self, token_ids: list[int]) -> str:
        key = tuple(int(t) for t in token_ids)
        if key not in self._known:
            body = self._client.post_json("/detokenize", {"model": self._model, "tokens": list(key)})
            self._known[key] = str(body.get("prompt", "")) if isinstance(body, dict) else ""
        return self._known[key]
