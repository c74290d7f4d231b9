"""The daemon's TCP listener with a bearer token: url= and token=, the
environment variables, and a wrong token."""

from __future__ import annotations

import os

import pytest
from conftest import check_request, require_live

import agentbox


@pytest.fixture
def tcp() -> str:
    require_live()
    return os.environ["AGENTBOX_SDK_TEST_URL"]


def test_url_and_token(tcp: str, sb: agentbox.Sandbox) -> None:
    with agentbox.Client(url=tcp, token=os.environ["AGENTBOX_SDK_TEST_TOKEN"]) as c:
        c._set_observer(check_request)
        assert c.where == tcp and c.info().api == "v1"
        s = c.get(sb.id)
        assert s.exec(["echo", "over tcp"]).stdout == b"over tcp\n"
        s.files.write("/root/tcp.bin", b"\x00" * 100000)
        assert s.files.read("/root/tcp.bin") == b"\x00" * 100000


def test_environment(tcp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBOX_HOST", tcp)
    monkeypatch.setenv("AGENTBOX_TOKEN_FILE", os.environ["AGENTBOX_SDK_TEST_TOKEN_FILE"])
    monkeypatch.delenv("AGENTBOX_SOCKET", raising=False)
    c = agentbox.Client()
    assert c.where == tcp and "pysdk" in [s.name for s in c.list()]


def test_wrong_or_missing_token(tcp: str) -> None:
    for tok in ("wrong", ""):
        c = agentbox.Client(url=tcp, token=tok)
        with pytest.raises(agentbox.UnauthenticatedError) as ei:
            c.list()
        assert (ei.value.code, ei.value.status) == ("unauthorized", 401)
