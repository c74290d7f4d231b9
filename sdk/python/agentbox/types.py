"""The API's JSON objects as dataclasses.

Field names are the JSON names of ``vmctl/api/openapi.yaml`` (a test checks
every field against its schema); times are timezone-aware
:class:`datetime.datetime` values, byte counts ints, durations in the unit
their name says (``_ms``, ``_seconds``). Fields a newer daemon adds are
ignored, so an older SDK keeps working.
"""

from __future__ import annotations

import base64
import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = [
    "ImageRef",
    "Limits",
    "NetworkPolicy",
    "NetworkInfo",
    "PauseInfo",
    "SandboxInfo",
    "ExitStatus",
    "ExecResult",
    "OutputChunk",
    "ProcessInfo",
    "FileInfo",
    "SecretSpec",
    "SecretInfo",
    "Template",
    "Snapshot",
    "WarmTemplate",
    "Capacity",
    "DaemonInfo",
]

_TIME_RE = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$"
)


def parse_time(s: Optional[str]) -> Optional[_dt.datetime]:
    """An RFC 3339 time as the daemon writes it (nanoseconds are cut to
    microseconds); None for None or ""."""
    if not s:
        return None
    m = _TIME_RE.match(s)
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % s)
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    tz = m.group(8)
    if tz in ("Z", "z"):
        tzinfo = _dt.timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        tzinfo = _dt.timezone(sign * _dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    return _dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tzinfo)


def _time(d: Dict[str, Any], key: str) -> Optional[_dt.datetime]:
    return parse_time(d.get(key))


@dataclass
class ImageRef:
    """An image: its manifest name, base disk digest and directory on the
    daemon's host."""

    name: str = ""
    digest: str = ""
    dir: str = ""

    @classmethod
    def from_json(cls, d: Optional[Dict[str, Any]]) -> "ImageRef":
        d = d or {}
        return cls(name=d.get("name", ""), digest=d.get("digest", ""), dir=d.get("dir", ""))


@dataclass
class Limits:
    """A sandbox's lifetime limits, enforced by the daemon; 0 means none (in
    a request: the daemon's default). ``idle_action`` and ``ttl_action``
    say what the idle timeout and the TTL do: "remove" (default), "stop",
    "pause" or "pause-to-disk"."""

    ttl_seconds: int = 0
    idle_timeout_seconds: int = 0
    exec_timeout_ms: int = 0
    max_execs: int = 0
    idle_action: str = ""
    paused_ttl_seconds: int = 0
    ttl_action: str = ""

    @classmethod
    def from_json(cls, d: Optional[Dict[str, Any]]) -> "Limits":
        d = d or {}
        return cls(
            ttl_seconds=d.get("ttl_seconds", 0),
            idle_timeout_seconds=d.get("idle_timeout_seconds", 0),
            exec_timeout_ms=d.get("exec_timeout_ms", 0),
            max_execs=d.get("max_execs", 0),
            idle_action=d.get("idle_action", ""),
            paused_ttl_seconds=d.get("paused_ttl_seconds", 0),
            ttl_action=d.get("ttl_action", ""),
        )

    def to_json(self) -> Dict[str, Any]:
        """The non-zero limits as a request's ``limits`` object."""
        return {k: v for k, v in self.__dict__.items() if v}


@dataclass
class NetworkPolicy:
    """A network policy for create: ``mode`` "none" (no network device, the
    default), "allowlist" (only the destinations of ``allow``) or "open";
    see docs/network.md for what ``allow`` entries may be."""

    mode: str = "none"
    allow: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"mode": self.mode}
        if self.allow:
            out["allow"] = list(self.allow)
        return out


@dataclass
class NetworkInfo:
    """A sandbox's network policy and addresses."""

    mode: str = "none"
    allow: List[str] = field(default_factory=list)
    address: str = ""
    gateway: str = ""
    tap: str = ""
    mac: str = ""
    dns: str = ""  # "strict" when the policy was created with dns strict
    private_blocked: bool = False  # no private, CGNAT or ULA destination (tenants)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "NetworkInfo":
        return cls(
            mode=d.get("mode", "none"),
            allow=list(d.get("allow") or []),
            address=d.get("address", ""),
            gateway=d.get("gateway", ""),
            tap=d.get("tap", ""),
            mac=d.get("mac", ""),
            dns=d.get("dns", ""),
            private_blocked=bool(d.get("private_blocked", False)),
        )


