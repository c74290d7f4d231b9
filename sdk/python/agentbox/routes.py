"""Every route of the daemon's API this SDK calls, in one table.

The client sends requests only through these entries (by name), so this
table is the SDK's whole view of the wire; ``tests/test_openapi.py`` checks
each entry against ``vmctl/api/openapi.yaml`` (the one description of the
API): the path and method exist, every path parameter and query parameter
the SDK may send is declared there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet

__all__ = ["Route", "ROUTES"]


@dataclass(frozen=True)
class Route:
    """One operation: its HTTP method, its path as openapi.yaml writes it
    ("/v1/sandboxes/{id}/exec") and the query parameters the SDK may send."""

    method: str
    path: str
    query: FrozenSet[str] = field(default_factory=frozenset)


def _r(method: str, path: str, *query: str) -> Route:
    return Route(method, path, frozenset(query))


_SB = "/v1/sandboxes/{id}"
_PROC = _SB + "/processes/{pid}"

ROUTES: Dict[str, Route] = {
    "info": _r("GET", "/v1/info"),
    "create_sandbox": _r("POST", "/v1/sandboxes"),
    "list_sandboxes": _r("GET", "/v1/sandboxes", "label", "state"),
    "get_sandbox": _r("GET", _SB),
    "delete_sandbox": _r("DELETE", _SB, "force"),
    "stop_sandbox": _r("POST", _SB + "/stop"),
    "set_timeout": _r("POST", _SB + "/timeout"),
    "pause_sandbox": _r("POST", _SB + "/pause"),
    "resume_sandbox": _r("POST", _SB + "/resume"),
    "start_sandbox": _r("POST", _SB + "/start"),
    "exec": _r("POST", _SB + "/exec", "resume"),
    "start_process": _r("POST", _SB + "/processes", "resume"),
    "list_processes": _r("GET", _SB + "/processes"),
    "get_process": _r("GET", _PROC),
    "process_output": _r("GET", _PROC + "/output", "offset", "follow"),
    "process_stdin": _r("POST", _PROC + "/stdin", "resume", "close"),
    "kill_process": _r("POST", _PROC + "/kill", "resume"),
    "upload_file": _r("PUT", _SB + "/files", "resume", "path", "mode", "parents", "owner"),
    "download_file": _r("GET", _SB + "/files", "resume", "path"),
    "remove_file": _r("DELETE", _SB + "/files", "resume", "path", "recursive"),
    "stat_file": _r("GET", _SB + "/files/stat", "resume", "path"),
    "list_files": _r("GET", _SB + "/files/list", "resume", "path", "depth"),
    "move_file": _r("POST", _SB + "/files/move", "resume"),
    "mkdir": _r("POST", _SB + "/files/mkdir", "resume"),
    "save_snapshot": _r("POST", _SB + "/snapshots"),
    "list_snapshots": _r("GET", "/v1/snapshots", "sandbox"),
    "get_snapshot": _r("GET", "/v1/snapshots/{name}"),
    "delete_snapshot": _r("DELETE", "/v1/snapshots/{name}"),
    "restore_snapshot": _r("POST", "/v1/snapshots/{name}/restore"),
    "list_templates": _r("GET", "/v1/templates"),
    "list_warm": _r("GET", "/v1/warm"),
    "delete_warm": _r("DELETE", "/v1/warm/{key}"),
}
