"""A command line as it may be printed or written to a report: secrets replaced."""

from __future__ import annotations

import shlex

from specplay.config.urls import redacted

_URL_FLAGS = ("--target-url", "--draft-url", "--baseline-url")
"""Flags whose value is an address that may hold a login (`http://user:password@host`)."""


def shown_command(argv: list[str], key_placeholder: str) -> str:
    """`argv` quoted for a shell, the --api-key value replaced by `key_placeholder` and logins cut
    from the addresses of the URL flags (nothing else is touched: a prompt may quote a URL)."""
    words: list[str] = []
    for i, word in enumerate(argv):
        flag, equals, value = word.partition("=")
        before = argv[i - 1] if i else ""
        if before == "--api-key":
            word = key_placeholder
        elif flag == "--api-key" and equals:
            word = "--api-key=" + key_placeholder
        elif before in _URL_FLAGS:
            word = redacted(word)
        elif flag in _URL_FLAGS and equals:
            word = f"{flag}={redacted(value)}"
        words.append(word)
    # a placeholder stays unquoted so the printed line expands it when pasted into a shell
    return " ".join(w if w.startswith("$") or w.startswith("--api-key=$") else shlex.quote(w) for w in words)
