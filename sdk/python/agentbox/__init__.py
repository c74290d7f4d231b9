"""agentbox: a Python client of the agentbox daemon (``agentbox serve``).

Standard library only. Start with :class:`Client`::

    from agentbox import Client

    with Client().create(image="/path/to/image", name="w1") as sb:
        r = sb.exec(["python3", "-c", "print(6*7)"])
        print(r.stdout, r.exit_code)

See README.md next to this package for more.
"""

from .client import API_VERSION, DEFAULT_SOCKET, Client, __version__
from .errors import (
    AgentboxError,
    AlreadyExistsError,
    CapacityExceededError,
    ConflictError,
    ConnectionLostError,
    DaemonUnreachableError,
    ExecLimitReachedError,
    FailedPreconditionError,
    GuestDiedError,
    IncompatibleDaemonError,
    InternalError,
    InvalidArgumentError,
    NameTakenError,
    NotFoundError,
    OutputDroppedError,
    PermissionDeniedError,
    ProcessExitedError,
    ResourceExhaustedError,
    SandboxNotRunningError,
    SandboxRunningError,
    StdinClosedError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)
from .sandbox import ExecStream, Files, OutputStream, Process, Sandbox
from .types import (
    Capacity,
    DaemonInfo,
    ExecResult,
    ExitStatus,
    FileInfo,
    ImageRef,
    Limits,
    NetworkInfo,
    NetworkPolicy,
    OutputChunk,
    PauseInfo,
    ProcessInfo,
    SandboxInfo,
    Snapshot,
    WarmTemplate,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_SOCKET",
    "Client",
    "__version__",
    "Sandbox",
    "ExecStream",
    "Files",
    "OutputStream",
    "Process",
    "Capacity",
    "DaemonInfo",
    "ExecResult",
    "ExitStatus",
    "FileInfo",
    "ImageRef",
    "Limits",
    "NetworkInfo",
    "NetworkPolicy",
    "OutputChunk",
    "PauseInfo",
    "ProcessInfo",
    "SandboxInfo",
    "Snapshot",
    "WarmTemplate",
    "AgentboxError",
    "AlreadyExistsError",
    "CapacityExceededError",
    "ConflictError",
    "ConnectionLostError",
    "DaemonUnreachableError",
    "ExecLimitReachedError",
    "FailedPreconditionError",
    "GuestDiedError",
    "IncompatibleDaemonError",
    "InternalError",
    "InvalidArgumentError",
    "NameTakenError",
    "NotFoundError",
    "OutputDroppedError",
    "PermissionDeniedError",
    "ProcessExitedError",
    "ResourceExhaustedError",
    "SandboxNotRunningError",
    "SandboxRunningError",
    "StdinClosedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
]