@dataclass
class PauseInfo:
    """How a paused sandbox is paused (in memory or to disk) and what its
    saved state costs."""

    to_disk: bool = False
    paused_at: Optional[_dt.datetime] = None
    file: str = ""
    tag: str = ""
    save_ms: int = 0
    vmstate_bytes: int = 0
    disk_bytes: int = 0
    expires_at: Optional[_dt.datetime] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "PauseInfo":
        return cls(
            to_disk=d.get("to_disk", False),
            paused_at=_time(d, "paused_at"),
            file=d.get("file", ""),
            tag=d.get("tag", ""),
            save_ms=d.get("save_ms", 0),
            vmstate_bytes=d.get("vmstate_bytes", 0),
            disk_bytes=d.get("disk_bytes", 0),
            expires_at=_time(d, "expires_at"),
        )


@dataclass
class SecretSpec:
    """A secret for create (docs/network.md#secrets): the guest gets
    ``name``=a placeholder in its environment, and the host's egress proxy
    replaces the placeholder by ``value`` in the headers of HTTPS requests
    to ``hosts`` (exact names, each allowed by the network allowlist)."""

    name: str
    value: str
    hosts: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "value": self.value, "hosts": list(self.hosts)}


@dataclass
class SecretInfo:
    """A sandbox's secret as the daemon describes it: its name, the
    placeholder the guest sees and its hosts, never its value."""

    name: str
    placeholder: str = ""
    hosts: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SecretInfo":
        return cls(name=d["name"], placeholder=d.get("placeholder", ""), hosts=list(d.get("hosts") or []))


@dataclass
class SandboxInfo:
    """One sandbox as the daemon describes it (GET /v1/sandboxes/{id}).

    ``state`` is one of creating, running, paused, stopping, stopped,
    failed (``reason`` says why a sandbox failed or stopped), or, in a
    cluster's list, unknown (its ``node`` does not answer: reason
    node_unreachable). ``template`` is the daemon template it was created
    from; ``tainted`` the libvirt taints agentbox's configuration caused;
    ``tenant`` the tenant it belongs to (docs/tenants.md); ``qemu`` its
    QEMU process's uid, gid, groups and seccomp mode (get only), as the
    daemon's JSON.
    ``resources`` (host-side limits and their enforcement), ``usage`` (the
    latest resource sample, with ``memory``) and ``ports`` (port forwards)
    are kept as the daemon's JSON.
    """

    id: str
    state: str
    name: str = ""
    node: str = ""
    tenant: str = ""
    reason: str = ""
    image: ImageRef = field(default_factory=ImageRef)
    template: str = ""
    domain: str = ""
    accel: str = ""
    vcpus: int = 0
    memory_mib: int = 0
    labels: Dict[str, str] = field(default_factory=dict)
    created_at: Optional[_dt.datetime] = None
    started_at: Optional[_dt.datetime] = None
    stopped_at: Optional[_dt.datetime] = None
    last_activity_at: Optional[_dt.datetime] = None
    boot_ms: int = 0
    tainted: List[str] = field(default_factory=list)
    exec_count: int = 0
    limits: Limits = field(default_factory=Limits)
    expires_at: Optional[_dt.datetime] = None
    network: Optional[NetworkInfo] = None
    resources: Optional[Dict[str, Any]] = None
    usage: Optional[Dict[str, Any]] = None
    ports: List[Dict[str, Any]] = field(default_factory=list)
    paused: Optional[PauseInfo] = None
    secrets: List[SecretInfo] = field(default_factory=list)
    qemu: Optional[Dict[str, Any]] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"],
            state=d["state"],
            name=d.get("name", ""),
            node=d.get("node", ""),
            tenant=d.get("tenant", ""),
            reason=d.get("reason", ""),
            image=ImageRef.from_json(d.get("image")),
            template=d.get("template", ""),
            domain=d.get("domain", ""),
            accel=d.get("accel", ""),
            vcpus=d.get("vcpus", 0),
            memory_mib=d.get("memory_mib", 0),
            labels=dict(d.get("labels") or {}),
            created_at=_time(d, "created_at"),
            started_at=_time(d, "started_at"),
            stopped_at=_time(d, "stopped_at"),
            last_activity_at=_time(d, "last_activity_at"),
            boot_ms=d.get("boot_ms", 0),
            tainted=list(d.get("tainted") or []),
            exec_count=d.get("exec_count", 0),
            limits=Limits.from_json(d.get("limits")),
            expires_at=_time(d, "expires_at"),
            network=NetworkInfo.from_json(d["network"]) if d.get("network") else None,
            resources=d.get("resources"),
            usage=d.get("usage"),
            ports=list(d.get("ports") or []),
            paused=PauseInfo.from_json(d["paused"]) if d.get("paused") else None,
            secrets=[SecretInfo.from_json(x) for x in d.get("secrets") or []],
            qemu=d.get("qemu"),
        )


