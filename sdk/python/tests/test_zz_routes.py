"""Last: the live tests called every route of agentbox/routes.py (each
request checked against openapi.yaml as it was sent)."""

from __future__ import annotations

import os

from conftest import CALLED, WIRE_PROBLEMS

from agentbox.routes import ROUTES


def test_every_route_was_called_and_matched_openapi() -> None:
    if os.environ.get("AGENTBOX_SDK_TEST_ALL") != "1":
        return  # a partial run (-k, one file) need not call them all
    assert WIRE_PROBLEMS == []
    assert sorted(set(ROUTES) - CALLED) == []
