"""A command line as it may be printed or written to a report: secrets replaced."""

from __future__ import annotations

import shlex

from specplay.config.urls import redacted

_URL_FLAGS = ("--target-url", "--draft-url", "--baseline-url")
"""Flags whose value is an address that may hold a login (`http://user:password@host`)."""


def shown_command(argv: list[str], key_placeholder: str) -> str:
    """`argv` quoted for a shell, the --api-key value replaced by `key_placeholder` (a variable,
    `$NAME`) and logins cut from the addresses of the URL flags (nothing else is touched: a prompt
    may quote a URL). Every word is quoted, a `$` in a model name or argument included; only the
    placeholder expands, in double quotes, when the line is pasted into a shell."""
    expanded = f'"{key_placeholder}"'
    words: list[str] = []
    for i, word in enumerate(argv):
        flag, equals, value = word.partition("=")
        before = argv[i - 1] if i else ""
        if before == "--api-key":
            words.append(expanded)
        elif flag == "--api-key" and equals:
            words.append("--api-key=" + expanded)
        elif before in _URL_FLAGS:
            words.append(shlex.quote(redacted(word)))
        elif flag in _URL_FLAGS and equals:
            words.append(shlex.quote(f"{flag}={redacted(value)}"))
        else:
            words.append(shlex.quote(word))
    return " ".join(words)
