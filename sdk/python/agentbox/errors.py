"""Exceptions of the agentbox SDK: one class per error category of the API.

Every error answer of the daemon is ``{"error": {"code", "message",
"details"}}`` with a stable ``code`` and an HTTP status (see the error table
in ``vmctl/api/errors.go``: the one map from the daemon's error categories to
statuses and codes). :func:`error_from` turns one into an
:class:`AgentboxError` subclass chosen by the category the code stands for,
so ``except NotFoundError`` catches a missing sandbox, process, file or
snapshot alike; a few codes a program commonly acts on have their own
subclass (:class:`NameTakenError`, :class:`SandboxNotRunningError`, ...).

The categories mirror ``vmctl/errdefs``; a conflict of state answered with
409 (``sandbox_not_running``, ``sandbox_running``, ``process_exited``,
``stdin_closed``) is both a :class:`FailedPreconditionError` (its category)
and a :class:`ConflictError` (its HTTP meaning).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "AgentboxError",
    "InvalidArgumentError",
    "NotFoundError",
    "TemplateNotFoundError",
    "OutputDroppedError",
    "ConflictError",
    "AlreadyExistsError",
    "NameTakenError",
    "FailedPreconditionError",
    "SandboxNotRunningError",
    "SandboxRunningError",
    "ProcessExitedError",
    "StdinClosedError",
    "ResourceExhaustedError",
    "CapacityExceededError",
    "ExecLimitReachedError",
    "PermissionDeniedError",
    "PolicyDeniedError",
    "UnauthenticatedError",
    "UnimplementedError",
    "UnavailableError",
    "GuestDiedError",
    "PolicyUnavailableError",
    "NodeUnreachableError",
    "TenantQuotaError",
    "QueueTimeoutError",
    "ClusterUnavailableError",
    "DaemonUnreachableError",
    "ConnectionLostError",
    "InternalError",
    "IncompatibleDaemonError",
    "error_from",
    "CODE_STATUS",
]


class AgentboxError(Exception):
    """An error of the agentbox daemon or of talking to it.

    Attributes:
        code: the API's stable error code (e.g. ``"not_found"``); for errors
            of the connection itself ``"unavailable"``.
        message: what went wrong and what to do (the daemon's text).
        details: numbers a program may act on (e.g. the capacity figures of
            ``capacity_exceeded``); empty when none.
        status: the HTTP status of the answer; for an error that arrived
            inside a stream, the status its code is answered with; ``None``
            when no answer came (the daemon could not be reached).
    """

    def __init__(
        self,
        message: str,
        code: str = "internal",
        status: Optional[int] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.details: Dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(code=%r, status=%r, message=%r)" % (
            type(self).__name__,
            self.code,
            self.status,
            self.message,
        )


# --- categories (vmctl/errdefs) -------------------------------------------


class InvalidArgumentError(AgentboxError, ValueError):
    """The request is malformed or a value is out of range (400
    ``bad_request``, ``invalid_argument``; 413 ``payload_too_large``; 415
    ``unsupported_media``; 422 ``invalid_image``): fix the request.

    The SDK raises it itself, before any request, for the arguments it
    checks (an empty command, a timeout of 0, a mode over 0o7777, a bad
    daemon URL...): then ``code`` is ``"invalid_argument"`` and ``status``
    ``None``. It is a :class:`ValueError` too."""


def invalid_argument(message: str) -> InvalidArgumentError:
    """The :class:`InvalidArgumentError` of an argument the SDK refuses
    before any request (code ``invalid_argument``, no status)."""
    return InvalidArgumentError(message, code="invalid_argument")


class NotFoundError(AgentboxError):
    """No such sandbox, process, file, snapshot or warm template (404
    ``not_found``)."""


class TemplateNotFoundError(NotFoundError):
    """404 ``template_not_found``: a create named a template the daemon does
    not serve (its message lists the ones it does; see
    :meth:`agentbox.Client.list_templates`)."""


class OutputDroppedError(NotFoundError):
    """410 ``output_dropped``: the output offset asked for fell out of the
    ring the guest keeps per process (its last 1 MiB); ``details`` or the
    message say the first offset still kept."""


class ConflictError(AgentboxError):
    """409: the object's current state does not allow the change (``conflict``),
    or what is created exists already (see :class:`AlreadyExistsError`), or the
    sandbox or process is not in the state needed (see
    :class:`SandboxNotRunningError` and its siblings)."""


class AlreadyExistsError(ConflictError):
    """409 ``name_taken`` or ``file_exists``: the name or path exists."""


class NameTakenError(AlreadyExistsError):
    """409 ``name_taken``: a sandbox or snapshot has that name already."""


class FailedPreconditionError(AgentboxError):
    """The request is well-formed but the system is not in the state it
    needs (422 ``not_a_file``, ``not_a_directory``, ``snapshot_unusable``,
    ``invalid_argument``; and the 409 state conflicts below)."""


class SandboxNotRunningError(FailedPreconditionError, ConflictError):
    """409 ``sandbox_not_running``: exec, files or processes of a sandbox
    that is stopped, failed or paused (resume or start it first)."""


class SandboxRunningError(FailedPreconditionError, ConflictError):
    """409 ``sandbox_running``: remove of a running sandbox without
    ``force``."""


class ProcessExitedError(FailedPreconditionError, ConflictError):
    """409 ``process_exited``: stdin or kill of a process that ended."""


class StdinClosedError(FailedPreconditionError, ConflictError):
    """409 ``stdin_closed``: stdin of a process whose stdin is closed (or
    was never open: start it with ``stdin_open=True``)."""


class ResourceExhaustedError(AgentboxError):
    """A limit was reached (429 ``capacity_exceeded``,
    ``exec_limit_reached``; 507 ``insufficient_storage``; 413
    ``too_large``: the guest's answer, a listing, is over a limit whose
    ``details`` give ``limit`` and ``count``): retry later or ask for
    less."""


class CapacityExceededError(ResourceExhaustedError):
    """429 ``capacity_exceeded``: admission control refused; ``details``
    hold the daemon's numbers."""


class TenantQuotaError(ResourceExhaustedError):
    """429 ``tenant_quota``: the caller's tenant would exceed one of its
    quotas (sandboxes, vCPUs, memory); ``details`` hold used, limit and
    asked (docs/tenants.md)."""


class QueueTimeoutError(ResourceExhaustedError):
    """429 ``queue_timeout``: in a cluster, the create waited in the
    create queue for the daemon's --queue-timeout without a node with
    room taking it; remove sandboxes, ask for less, or retry later."""


class ExecLimitReachedError(ResourceExhaustedError):
    """429 ``exec_limit_reached``: the sandbox's ``max_execs`` was reached
    (or all 64 detached processes run)."""


class PermissionDeniedError(AgentboxError):
    """403 ``permission_denied``: the guest or host refused the operation."""


class PolicyDeniedError(PermissionDeniedError):
    """403 ``policy_denied``: the daemon's policy plugin (serve --policy,
    docs/policy.md) denied the call; the message carries its reason."""


class UnauthenticatedError(AgentboxError):
    """401 ``unauthorized``: a missing or wrong bearer token."""


class UnimplementedError(AgentboxError):
    """501 ``not_implemented`` or 405 ``method_not_allowed``: this daemon
    cannot do it at all."""


class UnavailableError(AgentboxError):
    """503 ``unavailable``: libvirt or the guest is gone, or the daemon is
    shutting down; retrying later may succeed."""


class GuestDiedError(UnavailableError):
    """503 ``guest_died``: the guest died during the request."""


class PolicyUnavailableError(UnavailableError):
    """503 ``policy_unavailable``: the policy plugin crashed, timed out or
    is being restarted, so the call was refused (fail closed); retrying
    later may succeed."""


class NodeUnreachableError(UnavailableError):
    """503 ``node_unreachable``: in a cluster, the node the sandbox lives
    on does not answer."""


class ClusterUnavailableError(UnavailableError):
    """503 ``cluster_unavailable``: a cluster-wide call (a create, the
    node list, a drain) while the cluster's NATS is unreachable; the node
    still serves its own sandboxes."""


class DaemonUnreachableError(UnavailableError):
    """No daemon answers where the client looks: the socket file is missing
    or nothing accepts on it (or on the TCP address). ``status`` is None."""


class ConnectionLostError(UnavailableError):
    """The connection to the daemon broke before its answer was complete
    (e.g. the daemon was restarted mid-request). ``status`` is None."""


class InternalError(AgentboxError):
    """500 ``internal``, ``guest_error`` or ``boot_failed``: a failure of
    agentbox or a layer below it."""


class IncompatibleDaemonError(AgentboxError):
    """The daemon speaks another API version than this SDK (GET /v1/info's
    ``api``)."""


# --- the code table ---------------------------------------------------------

#: The class of each stable code of the API (openapi.yaml's Error.code
#: enum), by the errdefs category vmctl/api/errors.go maps the code to.
#: tests/test_errors.py checks it and CODE_STATUS against that table: a
#: code the API adds is one line here (its category's class, or a new
#: subclass of it) and one line in CODE_STATUS.
_CODE_CLASS: Dict[str, Type[AgentboxError]] = {
    "bad_request": InvalidArgumentError,
    "invalid_argument": InvalidArgumentError,  # 422: FailedPreconditionError
    "payload_too_large": InvalidArgumentError,
    "unsupported_media": InvalidArgumentError,
    "invalid_image": InvalidArgumentError,
    "unauthorized": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "output_dropped": OutputDroppedError,
    "method_not_allowed": UnimplementedError,
    "not_implemented": UnimplementedError,
    "conflict": ConflictError,
    "file_exists": AlreadyExistsError,
    "name_taken": NameTakenError,
    "sandbox_running": SandboxRunningError,
    "sandbox_not_running": SandboxNotRunningError,
    "stdin_closed": StdinClosedError,
    "process_exited": ProcessExitedError,
    "not_a_file": FailedPreconditionError,
    "not_a_directory": FailedPreconditionError,
    "snapshot_unusable": FailedPreconditionError,
    "capacity_exceeded": CapacityExceededError,
    "exec_limit_reached": ExecLimitReachedError,
    "insufficient_storage": ResourceExhaustedError,
    "too_large": ResourceExhaustedError,
    "internal": InternalError,
    "guest_error": InternalError,
    "boot_failed": InternalError,
    "unavailable": UnavailableError,
    "guest_died": GuestDiedError,
    "template_not_found": TemplateNotFoundError,
    "policy_denied": PolicyDeniedError,
    "policy_unavailable": PolicyUnavailableError,
    "node_unreachable": NodeUnreachableError,
    "tenant_quota": TenantQuotaError,
    "queue_timeout": QueueTimeoutError,
    "cluster_unavailable": ClusterUnavailableError,
}

#: The HTTP status each code is answered with (its first row in the error
#: table): the status of an error that arrived inside a stream, where none
#: travels. ``invalid_argument`` is also answered with 422.
CODE_STATUS: Dict[str, int] = {
    "bad_request": 400,
    "invalid_argument": 400,
    "payload_too_large": 413,
    "too_large": 413,
    "unsupported_media": 415,
    "invalid_image": 422,
    "unauthorized": 401,
    "permission_denied": 403,
    "not_found": 404,
    "output_dropped": 410,
    "method_not_allowed": 405,
    "not_implemented": 501,
    "conflict": 409,
    "file_exists": 409,
    "name_taken": 409,
    "sandbox_running": 409,
    "sandbox_not_running": 409,
    "stdin_closed": 409,
    "process_exited": 409,
    "not_a_file": 422,
    "not_a_directory": 422,
    "snapshot_unusable": 422,
    "capacity_exceeded": 429,
    "exec_limit_reached": 429,
    "insufficient_storage": 507,
    "internal": 500,
    "guest_error": 500,
    "boot_failed": 500,
    "unavailable": 503,
    "guest_died": 503,
    "template_not_found": 404,
    "policy_denied": 403,
    "policy_unavailable": 503,
    "node_unreachable": 503,
    "tenant_quota": 429,
    "queue_timeout": 429,
    "cluster_unavailable": 503,
}

#: For codes this SDK does not know (a newer daemon): the class by status.
_STATUS_CLASS: Dict[int, Type[AgentboxError]] = {
    400: InvalidArgumentError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: UnimplementedError,
    409: ConflictError,
    410: NotFoundError,
    413: InvalidArgumentError,
    415: InvalidArgumentError,
    422: FailedPreconditionError,
    429: ResourceExhaustedError,
    501: UnimplementedError,
    503: UnavailableError,
    507: ResourceExhaustedError,
}


def error_class(code: str, status: Optional[int] = None) -> Type[AgentboxError]:
    """The exception class of an error with the stable code answered with
    status (None: the code's usual status)."""
    if code == "invalid_argument" and status == 422:
        return FailedPreconditionError
    cls = _CODE_CLASS.get(code)
    if cls is not None:
        return cls
    if status is not None:
        if status in _STATUS_CLASS:
            return _STATUS_CLASS[status]
        if status >= 500:
            return InternalError
    return AgentboxError


def error_from(
    code: str,
    message: str,
    status: Optional[int] = None,
    details: Optional[Dict[str, Any]] = None,
) -> AgentboxError:
    """The exception for an API error: its class from code (and status),
    its status the one given or, for an error of a stream, the code's."""
    if status is None:
        status = CODE_STATUS.get(code, 500)
    return error_class(code, status)(message, code=code, status=status, details=details)
