"""Server addresses as users write them: `http://host:8000/v1` (as for OpenAI clients) or the root."""

from __future__ import annotations

from urllib.parse import urlsplit

from specplay.errors import ConfigError


def server_root(url: str, field: str = "target_url") -> str:
    """The server root, without a trailing slash or `/v1`; a URL without http(s) is refused."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(field, f"takes an http:// or https:// address such as http://gpu-box:8000/v1 (got {url!r})")
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    return text


def named_url(value: str, field: str = "draft_url") -> tuple[str | None, str]:
    """`[NAME=]URL` to (NAME or None, server root)."""
    name, sep, rest = value.partition("=")
    if sep and "://" not in name:
        if not name or not rest:
            raise ConfigError(field, f"takes [NAME=]URL (got {value!r})")
        return name, server_root(rest, field)
    return None, server_root(value, field)
