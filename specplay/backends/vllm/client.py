"""HTTP to one vLLM server: timeouts, retries with backoff when a connection cannot be made, and
errors worded as problem and fix. The API key travels only in the Authorization header; it is
never part of a message, a description or a repr."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from specplay.backends.vllm.errors import VllmError
from specplay.config.urls import redacted
from specplay.files.json_text import parse_json

CONNECT_RETRIES = 3
MESSAGE_CHARS = 300
ERROR_BODY_BYTES = 64 * 1024
"""An error reply is read this far at most: enough for any message, not a 10 MB page."""
MAX_REPLY_BYTES = 64 << 20
"""A whole reply, streamed or not: far above any completion's, far below what memory holds."""
MAX_LINE_BYTES = 8 << 20
"""One line of a stream (one event)."""
BACKOFF_S = 0.25


def _error_message(text: str) -> str:
    """vLLM's `{"error": {"message": ...}}`, as it came; else the start of the body."""
    try:
        body = parse_json(text, "the reply")
    except ValueError:
        return _capped(text)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return _capped(str(error["message"]))
        if isinstance(body.get("detail"), str):
            return _capped(body["detail"])
    return _capped(text)


def _capped(text: str) -> str:
    """A server's own words on one line, cut to a readable length (a body can be megabytes)."""
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


