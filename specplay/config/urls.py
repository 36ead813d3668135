"""Server addresses as users write them: `http://host:8000/v1` (as for OpenAI clients) or the root.

Parsed and checked once, here. A user name and password in an address (`http://me:secret@host`)
are taken out of it: the root that sessions, messages and logs show never holds them, and they
travel only as the request's Authorization header (`credentials`).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

from specplay.errors import ConfigError

_USERINFO = re.compile(r"//[^?#]*@")
"""Everything between the scheme and the last @ (a password may hold / or @ itself)."""


def redacted(url: str) -> str:
    """`url` with any user name and password shown as ***: safe for a message."""
    return _USERINFO.sub("//***@", url)


def server_root(url: str, field: str = "target_url") -> str:
    """The server root, without credentials, a trailing slash or `/v1`; anything that is not an
    http(s) address with a host and a valid port is refused in one line."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    example = "an http:// or https:// address such as http://gpu-box:8000/v1"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(field, f"takes {example} (got {redacted(url)!r})")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(field, f"has a port that is not a number from 1 to 65535 (got {redacted(url)!r})") from None
    if port == 0:
        raise ConfigError(field, f"has a port that is not a number from 1 to 65535 (got {redacted(url)!r})")
    if parts.query or parts.fragment:
        raise ConfigError(field, f"takes {example}, without ?query or #fragment (got {redacted(url)!r})")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host if port is None else f"{host}:{port}"
    root = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return root[: -len("/v1")] if root.endswith("/v1") else root


def credentials(url: str) -> tuple[str, str] | None:
    """The (user, password) written into `url`, if any: for the Authorization header only."""
    parts = urlsplit(url.strip())
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")


def named_url(value: str, field: str = "draft_url") -> tuple[str | None, str]:
    """`[NAME=]URL` to (NAME or None, server root)."""
    name, sep, rest = value.partition("=")
    if sep and "://" not in name:
        if not name or not rest:
            raise ConfigError(field, f"takes [NAME=]URL (got {redacted(value)!r})")
        return name, server_root(rest, field)
    return None, server_root(value, field)


def url_of(value: str) -> str:
    """The URL part of `[NAME=]URL`."""
    name, sep, rest = value.partition("=")
    return rest if sep and "://" not in name else value
