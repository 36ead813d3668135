"""The API key, checked once where a command reads it (`--api-key` or $SPECPLAY_API_KEY).

It travels as an HTTP header, `Authorization: Bearer KEY`, so a key that cannot be a header value
(a carriage return from a key file with Windows line endings, another control character, a letter
outside ASCII) is refused here, in one line that never shows the key: left to the HTTP library,
its error quotes the header whole.
"""

from __future__ import annotations

from specplay.errors import SpecplayError

KEY_WITHHELD = (
    "the API key is not sent to servers a session file names, only to those named on the command line: "
    "give --target-url (and --draft-url) to send it; running without it"
)

_NAMED = {"\r": "a carriage return", "\n": "a line feed", "\t": "a tab", " ": "a space"}


def _problem(char: str) -> str | None:
    """What is wrong with one character of a key, without showing it (None: it may be sent)."""
    if "!" <= char <= "~":
        return None
    if char in _NAMED:
        return _NAMED[char]
    if not char.isascii():
        return "a character outside ASCII"
    return f"a control character (U+{ord(char):04X})"


def checked_key(value: str | None, where: str) -> str | None:
    """`value` if it can be sent as a bearer token; None if unset or empty. `where` names
    where it came from (`--api-key`, `$SPECPLAY_API_KEY`) for the one-line refusal."""
    if not value:
        return None
    for position, char in enumerate(value, start=1):
        if (problem := _problem(char)) is not None:
            raise SpecplayError(
                f"{where} cannot be sent as an HTTP header: character {position} of {len(value)} is {problem}; "
                "set it again without it (from a file: \"$(tr -d '\\r\\n' < FILE)\")"
            )
    return value
