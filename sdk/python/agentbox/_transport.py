"""HTTP/1.1 to the daemon over its unix socket or TCP, with http.client.

A small pool keeps idle connections; one that the daemon closed while it was
idle (e.g. the daemon restarted) is noticed before it is reused (it reads
as end of file) and replaced, so a client keeps working across daemon
restarts. Request bodies may be bytes or file-like objects; the latter are
sent with chunked transfer encoding, a block at a time, never whole.
"""

from __future__ import annotations

import errno
import http.client
import json
import select
import socket
import ssl
import threading
import urllib.parse
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import (
    AgentboxError,
    ConnectionLostError,
    DaemonUnreachableError,
    PermissionDeniedError,
    UnavailableError,
    error_from,
    invalid_argument,
)
from .routes import ROUTES, Route

#: Bytes read from or written to a socket at a time (a file-like request
#: body is sent in blocks of this size).
BLOCK_SIZE = 64 * 1024

#: Idle connections kept per client.
MAX_IDLE = 8

#: How much of an error answer's body is read.
_ERROR_BODY_LIMIT = 64 * 1024

#: Methods whose request may be sent again when a reused connection turns
#: out dead before any answer came (RFC 9110's idempotent methods).
_IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE"))

Body = Union[None, bytes, bytearray, memoryview, Any]
QueryValue = Union[None, str, int, bool, Sequence[str]]
Observer = Callable[[str, Route, Dict[str, str], List[Tuple[str, str]], Any], None]


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose socket is a unix socket."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("agentbox", timeout=timeout, blocksize=BLOCK_SIZE)
        self._unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the daemon: an idle HTTP
    connection has nothing to read unless it reached end of file."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Response:
    """An answer whose body is read as it arrives. Reading it to the end
    (or :meth:`close` after that) gives its connection back to the pool;
    closing it earlier closes the connection (for an exec stream: the
    command is killed)."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self.status: int = resp.status
        self.headers = resp.headers

    def header(self, name: str, default: str = "") -> str:
        """The value of header name, default when absent."""
        v = self.headers.get(name)
        return default if v is None else str(v)

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes of the body (all with -1); b"" at its end."""
        try:
            data = self._resp.read(n) if n >= 0 else self._resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise self._transport._lost(e)
        if not data or self._resp.isclosed():
            self._finish()
        return data

    def readline(self, limit: int = 1 << 24) -> bytes:
        """The next line of the body, with its newline (b"" at its end)."""
        try:
            line = self._resp.readline(limit)
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise self._transport._lost(e)
        if limit > 0 and len(line) >= limit and not line.endswith(b"\n"):
            self.close()
            raise ConnectionLostError(
                "a line of the daemon's answer is longer than %d bytes" % limit, code="unavailable"
            )
        if not line:
            self._finish()
        return line

    def json(self) -> Any:
        """The whole body decoded as JSON."""
        data = self.read()
        self.close()
        try:
            return json.loads(data.decode("utf-8"))
        except ValueError as e:
            raise AgentboxError("the daemon's answer is not JSON: %s" % e, code="internal", status=self.status)

    def _finish(self) -> None:
        """The body was read to its end: keep the connection if it may be
        reused."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.will_close or not self._resp.isclosed():
            conn.close()
        else:
            self._transport._release(conn)

    def close(self) -> None:
        """Ends the answer: a connection with unread body is closed."""
        if self._conn is None:
            return
        if self._resp.isclosed():
            self._finish()
            return
        conn, self._conn = self._conn, None
        self._resp.close()
        conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Transport:
    """Connections to one daemon: its unix socket (socket_path) or its TCP
    listener (url, "http://HOST:PORT" or "https://HOST:PORT")."""

    def __init__(
        self,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        user_agent: str = "agentbox-python",
    ) -> None:
        if (socket_path is None) == (url is None):
            raise invalid_argument("give exactly one of socket_path and url")
        self.socket_path = socket_path
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent
        self.observer: Optional[Observer] = None
        self._ssl_context = ssl_context
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._host = ""
        self._port = 0
        self._https = False
        if url is not None:
            self._parse_url(url)
            self.where = url
        else:
            self.where = str(socket_path)

    def _parse_url(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise invalid_argument("daemon URL %r: want http://HOST:PORT or https://HOST:PORT" % url)
        if not u.hostname or u.path not in ("", "/") or u.query or u.fragment or u.username or u.password:
            raise invalid_argument("daemon URL %r: want only a scheme, host and port, e.g. https://build1:7070" % url)
        self._https = u.scheme == "https"
        self._host = u.hostname
        try:
            port = u.port
        except ValueError:
            raise invalid_argument("daemon URL %r: the port is not a number from 1 to 65535" % url) from None
        self._port = port or (443 if self._https else 80)

    # --- connections ------------------------------------------------------

    def _new_conn(self) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixHTTPConnection(self.socket_path, self.timeout)
        if self._https:
            ctx = self._ssl_context or ssl.create_default_context()
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout, context=ctx, blocksize=BLOCK_SIZE)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout, blocksize=BLOCK_SIZE)

    def _connect(self) -> http.client.HTTPConnection:
        conn = self._new_conn()
        try:
            conn.connect()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            conn.close()
            if self.socket_path is not None:
                msg = (
                    "cannot reach the agentbox daemon at %s: start it with `agentbox serve --socket %s` "
                    "(or pass socket= / set AGENTBOX_SOCKET) (%s)" % (self.where, self.where, e.strerror or e)
                )
            else:
                msg = (
                    "cannot reach the agentbox daemon at %s: connection refused: is `agentbox serve --listen-tcp` "
                    "running there? (check url= / AGENTBOX_HOST)" % self.where
                )
            raise DaemonUnreachableError(msg, code="unavailable") from e
        except PermissionError as e:
            conn.close()
            raise PermissionDeniedError(
                "may not open the agentbox daemon's socket %s: %s (the daemon's --socket-group names the group allowed in)"
                % (self.where, e.strerror or e),
                code="permission_denied",
            ) from e
        except (OSError, ssl.SSLError) as e:
            conn.close()
            raise UnavailableError("connecting to the agentbox daemon at %s: %s" % (self.where, e), code="unavailable") from e
        return conn

    def _acquire(self) -> Tuple[http.client.HTTPConnection, bool]:
        """An idle connection still open (reused: True) or a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(), False
            if _dropped(conn):
                conn.close()
                continue
            return conn, True

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the idle connections (answers being read keep theirs)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _lost(self, e: BaseException) -> AgentboxError:
        if isinstance(e, socket.timeout):
            return ConnectionLostError(
                "no answer from the agentbox daemon at %s within %s s" % (self.where, self.timeout), code="unavailable"
            )
        return ConnectionLostError(
            "the connection to the agentbox daemon at %s broke: %s" % (self.where, e or type(e).__name__),
            code="unavailable",
        )

    # --- requests ---------------------------------------------------------

    def url_of(self, route: Route, params: Dict[str, str], query: List[Tuple[str, str]]) -> str:
        """The request target of route with its path parameters and query."""
        path = route.path
        for k, v in params.items():
            path = path.replace("{" + k + "}", urllib.parse.quote(str(v), safe=""))
        if "{" in path:
            raise ValueError("route %s %s: a path parameter is missing" % (route.method, route.path))
        if query:
            path += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return path

    def request(
        self,
        name: str,
        params: Optional[Dict[str, str]] = None,
        query: Optional[Dict[str, QueryValue]] = None,
        json_body: Any = None,
        body: Body = None,
        content_type: Optional[str] = None,
    ) -> Response:
        """Sends the request of route name and returns its 2xx answer,
        unread; any other answer raises its :class:`AgentboxError`.

        json_body (any JSON value) is sent as application/json; else body
        (bytes, or a file-like object or iterable of bytes sent chunked)
        with content_type. Query values: a bool is sent only when true
        ("true"), a list as repeated parameters, None not at all.
        """
        route = ROUTES[name]
        params = params or {}
        pairs: List[Tuple[str, str]] = []
        for k, v in (query or {}).items():
            if k not in route.query:
                raise ValueError("route %s %s takes no query parameter %r" % (route.method, route.path, k))
            if v is None or v is False:
                continue
            if v is True:
                pairs.append((k, "true"))
            elif isinstance(v, (list, tuple)):
                pairs.extend((k, str(x)) for x in v)
            else:
                pairs.append((k, str(v)))
        target = self.url_of(route, params, pairs)
        if self.observer is not None:
            self.observer(name, route, dict(params), list(pairs), json_body)

        headers = {"User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        replayable = body is None or isinstance(body, (bytes, bytearray, memoryview))

        attempt = 0
        while True:
            attempt += 1
            conn, reused = self._acquire()
            try:
                conn.request(route.method, target, body=body, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                stale = isinstance(
                    e, (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected, http.client.BadStatusLine)
                ) or getattr(e, "errno", None) == errno.EPIPE
                if reused and stale and replayable and route.method in _IDEMPOTENT and attempt == 1:
                    continue  # the daemon closed it while idle: once more on a new one
                raise self._lost(e) from e
            break
        out = Response(self, conn, resp)
        if 200 <= resp.status <= 299:
            return out
        raise self._error(out)

    def _error(self, resp: Response) -> AgentboxError:
        """The exception for a non-2xx answer."""
        try:
            data = resp.read(_ERROR_BODY_LIMIT)
        except AgentboxError:
            data = b""
        resp.close()
        try:
            doc = json.loads(data.decode("utf-8"))
            err = doc["error"]
            code = err["code"]
            if isinstance(code, str) and code:
                return error_from(code, str(err.get("message", "")), resp.status, err.get("details"))
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        snippet = data.decode("utf-8", "replace").strip()
        if len(snippet) > 200:
            snippet = snippet[:200] + "..."
        return error_from(
            _code_of_status(resp.status),
            "the daemon answered %d %s: %s" % (resp.status, http.client.responses.get(resp.status, ""), snippet),
            resp.status,
        )


def _code_of_status(status: int) -> str:
    """The stable code of an answer without an error body (a proxy's)."""
    return {
        400: "bad_request",
        401: "unauthorized",
        403: "permission_denied",
        404: "not_found",
        405: "method_not_allowed",
        409: "conflict",
        413: "payload_too_large",
        415: "unsupported_media",
        429: "capacity_exceeded",
        501: "not_implemented",
        503: "unavailable",
    }.get(status, "internal")


def iter_ndjson(resp: Response) -> Iterable[Dict[str, Any]]:
    """The JSON objects of an application/x-ndjson answer, one per line."""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.strip()
        if not line:
            continue
        try:
            yield json.loads(line.decode("utf-8"))
        except ValueError as e:
            resp.close()
            raise AgentboxError("a line of the daemon's stream is not JSON: %s" % e, code="internal", status=resp.status)
