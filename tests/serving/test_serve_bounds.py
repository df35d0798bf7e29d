"""A bounded server (issue 49): a request that would not be answered in time is refused at once
with 503 and Retry-After; slow headers and bodies are cut off; a request with both Content-Length
and Transfer-Encoding is refused; the API docs are off unless asked; an allowed-hosts list.

The model is a stand-in (:class:`Upper`): these are the HTTP layer's rules, not the model's."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest
import uvicorn
from fastapi.testclient import TestClient

from syntaxnmt.serving.server import Answer, Limits, create_app, uvicorn_config


class Upper:
    """Stands in for the model: translations are the sentences in capitals, each sentence's work
    its length; the sentence ``hold`` waits for ``release`` (``holding`` is set meanwhile)."""

    cfg = SimpleNamespace(decode=SimpleNamespace(beam_size=2))

    def __init__(self):
        self.holding, self.release = threading.Event(), threading.Event()

    def source_tokens(self, sentences):
        return [len(s) for s in sentences]

    def work(self, sentences, beam, attention=False, aligned=False, tokens=None):
        return [len(s) for s in sentences]

    def handle(self, key, sentences, checkpoint):
        if "hold" in sentences:
            self.holding.set()
            self.release.wait(20)
        return [Answer(s.upper(), -1.0) for s in sentences]

    def info(self):
        return {}


def test_a_request_that_would_not_be_answered_in_time_is_refused_at_once_with_retry_after():
    model = Upper()
    app = create_app("unused", translator=model, limits=Limits(timeout=10))
    with TestClient(app) as c:
        held = threading.Thread(target=c.post, args=("/translate",), kwargs={"json": {"sentences": ["hold"]}})
        held.start()
        assert model.holding.wait(10)  # a batch of work 4 runs
        app.state.worker._rate = (1.0, 1.0)  # as if measured: 1 unit of work per second
        t0 = time.monotonic()
        r = c.post("/translate", json={"sentences": ["x" * 30]})  # 4 + 30 s of work, 10 s allowed
        assert time.monotonic() - t0 < 5  # refused up front, not after the 10 s timeout
        assert r.status_code == 503 and "busy" in r.json()["error"] and "try again in 4 s" in r.json()["error"]
        assert r.headers["retry-after"] == "4" and r.json()["retry_after"] == 4  # the running batch's work
        model.release.set()
        held.join(10)
        assert c.post("/translate", json={"sentences": ["x" * 30]}).json()["translations"] == ["X" * 30]  # idle: admitted


def test_the_api_docs_are_served_only_when_asked():
    with TestClient(create_app("unused", translator=Upper())) as c:
        assert [c.get(path).status_code for path in ("/docs", "/redoc", "/openapi.json")] == [404, 404, 404]
        assert c.get("/docs").json() == {"error": "Not Found"}
    with TestClient(create_app("unused", translator=Upper(), docs=True)) as c:
        assert [c.get(path).status_code for path in ("/docs", "/redoc", "/openapi.json")] == [200, 200, 200]
        assert "/translate" in c.get("/openapi.json").json()["paths"]


def test_only_the_allowed_hosts_are_answered():
    app = create_app("unused", translator=Upper(), allowed_hosts=["mt.example.org", "*.example.net"])
    with TestClient(app, base_url="http://mt.example.org") as c:
        assert c.post("/translate", json={"sentences": ["hi"]}).json()["translations"] == ["HI"]
        assert c.get("/health", headers={"host": "a.example.net"}).status_code == 200
        r = c.get("/health", headers={"host": "evil.example.com"})
        assert r.status_code == 400 and r.json() == {"error": "host not allowed (this server answers mt.example.org, *.example.net)"}
    with TestClient(create_app("unused", translator=Upper()), base_url="http://anything.example.com") as c:
        assert c.get("/health").status_code == 200  # no list: any host


@pytest.fixture
def server():
    """A real uvicorn server (as ``syntaxnmt serve`` configures it, read timeout 0.5 s) on a free
    port, in a thread; yields the port."""
    app = create_app("unused", translator=Upper(), read_timeout=0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, read_timeout=0.5, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield port
    srv.should_exit = True
    thread.join(10)


def exchange(port: int, data: bytes, wait: float = 10) -> tuple[bytes, bool]:
    """Send ``data`` and read until the server closes the connection (at most ``wait`` seconds):
    (what came back, whether the server closed it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            return got, False
    return got, True


BODY = b'{"sentences": ["hi"]}'


def test_the_server_answers_a_whole_request(server):
    got, _ = exchange(server, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY))
    assert got.startswith(b"HTTP/1.1 200") and b'"HI"' in got


def test_a_body_that_does_not_come_in_time_is_408_and_the_connection_closed(server):
    got, closed = exchange(server, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + BODY[:5])
    assert closed and got.startswith(b"HTTP/1.1 408") and b"request body not received within 0.5 s" in got


def test_headers_that_do_not_come_in_time_close_the_connection(server):
    got, closed = exchange(server, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Ty")
    assert closed and got == b""


def test_content_length_with_transfer_encoding_is_refused_at_once(server):
    got, closed = exchange(server, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 21\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sen\r\n")
    assert closed and got.startswith(b"HTTP/1.1 400") and b"both Content-Length and Transfer-Encoding" in got
