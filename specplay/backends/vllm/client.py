"""HTTP to one vLLM server: timeouts, retries with backoff when a connection cannot be made, and
errors worded as problem and fix. The API key travels only in the Authorization header; it is
never part of a message, a description or a repr."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from specplay.backends.vllm.errors import VllmError

CONNECT_RETRIES = 3
BACKOFF_S = 0.25


def _error_message(response: httpx.Response) -> str:
    """vLLM's `{"error": {"message": ...}}`, as it came; else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if isinstance(body.get("detail"), str):
            return body["detail"]
    return " ".join(response.text.split())[:300]


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
        self.name, self.root, self.retries = name, root, retries
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

    def _send(self, method: str, path: str, body: Any = None, stream: bool = False) -> httpx.Response:
        """One request; connection failures are retried with backoff (nothing was sent)."""
        for attempt in range(self.retries + 1):
            try:
                request = self._http.build_request(method, path, json=body)
                response = self._http.send(request, stream=stream)
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
                if stream:
                    response.read()
                    response.close()
                raise self._status_error(path, response)
            return response
        raise AssertionError("unreachable")

    def _status_error(self, path: str, response: httpx.Response) -> VllmError:
        status, message = response.status_code, _error_message(response)
        if status == 401:
            return VllmError(f"{self.where} refused the API key (HTTP 401); pass --api-key or set SPECPLAY_API_KEY")
        if status == 404:
            return VllmError(f"{self.where} has no {path} (HTTP 404); is it a vLLM server, and the URL its root?")
        if status == 400:
            return VllmError(f"{self.where} rejected the request: {message}")
        return VllmError(f"{self.where} answered HTTP {status} on {path}: {message}")

    def _json(self, path: str, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise VllmError(f"{self.where} sent a reply to {path} that is not JSON; is it a vLLM server?") from None

    def get_json(self, path: str) -> Any:
        return self._json(path, self._send("GET", path))

    def get_text(self, path: str) -> str:
        return self._send("GET", path).text

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return self._json(path, self._send("POST", path, body))

    def post_sse(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Server-sent events of a streamed request, as JSON objects, until `data: [DONE]`.
        Comment lines (keep-alives) are skipped; an error event raises."""
        response = self._send("POST", path, body, stream=True)
        try:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise VllmError(f"{self.where} streamed an event that is not JSON: {data[:120]!r}") from None
                if isinstance(event, dict) and isinstance(event.get("error"), dict):
                    raise VllmError(f"{self.where} failed mid-stream: {event['error'].get('message', event['error'])}")
                yield event
            raise VllmError(f"{self.where} ended the stream without [DONE]; the server may have died")
        except httpx.TimeoutException:
            raise VllmError(f"{self.where} stopped sending in the middle of a stream (timeout)") from None
        except httpx.HTTPError as exc:
            raise VllmError(f"{self.where} broke off a stream: {type(exc).__name__}") from None
        finally:
            response.close()