class VllmClient:
    def __init__(
        self,
        name: str,
        root: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        retries: int = CONNECT_RETRIES,
        auth: tuple[str, str] | None = None,
    ) -> None:
        """`auth`: a user name and password the address held (basic authentication, in place of
        the key for this server); like the key, never part of a message or a repr."""
        self.name, self.root, self.retries, self.timeout_s = name, root, retries, timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key and auth is None else {}
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        try:
            self._http = httpx.Client(base_url=root, headers=headers, timeout=timeout, auth=auth)
        except UnicodeError:  # the configuration checks keys (config/api_key.py); this names no key either
            raise VllmError(f"the API key for {self.where} holds a character outside ASCII") from None

    def __repr__(self) -> str:
        return f"VllmClient({self.name!r}, {self.root!r})"

    @property
    def where(self) -> str:
        return f"vLLM server {self.name!r} ({self.root})"

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """One request, its reply not yet read; connection failures are retried with backoff
        (nothing was sent)."""
        for attempt in range(self.retries + 1):
            try:
                request = self._http.build_request(method, path, json=body)
                response = self._http.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt < self.retries:
                    time.sleep(BACKOFF_S * 2**attempt)
                    continue
                raise VllmError(
                    f"{self.where} cannot be reached ({type(exc).__name__}); check that `vllm serve` runs "
                    "there and the address and port are right"
                ) from None
            except httpx.TimeoutException:
                raise VllmError(
                    f"{self.where} did not answer {path} in time; the server may be overloaded or stuck "
                    "(raise --timeout, or check the server's log)"
                ) from None
            except httpx.HTTPError as exc:
                # The type only: a library's text can quote the request's headers, the API key among them.
                raise VllmError(f"{self.where} failed on {path}: {type(exc).__name__}") from None
            if 300 <= response.status_code < 400:
                response.close()
                raise self._redirect_error(path, response)
            if response.status_code >= 400:
                try:
                    text = self._read(path, response, cut_at=ERROR_BODY_BYTES).decode("utf-8", "replace")
                finally:
                    response.close()
                raise self._status_error(path, response.status_code, text, response.reason_phrase)
            return response
        raise AssertionError("unreachable")

    def _chunks(self, path: str, response: httpx.Response) -> Iterator[bytes]:
        """The reply's body as it comes, within one --timeout for the whole of it (httpx's timeout
        is per read, which a server sending a byte every few seconds, or streaming without end,
        never trips) and at most MAX_REPLY_BYTES."""
        deadline = time.monotonic() + self.timeout_s
        size = 0
        try:
            for chunk in response.iter_bytes():
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise VllmError(
                        f"{self.where} took longer than --timeout {self.timeout_s:g} s to send {path} "
                        "(raise --timeout for longer generations)"
                    )
                if size > MAX_REPLY_BYTES:
                    raise VllmError(
                        f"{self.where} sent more than {MAX_REPLY_BYTES >> 20} MiB in its reply to {path}; "
                        "is it a vLLM server?"
                    )
                yield chunk
        except httpx.TimeoutException:
            raise VllmError(f"{self.where} stopped sending its reply to {path} (timeout)") from None
        except httpx.HTTPError as exc:
            raise VllmError(f"{self.where} broke off its reply to {path}: {type(exc).__name__}") from None

    def _read(self, path: str, response: httpx.Response, cut_at: int | None = None) -> bytes:
        """The reply's body (see `_chunks`); `cut_at`: only its first bytes (an error page)."""
        chunks, size = [], 0
        for chunk in self._chunks(path, response):
            chunks.append(chunk)
            size += len(chunk)
            if cut_at is not None and size >= cut_at:
                break
        return b"".join(chunks)

    def _lines(self, path: str, response: httpx.Response) -> Iterator[str]:
        """The reply's lines (a stream's), each at most MAX_LINE_BYTES: httpx's own iter_lines
        keeps a line without end in memory."""
        parts: list[bytes] = []  # the line under way, in pieces (joined once: no quadratic copying)
        size = 0
        for chunk in self._chunks(path, response):
            *ended, rest = chunk.split(b"\n")
            if ended:
                ended[0] = b"".join([*parts, ended[0]])
                parts, size = [], 0
                yield from (line.rstrip(b"\r").decode("utf-8", "replace") for line in ended)
            parts.append(rest)
            size += len(rest)
            if size > MAX_LINE_BYTES:
                raise VllmError(f"{self.where} streamed a line longer than {MAX_LINE_BYTES >> 20} MiB on {path}")
        if size:
            yield b"".join(parts).rstrip(b"\r").decode("utf-8", "replace")

    def _redirect_error(self, path: str, response: httpx.Response) -> VllmError:
        """Redirects are not followed: the next address could be another host, and the request
        carries the API key."""
        location = _capped(redacted(response.headers.get("location", ""))) or "no address"
        return VllmError(
            f"{self.where} redirected {path} (HTTP {response.status_code}) to {location}; "
            "if that is the vLLM server, give its address as the URL (specplay does not follow redirects)"
        )

    def _status_error(self, path: str, status: int, text: str, reason: str) -> VllmError:
        message = _error_message(text) or reason
        if status == 401:
            return VllmError(f"{self.where} refused the API key (HTTP 401); pass --api-key or set SPECPLAY_API_KEY")
        if status == 404:
            return VllmError(f"{self.where} has no {path} (HTTP 404); is it a vLLM server, and the URL its root?")
        if status == 400:
            return VllmError(f"{self.where} rejected the request: {message}")
        return VllmError(f"{self.where} answered HTTP {status} on {path}: {message}")

    def _json(self, path: str, response: httpx.Response) -> Any:
        try:
            return parse_json(self._read(path, response), f"{self.where}'s reply to {path}")
        except ValueError:
            raise VllmError(f"{self.where} sent a reply to {path} that is not JSON; is it a vLLM server?") from None
        finally:
            response.close()

    def get_json(self, path: str) -> Any:
        return self._json(path, self._send("GET", path))

    def get_text(self, path: str) -> str:
        response = self._send("GET", path)
        try:
            return self._read(path, response).decode("utf-8", "replace")
        finally:
            response.close()

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return self._json(path, self._send("POST", path, body))

    def post_sse(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Server-sent events of a streamed request, as JSON objects, until `data: [DONE]`.
        Comment lines (keep-alives) are skipped; an error event raises; the whole stream must end
        within one --timeout (`_chunks`), however steadily it comes."""
        response = self._send("POST", path, body)
        try:
            for line in self._lines(path, response):
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                try:
                    event = parse_json(data, f"{self.where}'s stream event")
                except ValueError:
                    raise VllmError(f"{self.where} streamed an event that is not JSON: {data[:120]!r}") from None
                if isinstance(event, dict) and isinstance(event.get("error"), dict):
                    message = _capped(str(event["error"].get("message", event["error"])))
                    raise VllmError(f"{self.where} failed mid-stream: {message}")
                yield event
            raise VllmError(f"{self.where} ended the stream without [DONE]; the server may have died")
        finally:
            response.close()
