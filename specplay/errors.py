"""Errors a user can act on. The CLI prints their message as one line, without a traceback."""

from __future__ import annotations

from specplay.display.text import one_line


class SpecplayError(Exception):
    """A problem with the user's input or environment, worded as problem and fix."""


class ConfigError(SpecplayError, ValueError):
    """A setting out of range or inconsistent; `field` names the setting so a CLI can name its flag."""

    def __init__(self, field: str, message: str, flag: str | None = None) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.detail = message
        self.flag = flag
        """The flag that sets it, where the raiser knows it better than its field's name does (a
        rule's knob: engine/rules.py)."""


class ModelError(SpecplayError):
    """A model that cannot be found, loaded or paired with the others."""


_FLAG_OF_FIELD = {
    "draft": "--draft",
    "timeout_s": "--timeout",
    "strategy": "--vllm-strategy",
    "session_args": "SESSION|DIR",  # `specplay router`'s positional arguments
}


def flag_of(field: str) -> str:
    """The command-line flag that sets a configuration field."""
    return _FLAG_OF_FIELD.get(field, "--" + field.replace("_", "-"))


def detail_of(error: BaseException, limit: int = 200) -> str:
    """A library's exception as the detail of a specplay message: one line, at most `limit`
    characters, its type's name when it says nothing."""
    return one_line(str(error))[:limit].strip() or type(error).__name__


def error_line(error: BaseException) -> str:
    """One clear line for any error, safe to print (a server's or a file's text may hold control
    characters): a ConfigError names the flag to change."""
    if isinstance(error, ConfigError):
        text = f"{error.flag or flag_of(error.field)} {error.detail}"
    elif isinstance(error, SpecplayError):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    return one_line(text)
