"""A command line as it may be printed or written to a report: secrets replaced."""

from __future__ import annotations

import shlex

from specplay.config.urls import redacted


def shown_command(argv: list[str], key_placeholder: str) -> str:
    """`argv` quoted for a shell, the --api-key value replaced by `key_placeholder` and logins cut from addresses."""
    words: list[str] = []
    for i, word in enumerate(argv):
        if i and argv[i - 1] == "--api-key":
            word = key_placeholder
        elif word.startswith("--api-key="):
            word = "--api-key=" + key_placeholder
        elif "://" in word:
            word = redacted(word)
        words.append(word)
    # a placeholder stays unquoted so the printed line expands it when pasted into a shell
    return " ".join(w if w.startswith("$") or w.startswith("--api-key=$") else shlex.quote(w) for w in words)
