"""Fixtures of the SDK's tests.

Offline tests (test_openapi.py, test_errors.py, test_offline.py) need only
python3-yaml. The others talk to a real daemon booting real guests; they
are run by tests/e2e/pysdk_test.go (`make test`), which starts
`agentbox serve` and sets:

    AGENTBOX_SOCKET              the daemon's unix socket (Client() finds it)
    AGENTBOX_IMAGE               the test image (create() takes it)
    AGENTBOX_SDK_TEST_CONTROL    a unix socket: "restart\\n" makes the harness
                                 kill -9 the daemon and start it again
    AGENTBOX_SDK_TEST_URL        the daemon's TCP listener, http://127.0.0.1:PORT
    AGENTBOX_SDK_TEST_TOKEN      its bearer token (also in AGENTBOX_SDK_TEST_TOKEN_FILE)
    AGENTBOX_SDK_TEST_ALL=1      the whole suite runs: every route must be called

Without them the live tests are skipped, unless AGENTBOX_TEST_STRICT=1
(then they fail). Every request the SDK sends during the live tests is
checked against vmctl/api/openapi.yaml as it is sent.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import openapi_check  # noqa: E402

import agentbox  # noqa: E402
from agentbox.routes import Route  # noqa: E402

#: Route names the live tests sent, for test_zz_routes.py.
CALLED: Set[str] = set()
#: Problems the wire check found (also raised in the test that caused them).
WIRE_PROBLEMS: List[str] = []


def live() -> bool:
    """Whether a daemon of the harness is there."""
    return bool(os.environ.get("AGENTBOX_SDK_TEST_CONTROL"))


def require_live() -> None:
    """Skips (or, with AGENTBOX_TEST_STRICT=1, fails) without a daemon."""
    if live():
        return
    msg = "no daemon: run through `go test ./tests/e2e -run TestPythonSDK` (make test)"
    if os.environ.get("AGENTBOX_TEST_STRICT") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def check_request(name: str, route: Route, params: Dict[str, str], query: List[Tuple[str, str]], body: Any) -> None:
    """The wire check: the request of route name exists in openapi.yaml
    with these path and query parameters and a JSON body of its schema's
    shape (names and types: tests send bad values on purpose)."""
    CALLED.add(name)
    problems = []
    op = openapi_check.operation(route.method, route.path)
    if op is None:
        problems.append("%s %s is not in openapi.yaml" % (route.method, route.path))
    else:
        declared_path = openapi_check.params_in(route.method, route.path, "path")
        if set(params) != declared_path:
            problems.append("%s %s: path parameters %s, openapi.yaml declares %s" % (route.method, route.path, sorted(params), sorted(declared_path)))
        declared_query = openapi_check.params_in(route.method, route.path, "query")
        for k, _ in query:
            if k not in declared_query:
                problems.append("%s %s: query parameter %r is not declared" % (route.method, route.path, k))
        if body is not None:
            sch = openapi_check.request_schema(route.method, route.path)
            if sch is None:
                problems.append("%s %s: sends JSON, openapi.yaml has no JSON request body" % (route.method, route.path))
            else:
                problems += ["%s %s body: %s" % (route.method, route.path, p) for p in openapi_check.validate(body, sch, shape_only=True)]
    if problems:
        WIRE_PROBLEMS.extend(problems)
        raise AssertionError("request does not match openapi.yaml: " + "; ".join(problems))


@pytest.fixture(scope="session")
def client() -> Iterator[agentbox.Client]:
    """A client found the way users find it: from $AGENTBOX_SOCKET."""
    require_live()
    c = agentbox.Client()
    c._set_observer(check_request)
    yield c
    c.close()


@pytest.fixture(scope="session")
def image() -> str:
    require_live()
    return os.environ["AGENTBOX_IMAGE"]


@pytest.fixture(scope="session")
def sb(client: agentbox.Client) -> Iterator[agentbox.Sandbox]:
    """The sandbox most tests share (named "pysdk")."""
    with client.create(name="pysdk", labels={"suite": "pysdk"}, memory_mib=512) as s:
        yield s


def restart_daemon() -> None:
    """Has the harness kill -9 the daemon and start it again on the same
    state; returns once the new daemon answers."""
    path = os.environ["AGENTBOX_SDK_TEST_CONTROL"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(300)
        s.connect(path)
        s.sendall(b"restart\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    if answer.strip() != b"ok":
        raise AssertionError("restarting the daemon: %r" % answer)