@dataclass
class ExitStatus:
    """How a command ended: ``exit_code`` is shell-style (its own code;
    128+N when killed by signal N; 124 on timeout; 127 not found; 126 any
    other start failure, ``error`` saying why)."""

    exit_code: int
    signal: int = 0
    timed_out: bool = False
    error: str = ""
    duration_ms: int = 0
    #: when ``timed_out``, the timeout that killed it in ms (the request's
    #: or the sandbox's, as a policy may have capped it); 0 if not known
    timeout_ms: int = 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExitStatus":
        return cls(
            exit_code=d.get("exit_code", 0),
            signal=d.get("signal", 0),
            timed_out=d.get("timed_out", False),
            timeout_ms=d.get("timeout_ms", 0),
            error=d.get("error", ""),
            duration_ms=d.get("duration_ms", 0),
        )


@dataclass
class ExecResult:
    """The collected result of :meth:`agentbox.Sandbox.exec`: all of
    stdout and stderr, and how the command ended."""

    stdout: bytes
    stderr: bytes
    exit_code: int
    signal: int = 0
    timed_out: bool = False
    error: str = ""
    duration_ms: int = 0
    exec_id: str = ""
    pid: int = 0

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.exit_code == 0


@dataclass
class OutputChunk:
    """A chunk of a command's output: ``stream`` is "stdout" or "stderr",
    ``offset`` the position of ``data`` in the command's combined output
    (both streams counted together)."""

    stream: str
    data: bytes
    offset: int = 0

    @classmethod
    def from_event(cls, ev: Dict[str, Any]) -> "OutputChunk":
        return cls(stream=ev["type"], data=base64.b64decode(ev.get("data") or ""), offset=ev.get("offset", 0))


@dataclass
class ProcessInfo:
    """A detached process as the daemon describes it. ``state`` is running,
    exited (``exit`` set) or lost (its end could not be learnt)."""

    id: str
    pid: int
    cmd: List[str]
    state: str
    exit: Optional[ExitStatus] = None
    stdin_open: bool = False
    tty: Optional[Dict[str, int]] = None
    output_bytes: int = 0
    output_dropped: int = 0
    started_at: Optional[_dt.datetime] = None
    ended_at: Optional[_dt.datetime] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ProcessInfo":
        return cls(
            id=d["id"],
            pid=d.get("pid", 0),
            cmd=list(d.get("cmd") or []),
            state=d["state"],
            exit=ExitStatus.from_json(d["exit"]) if d.get("exit") else None,
            stdin_open=d.get("stdin_open", False),
            tty=d.get("tty"),
            output_bytes=d.get("output_bytes", 0),
            output_dropped=d.get("output_dropped", 0),
            started_at=_time(d, "started_at"),
            ended_at=_time(d, "ended_at"),
        )


@dataclass
class FileInfo:
    """A guest path: ``type`` is file, dir, symlink or other; ``mode`` the
    permission bits as an octal string ("0644"); ``owner`` and ``group``
    names from the guest's /etc/passwd and /etc/group (the number when
    unnamed); ``link_target`` for a symlink the absolute path it resolves
    to (or its text when it does not resolve)."""

    name: str
    path: str
    type: str
    size: int
    mode: str
    mod_time: Optional[_dt.datetime] = None
    owner: str = ""
    group: str = ""
    link_target: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileInfo":
        return cls(
            name=d["name"],
            path=d["path"],
            type=d["type"],
            size=d.get("size", 0),
            mode=d.get("mode", ""),
            mod_time=_time(d, "mod_time"),
            owner=d.get("owner", ""),
            group=d.get("group", ""),
            link_target=d.get("link_target", ""),
        )


