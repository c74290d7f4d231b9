"""The SDK's exceptions against the API's one error table (the errorTable of
vmctl/api/errors.go) and openapi.yaml's codes (no daemon needed)."""

from __future__ import annotations

import os
import re
from http import HTTPStatus
from typing import Dict, List, Tuple

import openapi_check as oa

import agentbox
from agentbox import errors

API = os.path.join(oa.REPO, "vmctl", "api")

#: The Python class of each errdefs category.
CATEGORY_CLASS = {
    "ErrNotFound": agentbox.NotFoundError,
    "ErrAlreadyExists": agentbox.AlreadyExistsError,
    "ErrConflict": agentbox.ConflictError,
    "ErrInvalidArgument": agentbox.InvalidArgumentError,
    "ErrFailedPrecondition": agentbox.FailedPreconditionError,
    "ErrResourceExhausted": agentbox.ResourceExhaustedError,
    "ErrUnavailable": agentbox.UnavailableError,
    "ErrPermissionDenied": agentbox.PermissionDeniedError,
    "ErrUnauthenticated": agentbox.UnauthenticatedError,
    "ErrNotImplemented": agentbox.UnimplementedError,
    "ErrInternal": agentbox.InternalError,
}


def _go_status(name: str) -> int:
    """http.StatusUnprocessableEntity → 422."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name[len("Status") :]).upper()
    return int(HTTPStatus[snake])


def error_table() -> List[Tuple[str, int, str]]:
    """(category, status, code) of each row of errorTable, in order."""
    consts: Dict[str, str] = {}
    for f in os.listdir(API):
        if f.endswith(".go") and not f.endswith("_test.go"):
            with open(os.path.join(API, f), encoding="utf-8") as fh:
                for m in re.finditer(r'^\s*(?:const\s+)?(Code\w+)\s*=\s*"(\w+)"', fh.read(), re.M):
                    consts[m.group(1)] = m.group(2)
    with open(os.path.join(API, "errors.go"), encoding="utf-8") as fh:
        src = fh.read()
    body = src[src.index("var errorTable = []mapping{") :]
    body = body[: body.index("\n}\n")]
    rows = []
    for m in re.finditer(r"\{errdefs\.(\w+), (?:true|false), http\.(\w+), (\w+)\}", body):
        assert m.group(3) in consts, "errorTable's %s: no `%s = \"...\"` constant found in vmctl/api/*.go" % (m.group(3), m.group(3))
        rows.append((m.group(1), _go_status(m.group(2)), consts[m.group(3)]))
    assert len(rows) > 30, "parsed only %d rows of errorTable" % len(rows)
    return rows


def test_every_code_of_the_api_has_its_class_and_status() -> None:
    enum = oa.schema("Error")["properties"]["code"]["enum"]
    rows = error_table()
    assert sorted(enum) == sorted({c for _, _, c in rows}), "openapi.yaml's codes and errorTable's differ"
    for code in enum:
        first = next((cat, st) for cat, st, c in rows if c == code)
        assert errors.CODE_STATUS.get(code) == first[1], "CODE_STATUS[%r] = %r, the table's first row says %d" % (
            code,
            errors.CODE_STATUS.get(code),
            first[1],
        )
        assert errors.error_class(code) is not agentbox.AgentboxError, code


def test_each_code_and_status_is_an_exception_of_its_category() -> None:
    """Read backwards as api.Error.Unwrap does: the first row with both
    code and status gives the category."""
    seen = set()
    for cat, status, code in error_table():
        if (code, status) in seen or cat not in CATEGORY_CLASS:
            continue
        seen.add((code, status))
        e = errors.error_from(code, "m", status)
        assert isinstance(e, CATEGORY_CLASS[cat]), "%s %d is a %s, want a %s" % (code, status, type(e).__name__, CATEGORY_CLASS[cat].__name__)
        assert e.code == code and e.status == status and e.message == "m"
        if status == 409:
            assert isinstance(e, agentbox.ConflictError), "every 409 is a ConflictError: %s" % code


def test_specific_classes() -> None:
    assert isinstance(errors.error_from("name_taken", "m", 409), agentbox.NameTakenError)
    assert isinstance(errors.error_from("sandbox_not_running", "m", 409), agentbox.SandboxNotRunningError)
    assert isinstance(errors.error_from("invalid_argument", "m", 422), agentbox.FailedPreconditionError)
    assert isinstance(errors.error_from("invalid_argument", "m", 400), agentbox.InvalidArgumentError)
    e = errors.error_from("capacity_exceeded", "full", 429, {"memory_mib": 1})
    assert isinstance(e, agentbox.CapacityExceededError) and e.details == {"memory_mib": 1}
    # A code of a newer daemon: the class by status.
    assert type(errors.error_from("brand_new", "m", 404)) is agentbox.NotFoundError
    assert type(errors.error_from("brand_new", "m", 418)) is agentbox.AgentboxError
    # An error of a stream takes the status of its code.
    assert errors.error_from("guest_died", "m").status == 503
