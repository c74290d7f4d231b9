"""The client of one agentbox daemon."""

from __future__ import annotations

import math
import os
import ssl
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._transport import Observer, Response, Transport
from .errors import IncompatibleDaemonError, invalid_argument
from .sandbox import Sandbox
from .sandbox import Env, env_list
from .types import DaemonInfo, NetworkPolicy, SandboxInfo, SecretSpec, Snapshot, Template, WarmTemplate

__all__ = ["Client", "API_VERSION", "DEFAULT_SOCKET", "__version__"]

#: The SDK's version.
__version__ = "0.1.0"

#: The API version this SDK speaks (GET /v1/info's ``api``).
API_VERSION = "v1"

#: The daemon's unix socket when neither socket= nor $AGENTBOX_SOCKET names
#: another (as the CLI's --socket).
DEFAULT_SOCKET = "/run/agentbox/agentbox.sock"

Seconds = Union[int, float]


def _seconds(what: str, v: Optional[Seconds]) -> int:
    if v is None:
        return 0
    if v < 0:
        raise invalid_argument("%s %r: want seconds >= 0" % (what, v))
    return int(math.ceil(v))


def _limits(
    ttl: Optional[Seconds],
    idle_timeout: Optional[Seconds],
    exec_timeout: Optional[Seconds],
    max_execs: Optional[int],
    idle_action: Optional[str],
    paused_ttl: Optional[Seconds],
    ttl_action: Optional[str] = None,
) -> Dict[str, Any]:
    lim: Dict[str, Any] = {
        "ttl_seconds": _seconds("ttl", ttl),
        "idle_timeout_seconds": _seconds("idle_timeout", idle_timeout),
        "exec_timeout_ms": int(math.ceil(exec_timeout * 1000)) if exec_timeout else 0,
        "max_execs": max_execs or 0,
        "idle_action": idle_action or "",
        "paused_ttl_seconds": _seconds("paused_ttl", paused_ttl),
        "ttl_action": ttl_action or "",
    }
    return {k: v for k, v in lim.items() if v}


