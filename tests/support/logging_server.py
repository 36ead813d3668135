"""A stand-in server on loopback that logs every request it gets (method, path, headers) and
answers as it is told: for checking what specplay sends where (an API key above all), and how it
takes replies no vLLM server would give (redirects, streams without end)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[BaseHTTPRequestHandler], None]


@dataclass(frozen=True)
class Logged:
    method: str
    path: str
    headers: dict[str, str]


def not_found(handler: BaseHTTPRequestHandler) -> None:
    body = b'{"detail": "Not Found"}'
    handler.send_response(404)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def redirect(status: int, location: str) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return answer


def endless(piece: bytes, every_s: float, gives_up_s: float = 20.0) -> Answer:
    """A 200 reply, chunked, that sends `piece` every `every_s` seconds until the client hangs up
    (or, so that a client that never does fails its test rather than hangs it, `gives_up_s` pass
    and the connection drops)."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.close_connection = True
        stop = time.monotonic() + gives_up_s
        try:
            while time.monotonic() < stop:
                handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                handler.wfile.flush()
                time.sleep(every_s)
        except OSError:  # the client hung up: what it should do
            return

    return answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-reply is what these tests provoke


class LoggingServer:
    """Serves `answer` to every request on 127.0.0.1; `requests` logs them in order."""

    def __init__(self, answer: Answer = not_found) -> None:
        self.answer = answer
        self.requests: list[Logged] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                server.requests.append(Logged(self.command, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.answer(self)

            do_GET = do_POST = _handle

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def seen(self, text: str) -> bool:
        """Whether `text` came in any request's path or headers."""
        return any(text in r.path or any(text in v for v in r.headers.values()) for r in self.requests)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
