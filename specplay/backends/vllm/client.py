"""HTTP to one vLLM server: timeouts, retries with backoff when a connection cannot be made, and
errors worded as problem and fix. The API key travels only in the Authorization header; it is
never part of a message, a description or a repr."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from specplay.backends.vllm.errors import VllmError
from specplay.json_text import parse_json

CONNECT_RETRIES = 3
MESSAGE_CHARS = 300
ERROR_BODY_BYTES = 64 * 1024
"""An error reply is read this far at most: enough for any message, not a 10 MB page."""
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
        self._http = httpx.Client(base_url=root, headers=headers, timeout=timeout, auth=auth)

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
                raise VllmError(f"{self.where} failed on {path}: {type(exc).__name__}: {exc}") from None
            if response.status_code >= 400:
                try:
                    text = self._read(path, response, ERROR_BODY_BYTES).decode("utf-8", "replace")
                finally:
                    response.close()
                raise self._status_error(path, response.status_code, text, response.reason_phrase)
            return response
        raise AssertionError("unreachable")

    def _read(self, path: str, response: httpx.Response, limit: int | None = None) -> bytes:
        """The reply's body, within one --timeout for the whole of it (httpx's timeout is per read,
        which a server sending a byte every few seconds never trips); at most `limit` bytes."""
        deadline = time.monotonic() + self.timeout_s
        chunks, size = [], 0
        try:
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise VllmError(f"{self.where} took longer than --timeout {self.timeout_s:g} s to send {path}")
                if limit is not None and size >= limit:
                    break
        except httpx.TimeoutException:
            raise VllmError(f"{self.where} stopped sending its reply to {path} (timeout)") from None
        except httpx.HTTPError as exc:
            raise VllmError(f"{self.where} broke off its reply to {path}: {type(exc).__name__}") from None
        return b"".join(chunks)

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
        Comment lines (keep-alives) are skipped; an error event raises; each event must arrive
        within one --timeout of the one before."""
        response = self._send("POST", path, body)
        deadline = time.monotonic() + self.timeout_s
        try:
            for line in response.iter_lines():
                if time.monotonic() > deadline:
                    raise VllmError(f"{self.where} sent no stream event for --timeout {self.timeout_s:g} s")
                if not line.startswith("data:"):
                    continue
                deadline = time.monotonic() + self.timeout_s
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
        except httpx.TimeoutException:
            raise VllmError(f"{self.where} stopped sending in the middle of a stream (timeout)") from None
        except httpx.HTTPError as exc:
            raise VllmError(f"{self.where} broke off a stream: {type(exc).__name__}") from None
        finally:
            response.close()