class Client:
    """A client of the agentbox daemon (``agentbox serve``).

    Where the daemon is, as the CLI finds it: ``socket`` (a unix socket
    path) or ``url`` ("http://HOST:PORT" or "https://HOST:PORT", a TCP
    listener, which needs ``token``); without either, $AGENTBOX_HOST (a
    URL) or else $AGENTBOX_SOCKET or else /run/agentbox/agentbox.sock.
    The token defaults to the content of the file $AGENTBOX_TOKEN_FILE,
    else $AGENTBOX_TOKEN. ``timeout`` (seconds) bounds connecting and each
    read of an answer (None: no bound; an exec may be silent for long).

    Nothing is dialed until the first call; the first call also checks
    that the daemon speaks this SDK's API version (GET /v1/info) and
    raises :class:`~agentbox.IncompatibleDaemonError` if not. The client
    is safe to share between threads; it keeps connections open between
    calls and opens new ones when the daemon restarted.
    """

    def __init__(
        self,
        socket: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        check_version: bool = True,
    ) -> None:
        if socket is not None and url is not None:
            raise invalid_argument("give socket= or url=, not both")
        if socket is None and url is None:
            url = os.environ.get("AGENTBOX_HOST") or None
            if url is None:
                socket = os.environ.get("AGENTBOX_SOCKET") or DEFAULT_SOCKET
        if token is None and url is not None:
            token = _env_token()
        self._transport = Transport(
            socket_path=socket,
            url=url,
            token=token,
            timeout=timeout,
            ssl_context=ssl_context,
            user_agent="agentbox-python/" + __version__,
        )
        self._check = check_version
        self._checked = False
        self._check_lock = threading.Lock()
        self._daemon: Optional[DaemonInfo] = None

    @property
    def where(self) -> str:
        """The socket path or URL of the daemon."""
        return self._transport.where

    def close(self) -> None:
        """Closes idle connections."""
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------

    def _set_observer(self, fn: Optional[Observer]) -> None:
        """Calls fn(route name, route, path params, query pairs, JSON body)
        before each request (tests use it to check requests against the
        API's description)."""
        self._transport.observer = fn

    def _ensure_checked(self) -> None:
        if not self._check or self._checked:
            return
        with self._check_lock:
            if not self._checked:
                self.info()

    def _request(self, name: str, params: Optional[Dict[str, str]] = None, **kw: Any) -> Response:
        self._ensure_checked()
        return self._transport.request(name, params, **kw)

    def _json(self, name: str, params: Optional[Dict[str, str]] = None, **kw: Any) -> Any:
        return self._request(name, params, **kw).json()

    # --- the daemon ---------------------------------------------------------

    def info(self) -> DaemonInfo:
        """The daemon's version, API version, capacity and sandbox counts.
        Raises IncompatibleDaemonError when its API version is not this
        SDK's."""
        info = DaemonInfo.from_json(self._transport.request("info").json())
        if info.api != API_VERSION:
            raise IncompatibleDaemonError(
                "the agentbox daemon at %s (version %s) speaks API %r, but this SDK (agentbox %s) speaks %r: "
                "use the SDK of the daemon's release (sdk/python in its source tree)"
                % (self.where, info.version or "unknown", info.api, __version__, API_VERSION),
                code="incompatible_daemon",
            )
        self._daemon = info
        self._checked = True
        return info

    @property
    def daemon_version(self) -> str:
        """The daemon's build version (from the version check; "" before
        the first call)."""
        return self._daemon.version if self._daemon else ""

    # --- sandboxes ----------------------------------------------------------

    def create(
        self,
        image: Optional[str] = None,
        name: Optional[str] = None,
        vcpus: Optional[int] = None,
        memory_mib: Optional[int] = None,
        disk_mib: Optional[int] = None,
        labels: Optional[Mapping[str, str]] = None,
        ttl: Optional[Seconds] = None,
        idle_timeout: Optional[Seconds] = None,
        exec_timeout: Optional[Seconds] = None,
        max_execs: Optional[int] = None,
        idle_action: Optional[str] = None,
        paused_ttl: Optional[Seconds] = None,
        network: Union[str, NetworkPolicy, None] = None,
        allow: Optional[Sequence[str]] = None,
        warm: bool = False,
        accel: Optional[str] = None,
        boot_timeout: Optional[Seconds] = None,
        cpu_quota_percent: Optional[int] = None,
        io_bps: Optional[int] = None,
        iops: Optional[int] = None,
        io_weight: Optional[int] = None,
        pids: Optional[int] = None,
        net_bps: Optional[int] = None,
        template: Optional[str] = None,
        env: Env = None,
        secrets: Optional[Sequence[SecretSpec]] = None,
        ttl_action: Optional[str] = None,
        priority: Optional[str] = None,
    ) -> Sandbox:
        """Boots a sandbox and returns it once it runs.

        image is the image directory on the daemon's host (default
        $AGENTBOX_IMAGE; a profile is built into one by ``agentbox
        profile``); or template names one of the daemon's templates
        (:meth:`list_templates`; an unknown one raises
        :class:`~agentbox.TemplateNotFoundError`). With warm it starts from the image's warm template
        (the saved "ready" state of this image and machine shape; the
        first warm create boots once to make it). vcpus, memory_mib and
        disk_mib override the image's defaults; labels are key/value pairs
        list() filters on. Lifetime limits, in seconds: ttl (removed that
        long after creation), idle_timeout (after that long without use:
        idle_action "remove", "stop", "pause" or "pause-to-disk"; what
        the ttl does is ttl_action, same values), paused_ttl, exec_timeout
        (each command's default), and max_execs. env (a mapping or
        "KEY=VALUE" strings) is in every command's environment (an exec's
        own env overrides it key by key). secrets are
        :class:`~agentbox.SecretSpec` values the guest never sees (it gets
        placeholders; needs network "allowlist" allowing their hosts).
        priority is the create's class, "low", "normal" (default) or
        "high": a tenant may ask at most its max_priority; a cluster
        serves higher classes first.
        network is "none" (default: no network device), "allowlist" (with
        allow: names and addresses it may reach) or "open", or a
        :class:`~agentbox.NetworkPolicy`. The rest are host-side limits
        (see docs/resources.md). Values left None take the daemon's
        defaults.
        """
        body = create_body(
            image=image,
            name=name,
            vcpus=vcpus,
            memory_mib=memory_mib,
            disk_mib=disk_mib,
            labels=labels,
            ttl=ttl,
            idle_timeout=idle_timeout,
            exec_timeout=exec_timeout,
            max_execs=max_execs,
            idle_action=idle_action,
            paused_ttl=paused_ttl,
            network=network,
            allow=allow,
            warm=warm,
            accel=accel,
            boot_timeout=boot_timeout,
            cpu_quota_percent=cpu_quota_percent,
            io_bps=io_bps,
            iops=iops,
            io_weight=io_weight,
            pids=pids,
            net_bps=net_bps,
            template=template,
            env=env,
            secrets=secrets,
            ttl_action=ttl_action,
            priority=priority,
        )
        return Sandbox(self, SandboxInfo.from_json(self._json("create_sandbox", json_body=body)))

    def get(self, ref: str) -> Sandbox:
        """The sandbox with that ID or name."""
        return Sandbox(self, SandboxInfo.from_json(self._json("get_sandbox", {"id": ref})))

    def list(self, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None) -> List[Sandbox]:
        """The sandboxes, oldest first; those carrying all labels and in
        state, when given."""
        q: Dict[str, Any] = {"state": state}
        if labels:
            q["label"] = ["%s=%s" % (k, v) for k, v in labels.items()]
        d = self._json("list_sandboxes", query=q)
        return [Sandbox(self, SandboxInfo.from_json(s)) for s in d.get("sandboxes") or []]

    # --- snapshots ----------------------------------------------------------

    def list_snapshots(self, sandbox: Optional[str] = None) -> List[Snapshot]:
        """The snapshots, oldest first; those of sandbox (ID or name) when
        given."""
        d = self._json("list_snapshots", query={"sandbox": sandbox})
        return [Snapshot.from_json(s) for s in d.get("snapshots") or []]

    def get_snapshot(self, name: str) -> Snapshot:
        """The snapshot with that name or ID."""
        return Snapshot.from_json(self._json("get_snapshot", {"name": name}))

    def delete_snapshot(self, name: str) -> None:
        """Removes the snapshot with that name or ID."""
        self._request("delete_snapshot", {"name": name}).close()

    def restore(
        self,
        snapshot: str,
        name: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        ttl: Optional[Seconds] = None,
        idle_timeout: Optional[Seconds] = None,
        exec_timeout: Optional[Seconds] = None,
        max_execs: Optional[int] = None,
        idle_action: Optional[str] = None,
        paused_ttl: Optional[Seconds] = None,
        ttl_action: Optional[str] = None,
    ) -> Sandbox:
        """Starts a new sandbox that continues from the snapshot (name or
        ID) and returns it once it runs; the lifetime limits given
        override the snapshot's."""
        body = restore_body(name, labels, None, ttl, idle_timeout, exec_timeout, max_execs, idle_action, paused_ttl, ttl_action)
        d = self._json("restore_snapshot", {"name": snapshot}, json_body=body)
        return Sandbox(self, SandboxInfo.from_json(d))

    def restore_many(
        self,
        snapshot: str,
        count: int,
        name: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        ttl: Optional[Seconds] = None,
        idle_timeout: Optional[Seconds] = None,
        exec_timeout: Optional[Seconds] = None,
        max_execs: Optional[int] = None,
        idle_action: Optional[str] = None,
        paused_ttl: Optional[Seconds] = None,
        ttl_action: Optional[str] = None,
    ) -> List[Sandbox]:
        """Starts count new sandboxes from the snapshot at once, named
        NAME-1 ... NAME-N, each with its own identity and randomness. All
        or nothing: if one fails, none is left."""
        if count < 1:
            raise invalid_argument("count %r: want 1 to 64 sandboxes" % count)
        if count == 1:
            return [self.restore(snapshot, name, labels, ttl, idle_timeout, exec_timeout, max_execs, idle_action, paused_ttl, ttl_action)]
        body = restore_body(name, labels, count, ttl, idle_timeout, exec_timeout, max_execs, idle_action, paused_ttl, ttl_action)
        d = self._json("restore_snapshot", {"name": snapshot}, json_body=body)
        return [Sandbox(self, SandboxInfo.from_json(s)) for s in d.get("sandboxes") or []]

    # --- templates ----------------------------------------------------------

    def list_templates(self) -> List[Template]:
        """The daemon's named templates (serve --template NAME=DIR|PROFILE),
        by name: what ``create(template=NAME)`` accepts."""
        d = self._json("list_templates")
        return [Template.from_json(t) for t in d.get("templates") or []]

    # --- warm templates -----------------------------------------------------

    def list_warm_templates(self) -> List[WarmTemplate]:
        """The warm templates, most recently used first."""
        d = self._json("list_warm")
        return [WarmTemplate.from_json(t) for t in d.get("templates") or []]

    def delete_warm_template(self, key: str) -> None:
        """Removes the warm template with that key (24 hex digits) and its
        pool; the next warm create of its shape builds it again."""
        self._request("delete_warm", {"key": key}).close()