@dataclass
class Snapshot:
    """A saved sandbox (memory, devices, disk) that restores into new
    sandboxes."""

    id: str
    name: str
    sandbox: str
    sandbox_name: str = ""
    source_removed: bool = False
    image: ImageRef = field(default_factory=ImageRef)
    accel: str = ""
    machine: str = ""
    vcpus: int = 0
    memory_mib: int = 0
    limits: Limits = field(default_factory=Limits)
    created_at: Optional[_dt.datetime] = None
    save_ms: int = 0
    vmstate_bytes: int = 0
    disk_bytes: int = 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Snapshot":
        return cls(
            id=d["id"],
            name=d["name"],
            sandbox=d.get("sandbox", ""),
            sandbox_name=d.get("sandbox_name", ""),
            source_removed=d.get("source_removed", False),
            image=ImageRef.from_json(d.get("image")),
            accel=d.get("accel", ""),
            machine=d.get("machine", ""),
            vcpus=d.get("vcpus", 0),
            memory_mib=d.get("memory_mib", 0),
            limits=Limits.from_json(d.get("limits")),
            created_at=_time(d, "created_at"),
            save_ms=d.get("save_ms", 0),
            vmstate_bytes=d.get("vmstate_bytes", 0),
            disk_bytes=d.get("disk_bytes", 0),
        )


@dataclass
class Template:
    """A named template of the daemon (serve --template NAME=DIR|PROFILE)
    that ``create(template=NAME)`` boots: its image, the ``profile`` it was
    built from (empty for NAME=DIR), its default resources (``disk_mib`` 0:
    the base disk's own size), and ``error`` when its image does not load
    now (creates from it fail until it is put back)."""

    name: str
    image: ImageRef = field(default_factory=ImageRef)
    profile: str = ""
    vcpus: int = 0
    memory_mib: int = 0
    disk_mib: int = 0
    error: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Template":
        return cls(
            name=d["name"],
            image=ImageRef.from_json(d.get("image")),
            profile=d.get("profile", ""),
            vcpus=d.get("vcpus", 0),
            memory_mib=d.get("memory_mib", 0),
            disk_mib=d.get("disk_mib", 0),
            error=d.get("error", ""),
        )


@dataclass
class WarmTemplate:
    """A warm template: the saved "ready" state of one image and machine
    shape that ``create(warm=True)`` starts from."""

    key: str
    image: ImageRef = field(default_factory=ImageRef)
    domain_type: str = ""
    vcpus: int = 0
    memory_mib: int = 0
    disk_mib: int = 0
    network: bool = False
    size_bytes: int = 0
    created_at: Optional[_dt.datetime] = None
    build_ms: int = 0
    last_used_at: Optional[_dt.datetime] = None
    pooled: int = 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "WarmTemplate":
        return cls(
            key=d["key"],
            image=ImageRef.from_json(d.get("image")),
            domain_type=d.get("domain_type", ""),
            vcpus=d.get("vcpus", 0),
            memory_mib=d.get("memory_mib", 0),
            disk_mib=d.get("disk_mib", 0),
            network=d.get("network", False),
            size_bytes=d.get("size_bytes", 0),
            created_at=_time(d, "created_at"),
            build_ms=d.get("build_ms", 0),
            last_used_at=_time(d, "last_used_at"),
            pooled=d.get("pooled", 0),
        )


@dataclass
class Capacity:
    """What the daemon may commit to sandboxes and what it has committed."""

    memory_mib: int = 0
    vcpus: int = 0
    used_memory_mib: int = 0
    used_vcpus: int = 0

    @classmethod
    def from_json(cls, d: Optional[Dict[str, Any]]) -> "Capacity":
        d = d or {}
        return cls(
            memory_mib=d.get("memory_mib", 0),
            vcpus=d.get("vcpus", 0),
            used_memory_mib=d.get("used_memory_mib", 0),
            used_vcpus=d.get("used_vcpus", 0),
        )


@dataclass
class DaemonInfo:
    """GET /v1/info: the daemon's build ``version``, its ``api`` version
    ("v1"), its capacity and its sandboxes counted by state."""

    version: str
    api: str
    capacity: Capacity = field(default_factory=Capacity)
    sandboxes: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "DaemonInfo":
        return cls(
            version=d.get("version", ""),
            api=d.get("api", ""),
            capacity=Capacity.from_json(d.get("capacity")),
            sandboxes=dict(d.get("sandboxes") or {}),
        )
