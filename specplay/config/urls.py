"""Server addresses as users write them: `http://host:8000/v1` (as for OpenAI clients) or the root.

Parsed and checked once, here. A user name and password in an address (`http://me:secret@host`)
are taken out of it: the root that sessions, messages and logs show never holds them, and they
travel only as the request's Authorization header (`credentials`).
"""

from __future__ import annotations

import ipaddress
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
    http(s) address with a valid host and port is refused in one line."""
    text = url.strip().rstrip("/")
    shown = repr(redacted(url))
    example = "an http:// or https:// address such as http://gpu-box:8000/v1"
    if any(c.isspace() or not c.isprintable() for c in text):
        raise ConfigError(field, f"holds a space or control character; give {example} (got {shown})")
    try:
        parts = urlsplit(text)
    except ValueError:  # an unclosed [ of an IPv6 address, among others
        raise ConfigError(field, f"takes {example} (got {shown})") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(field, f"takes {example} (got {shown})")
    if parts.query or parts.fragment:
        raise ConfigError(field, f"takes {example}, without ?query or #fragment (got {shown})")
    host, port = _host_port(parts.netloc.rpartition("@")[2], field, shown)
    netloc = host if port is None else f"{host}:{port}"
    root = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return root[: -len("/v1")] if root.endswith("/v1") else root


_NETLOC = re.compile(r"(?P<host>\[[^\]]*\]|[^:\[\]]*)(?::(?P<port>[^:]*))?")
_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?")
"""A host name as DNS writes it: labels of letters, digits, - and _ (a name in another script
goes in its ASCII form, xn--...)."""


def _host_port(netloc: str, field: str, shown: str) -> tuple[str, int | None]:
    """The host (an IPv6 address in brackets) and port of an address's `host:port`, each checked
    whole: nothing after an IPv6 address's ], a port of digits only, 1 to 65535."""
    match = _NETLOC.fullmatch(netloc)
    if match is None or not match["host"]:
        raise ConfigError(
            field, f"takes an http:// or https:// address with a host, such as http://gpu-box:8000/v1 (got {shown})"
        )
    host = match["host"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ConfigError(
                field, f"has an IPv6 address that is not one, e.g. http://[::1]:8000 (got {shown})"
            ) from None
    elif _HOST_NAME.fullmatch(host) is None:
        raise ConfigError(field, f"has a host name that is not one (letters, digits, - and . in ASCII) (got {shown})")
    port = match["port"]
    if port is None or port == "":
        return host.lower(), None
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise ConfigError(field, f"has a port that is not a number from 1 to 65535 (got {shown})")
    return host.lower(), int(port)


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
