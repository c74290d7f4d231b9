"""The client's transport against a scripted fake daemon (what a real one
cannot be made to do): another API version, no daemon at all, a proxy's
error page, idle connections the server closes, the chunked upload's
blocks, the environment variables."""

from __future__ import annotations

import http.server
import io
import json
import os
import socketserver
import tempfile
import threading
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

import agentbox



class Rec:
    """One request the fake daemon got."""

    def __init__(self, method: str, path: str, headers: Any, body: bytes, chunks: List[int]) -> None:
        self.method, self.path, self.headers, self.body, self.chunks = method, path, headers, body, chunks


Handler = Callable[[Rec], Tuple[int, Dict[str, str], bytes]]


class _Req(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *a: Any) -> None:
        pass

    def _serve(self) -> None:
        fake: FakeDaemon = self.server.fake
        chunks: List[int] = []
        body = b""
        if self.headers.get("Transfer-Encoding") == "chunked":
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(size)
                body += self.rfile.read(size)
                self.rfile.readline()
        elif self.headers.get("Content-Length"):
            body = self.rfile.read(int(self.headers["Content-Length"]))
        rec = Rec(self.command, self.path, self.headers, body, chunks)
        fake.requests.append(rec)
        status, headers, out = fake.handler(rec)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        if fake.close_after_answer:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = _serve


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _TCPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class FakeDaemon:
    def __init__(self, handler: Handler, tcp: bool = False) -> None:
        self.handler = handler
        self.requests: List[Rec] = []
        self.close_after_answer = False
        self.connections = 0
        self._dir = tempfile.mkdtemp(prefix="abfake")
        if tcp:
            self.server: Any = _TCPServer(("127.0.0.1", 0), _Req)
            self.where = "http://127.0.0.1:%d" % self.server.server_address[1]
        else:
            self.where = os.path.join(self._dir, "s.sock")
            self.server = _UnixServer(self.where, _Req)
        self.server.fake = self
        orig = self.server.process_request

        def counting(request: Any, addr: Any) -> None:
            self.connections += 1
            orig(request, addr)

        self.server.process_request = counting
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json(status: int, doc: Any) -> Tuple[int, Dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(doc).encode()


INFO = {"version": "test", "api": "v1", "capacity": {"memory_mib": 1, "vcpus": 1, "used_memory_mib": 0, "used_vcpus": 0}, "sandboxes": {}}


def routes(req: Rec) -> Tuple[int, Dict[str, str], bytes]:
    if req.path == "/v1/info":
        return _json(200, INFO)
    if req.path.startswith("/v1/sandboxes?") or req.path == "/v1/sandboxes":
        return _json(200, {"sandboxes": []})
    if req.path.startswith("/v1/sandboxes/sb1/files"):
        return _json(201, {"name": "f", "path": "/f", "type": "file", "size": len(req.body), "mode": "0644", "mod_time": "2024-01-01T00:00:00Z"})
    return 502, {"Content-Type": "text/html"}, b"<html>bad gateway</html>"


@pytest.fixture
def fake() -> Iterator[FakeDaemon]:
    f = FakeDaemon(routes)
    yield f
    f.close()


def test_another_api_version_is_refused_with_what_to_do() -> None:
    f = FakeDaemon(lambda r: _json(200, dict(INFO, api="v2", version="9.9")))
    try:
        c = agentbox.Client(socket=f.where)
        with pytest.raises(agentbox.IncompatibleDaemonError) as ei:
            c.list()
        assert "speaks API 'v2'" in str(ei.value) and "version 9.9" in str(ei.value) and "'v1'" in str(ei.value)
        assert [r.path for r in f.requests] == ["/v1/info"]  # nothing else was sent
    finally:
        f.close()


def test_no_daemon_is_unreachable_with_where_it_looked(tmp_path: Any) -> None:
    sock = str(tmp_path / "none.sock")
    c = agentbox.Client(socket=sock)
    with pytest.raises(agentbox.DaemonUnreachableError) as ei:
        c.list()
    e = ei.value
    assert isinstance(e, agentbox.UnavailableError) and e.status is None and e.code == "unavailable"
    assert sock in str(e) and "AGENTBOX_SOCKET" in str(e)


def test_version_checked_once_and_connections_reused(fake: FakeDaemon) -> None:
    c = agentbox.Client(socket=fake.where)
    for _ in range(3):
        assert c.list() == []
    assert [r.path for r in fake.requests] == ["/v1/info", "/v1/sandboxes", "/v1/sandboxes", "/v1/sandboxes"]
    assert fake.connections == 1
    assert c.daemon_version == "test"
    assert all(r.headers["User-Agent"] == "agentbox-python/" + agentbox.__version__ for r in fake.requests)


def test_idle_connection_closed_by_the_daemon_is_replaced(fake: FakeDaemon) -> None:
    """A daemon that closes connections after answering (as one that
    restarted did): every call still succeeds, each on a new connection."""
    fake.close_after_answer = True
    c = agentbox.Client(socket=fake.where)
    for _ in range(3):
        assert c.list() == []
    assert fake.connections == 4


def test_a_proxy_error_page_is_an_error_with_its_status(fake: FakeDaemon) -> None:
    c = agentbox.Client(socket=fake.where)
    with pytest.raises(agentbox.InternalError) as ei:
        c.get("x")
    assert ei.value.status == 502 and "bad gateway" in str(ei.value)


def test_upload_of_a_file_object_is_chunked_in_blocks(fake: FakeDaemon) -> None:
    c = agentbox.Client(socket=fake.where)
    sb = agentbox.Sandbox(c, agentbox.SandboxInfo(id="sb1", state="running"))
    data = os.urandom(3 << 20)
    fi = sb.files.write("/f", io.BytesIO(data))
    req = fake.requests[-1]
    assert req.headers["Transfer-Encoding"] == "chunked" and req.headers["Content-Type"] == "application/octet-stream"
    assert req.body == data and fi.size == len(data)
    assert len(req.chunks) >= 48 and max(req.chunks) <= 64 * 1024
    # A generator of blocks is streamed the same way.
    sb.files.write("/f", (data[i : i + 1000] for i in range(0, 10000, 1000)))
    assert fake.requests[-1].body == data[:10000] and fake.requests[-1].headers["Transfer-Encoding"] == "chunked"


def test_environment_selects_tcp_and_token(monkeypatch: Any, tmp_path: Any) -> None:
    f = FakeDaemon(lambda r: _json(200, INFO) if r.path == "/v1/info" else _json(200, {"sandboxes": []}), tcp=True)
    try:
        tok = tmp_path / "token"
        tok.write_text("s3cret\n")
        monkeypatch.setenv("AGENTBOX_HOST", f.where)
        monkeypatch.setenv("AGENTBOX_TOKEN_FILE", str(tok))
        monkeypatch.setenv("AGENTBOX_TOKEN", "ignored")
        monkeypatch.setenv("AGENTBOX_SOCKET", "/nonexistent")
        c = agentbox.Client()
        assert c.where == f.where and c.list() == []
        assert {r.headers["Authorization"] for r in f.requests} == {"Bearer s3cret"}
        monkeypatch.delenv("AGENTBOX_TOKEN_FILE")
        agentbox.Client().list()
        assert f.requests[-1].headers["Authorization"] == "Bearer ignored"
    finally:
        f.close()
