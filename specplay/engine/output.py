"""A run's output: committed tokens detokenized as they come, up to the end of text or the limit."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specplay.engine.backend_protocol import Detokenizer
from specplay.engine.events import FinishReason, Token, TokenSource


class Output:
    """The tokens a run has output and their text. A token `ends_text` says ends the text is not
    output; `max_tokens` is the request's limit, or less where the target's context ends first."""

    def __init__(self, detokenizer: Detokenizer, ends_text: Callable[[int], bool], *, max_tokens: int) -> None:
        self.detokenizer = detokenizer
        self.is_eos = ends_text
        """Asked token by token: a server's target may show an end-of-text token mid-run."""
        self.max_tokens = max_tokens
        self.token_ids: list[int] = []
        self.text_parts: list[str] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def remaining(self) -> int:
        return self.max_tokens - len(self.token_ids)

    def add(self, committed: Sequence[tuple[int, TokenSource]]) -> tuple[list[Token], FinishReason | None]:
        """Output committed tokens in order, stopping at the end of text or the limit."""
        out: list[Token] = []
        for token_id, source in committed:
            if self.is_eos(token_id):
                return out, "stop"
            self.detokenizer.add_token(token_id)
            text = self.detokenizer.last_segment
            self.text_parts.append(text)
            self.token_ids.append(token_id)
            out.append(Token(token_id=token_id, text=text, source=source))
            if len(self.token_ids) == self.max_tokens:
                return out, "length"
        return out, None

    def text(self) -> str:
        """The whole text, once the run is over (the detokenizer flushes what it held back)."""
        self.detokenizer.finalize()
        self.text_parts.append(self.detokenizer.last_segment)
        return "".join(self.text_parts)
