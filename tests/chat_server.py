"""A real local HTTP server speaking the Chat Completions protocol, with scripted answers.

    def test_x(chat_server):
        chat_server.script("EDIT: ...", Fail(500), Delay(3.0))
        client = openai.OpenAI(base_url=chat_server.url, api_key="k")

Each request to ``POST /v1/chat/completions`` takes the next scripted item: a string (or
:class:`Reply`) is answered as a ``chat.completion``; :class:`Fail` returns an HTTP error with an
OpenAI-style error body; :class:`Delay` sleeps (longer than the client's timeout) before
answering. Every request body is kept in ``requests`` (parsed JSON), in arrival order. When the
script runs out the server answers 500 with ``x-should-retry: false``.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Reply:
    text: str
    usage: bool = True              # False: the response carries no usage block
    finish_reason: str = "stop"


@dataclass
class Fail:
    status: int = 500
    message: str = "the scripted server failed on purpose"
    retry_after_ms: int = 20        # keeps the SDK's retry wait short
    body: object = None             # the error body as sent, in place of OpenAI's {"error": {"message": ...}}


@dataclass
class Delay:
    seconds: float
    then: str = "EDIT: too late\n"


def tokens(text: str) -> int:
    """The server's token count: one per 4 characters, at least 1."""
    return max(1, len(text) // 4)


class ChatServer:
    def __init__(self):
        self.requests: list[dict] = []
        self.served: list[dict] = []          # what each request got: {"kind", "usage"...}
        self._script: deque = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):     # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                req = json.loads(body or b"{}")
                with server._lock:
                    server.requests.append(req)
                    item = server._script.popleft() if server._script else None
                if item is None:
                    return self._send(500, {"error": {"message": "the script is exhausted", "type": "server_error"}},
                                      {"x-should-retry": "false"})
                if isinstance(item, Fail):
                    server.served.append({"kind": "fail", "status": item.status})
                    body = item.body if item.body is not None else {
                        "error": {"message": item.message, "type": "server_error", "param": None, "code": None}}
                    return self._send(item.status, body, {"retry-after-ms": str(item.retry_after_ms)})
                if isinstance(item, Delay):
                    server._stop.wait(item.seconds)
                    item = Reply(item.then)
                if isinstance(item, str):
                    item = Reply(item)
                prompt = "".join(str(m.get("content", "")) for m in req.get("messages", []))
                usage = {"prompt_tokens": tokens(prompt), "completion_tokens": tokens(item.text)}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                server.served.append({"kind": "reply", "usage": usage if item.usage else None})
                resp = {"id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
                        "created": int(time.time()), "model": req.get("model", "scripted"),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": item.text},
                                     "finish_reason": item.finish_reason, "logprobs": None}]}
                if item.usage:
                    resp["usage"] = usage
                self._send(200, resp)

            def _send(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass                      # the client gave up (a timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *items) -> ChatServer:
        with self._lock:
            self._script.extend(items)
        return self

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def chat_server():
    server = ChatServer().start()
    try:
        yield server
    finally:
        server.stop()