def _env_token() -> Optional[str]:
    """The bearer token of $AGENTBOX_TOKEN_FILE, else $AGENTBOX_TOKEN."""
    f = os.environ.get("AGENTBOX_TOKEN_FILE")
    if f:
        with open(f, encoding="utf-8") as fh:
            tok = fh.read().strip()
        if not tok:
            raise invalid_argument("AGENTBOX_TOKEN_FILE %s is empty: it must hold the daemon's bearer token" % f)
        return tok
    return os.environ.get("AGENTBOX_TOKEN") or None


def create_body(
    image: Optional[str] = None,
    name: Optional[str] = None,
    vcpus: Optional[int] = None,
    memory_mib: Optional[int] = None,
    disk_mib: Optional[int] = None,
    labels: Optional[Mapping[str, str]] = None,
    ttl: Optional[Seconds] = None,
    idle_timeout: Optional[Seconds] = None,
    exec_timeout: Optional[Seconds] = None,
    max_execs: Optional[int] = None,
    idle_action: Optional[str] = None,
    paused_ttl: Optional[Seconds] = None,
    network: Union[str, NetworkPolicy, None] = None,
    allow: Optional[Sequence[str]] = None,
    warm: bool = False,
    accel: Optional[str] = None,
    boot_timeout: Optional[Seconds] = None,
    cpu_quota_percent: Optional[int] = None,
    io_bps: Optional[int] = None,
    iops: Optional[int] = None,
    io_weight: Optional[int] = None,
    pids: Optional[int] = None,
    net_bps: Optional[int] = None,
    template: Optional[str] = None,
    env: Env = None,
    secrets: Optional[Sequence[SecretSpec]] = None,
    ttl_action: Optional[str] = None,
    priority: Optional[str] = None,
) -> Dict[str, Any]:
    """The CreateSandboxRequest JSON of :meth:`Client.create`'s
    arguments."""
    body: Dict[str, Any] = {}
    if template:
        if image:
            raise invalid_argument("give image= or template=, not both")
        body["template"] = template
    else:
        image = image or os.environ.get("AGENTBOX_IMAGE")
        if not image:
            raise invalid_argument(
                "no image: pass image= (an image directory on the daemon's host), template= (one of "
                "client.list_templates()) or set AGENTBOX_IMAGE"
            )
        body["image"] = image
    for key, val in (
        ("name", name),
        ("vcpus", vcpus),
        ("memory_mib", memory_mib),
        ("disk_mib", disk_mib),
        ("accel", accel),
        ("cpu_quota_percent", cpu_quota_percent),
        ("io_bps", io_bps),
        ("iops", iops),
        ("io_weight", io_weight),
        ("pids", pids),
        ("net_bps", net_bps),
        ("priority", priority),
    ):
        if val is not None:
            body[key] = val
    if labels:
        body["labels"] = dict(labels)
    lim = _limits(ttl, idle_timeout, exec_timeout, max_execs, idle_action, paused_ttl, ttl_action)
    if lim:
        body["limits"] = lim
    if env:
        body["env"] = env_list(env)
    if secrets:
        body["secrets"] = [sec.to_json() for sec in secrets]
    if warm:
        body["warm"] = True
    if boot_timeout is not None:
        body["boot_timeout_ms"] = int(math.ceil(boot_timeout * 1000))
    if isinstance(network, NetworkPolicy):
        if allow:
            raise invalid_argument("give allow= inside the NetworkPolicy, not beside it")
        body["network"] = network.to_json()
    elif network is not None or allow:
        body["network"] = NetworkPolicy(mode=network or "allowlist", allow=list(allow or [])).to_json()
    return body


def restore_body(
    name: Optional[str],
    labels: Optional[Mapping[str, str]],
    count: Optional[int],
    ttl: Optional[Seconds],
    idle_timeout: Optional[Seconds],
    exec_timeout: Optional[Seconds],
    max_execs: Optional[int],
    idle_action: Optional[str],
    paused_ttl: Optional[Seconds],
    ttl_action: Optional[str] = None,
) -> Dict[str, Any]:
    """The RestoreRequest JSON of :meth:`Client.restore`'s arguments."""
    body: Dict[str, Any] = {}
    if name:
        body["name"] = name
    if labels:
        body["labels"] = dict(labels)
    if count:
        body["count"] = count
    lim = _limits(ttl, idle_timeout, exec_timeout, max_execs, idle_action, paused_ttl, ttl_action)
    if lim:
        body["limits"] = lim
    return body
