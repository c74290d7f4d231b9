"""A sandbox and what runs in it: commands, detached processes and files."""

from __future__ import annotations

import base64
import math
import time
from typing import TYPE_CHECKING, Any, BinaryIO, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union

from ._transport import Response, iter_ndjson
from .errors import AgentboxError, ConnectionLostError, NotFoundError, OutputDroppedError, UnavailableError, error_from, invalid_argument
from .types import (
    ExecResult,
    ExitStatus,
    FileInfo,
    OutputChunk,
    ProcessInfo,
    SandboxInfo,
    Snapshot,
    parse_time,
)

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Sandbox", "ExecStream", "Process", "OutputStream", "Files"]

#: A command: an argv (run without a shell) or a string run by /bin/sh -c.
Command = Union[str, Sequence[str]]
#: Environment entries: a mapping, or "KEY=VALUE" strings.
Env = Union[Mapping[str, str], Sequence[str], None]
#: Data to upload: bytes, text (UTF-8), a binary file-like object or an
#: iterable of bytes (both streamed, chunked).
Data = Union[bytes, bytearray, memoryview, str, BinaryIO, Iterable[bytes]]


def env_list(env: Env) -> List[str]:
    """Environment entries as the API's "KEY=VALUE" strings."""
    if env is None:
        return []
    if isinstance(env, Mapping):
        return ["%s=%s" % (k, v) for k, v in env.items()]
    return [str(e) for e in env]


def exec_body(
    cmd: Command,
    stdin: Union[bytes, str, None] = None,
    env: Env = None,
    cwd: Optional[str] = None,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    timeout: Optional[float] = None,
    stdin_open: bool = False,
    user: Optional[str] = None,
) -> Dict[str, Any]:
    """The ExecRequest JSON of a command (see :meth:`Sandbox.exec`)."""
    if isinstance(cmd, str):
        argv = ["/bin/sh", "-c", cmd]
    else:
        argv = [str(a) for a in cmd]
    if not argv:
        raise invalid_argument("cmd is empty: give an argv such as ['ls', '-l'] or a shell string")
    body: Dict[str, Any] = {"cmd": argv}
    if env:
        body["env"] = env_list(env)
    if cwd:
        body["cwd"] = cwd
    if uid is not None:
        body["uid"] = uid
    if gid is not None:
        body["gid"] = gid
    if user:
        if uid is not None or gid is not None:
            raise invalid_argument("give user= or uid=/gid=, not both")
        body["user"] = user
    if timeout is not None:
        if timeout <= 0:
            raise invalid_argument("timeout %r: want seconds > 0 (None: the sandbox's default)" % timeout)
        body["timeout_ms"] = int(math.ceil(timeout * 1000))
    if stdin is not None:
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        body["stdin"] = base64.b64encode(bytes(stdin)).decode("ascii")
    if stdin_open:
        body["stdin_open"] = True
    return body


def _octal(mode: Optional[int]) -> Optional[str]:
    if mode is None:
        return None
    if not 0 <= mode <= 0o7777:
        raise invalid_argument("mode %r: want permission bits 0 to 0o7777, e.g. 0o644" % mode)
    return "%04o" % mode


_S = TypeVar("_S", bound="_EventStream")


class _EventStream:
    """What :class:`ExecStream` and :class:`OutputStream` share: the
    connection, closing it, and the events that end the stream."""

    _resp: Optional[Response]
    _done: bool
    exit: Optional[ExitStatus]

    def _finish(self) -> None:
        """Marks the stream ended and closes its connection."""
        self._done = True
        if self._resp is not None:
            self._resp.close()

    def _ended(self, ev: Dict[str, Any], what: str) -> bool:
        """Whether ev ends the stream: an "exit" event sets :attr:`exit`;
        an "error" event raises the daemon's error (what names the stream
        when it gives no message)."""
        t = ev.get("type")
        if t == "exit":
            self.exit = ExitStatus.from_json(ev.get("exit") or {})
            self._finish()
            return True
        if t == "error":
            self._finish()
            e = ev.get("error") or {}
            raise error_from(e.get("code", "internal"), e.get("message", what + " ended with an error"), None, e.get("details"))
        return False

    def __iter__(self: _S) -> _S:
        return self

    def close(self) -> None:
        """Stops reading and closes the connection: a command of
        :meth:`Sandbox.exec_stream` still running is killed; a detached
        process runs on."""
        self._finish()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ExecStream(_EventStream):
    """The output of a running command, chunk by chunk, in the order the
    daemon sent it (stdout and stderr interleaved as they were written).

    Iterate it for :class:`OutputChunk` values; when the iteration ends,
    :attr:`exit` holds how the command ended. :meth:`result` collects what
    is left. Closing the stream before the end (or leaving a ``with``
    block) closes the connection, which kills the command.
    """

    def __init__(self, resp: Response) -> None:
        self._resp = resp
        self._events = iter(iter_ndjson(resp))
        self._done = False
        #: The command's exec id in the sandbox's history and audit.
        self.exec_id = ""
        #: The guest process id.
        self.pid = 0
        #: How the command ended, once the stream is read to its end.
        self.exit: Optional[ExitStatus] = None
        self._pending: Optional[Dict[str, Any]] = None
        first = self._next_event()
        if first is not None and first.get("type") == "started":
            self.exec_id = first.get("exec_id", "")
            self.pid = first.get("pid", 0)
        else:
            self._pending = first

    def _next_event(self) -> Optional[Dict[str, Any]]:
        try:
            return next(self._events)
        except StopIteration:
            return None

    def __next__(self) -> OutputChunk:
        while not self._done:
            ev: Optional[Dict[str, Any]]
            if self._pending is not None:
                ev, self._pending = self._pending, None
            else:
                ev = self._next_event()
            if ev is None:
                self._finish()
                raise ConnectionLostError(
                    "the daemon closed the exec stream before the command's exit status", code="unavailable"
                )
            t = ev.get("type")
            if t in ("stdout", "stderr"):
                return OutputChunk.from_event(ev)
            if self._ended(ev, "exec"):
                break
            # "started" again or a type of a newer daemon: skip it.
        raise StopIteration

    def result(self) -> ExecResult:
        """Reads the rest of the stream and returns the collected result
        (output already iterated is not in it)."""
        out, err = bytearray(), bytearray()
        for c in self:
            (out if c.stream == "stdout" else err).extend(c.data)
        assert self.exit is not None
        x = self.exit
        return ExecResult(
            stdout=bytes(out),
            stderr=bytes(err),
            exit_code=x.exit_code,
            signal=x.signal,
            timed_out=x.timed_out,
            error=x.error,
            duration_ms=x.duration_ms,
            exec_id=self.exec_id,
            pid=self.pid,
        )


class OutputStream(_EventStream):
    """The output of a detached process from an offset, chunk by chunk.
    Closing it stops reading; the process runs on.

    Without ``follow`` it ends with the output there is now; with it, it
    ends when the process ends (:attr:`exit` is then set). A followed
    stream cut by the daemon (a restart, a shutdown) is resumed from the
    next offset for up to ``reconnect`` seconds, so no byte is lost or
    repeated while the guest's ring (the last 1 MiB) still holds it.
    """

    def __init__(self, process: "Process", offset: int, follow: bool, reconnect: float) -> None:
        self._process = process
        self._follow = follow
        self._reconnect = reconnect
        self._resp: Optional[Response] = None
        self._events: Optional[Iterator[Dict[str, Any]]] = None
        self._done = False
        #: The offset of the next byte expected.
        self.offset = offset
        #: How the process ended, when the stream saw it.
        self.exit: Optional[ExitStatus] = None
        #: How many times the stream was opened again after a cut.
        self.reconnects = 0
        self._open()

    def _open(self) -> None:
        self._resp = self._process._sandbox._client._request(
            "process_output",
            self._process._params(),
            query={"offset": self.offset, "follow": self._follow},
        )
        self._events = iter(iter_ndjson(self._resp))

    def _reopen(self, cause: BaseException) -> None:
        """Opens the stream again from self.offset, retrying while the
        daemon cannot be reached, for up to reconnect seconds."""
        deadline = time.monotonic() + self._reconnect
        delay = 0.1
        while True:
            try:
                self._open()
                self.reconnects += 1
                return
            except UnavailableError as e:
                cause = e
            if time.monotonic() + delay > deadline:
                raise ConnectionLostError(
                    "the output stream of process %s was cut at offset %d and could not be resumed within %g s: %s"
                    % (self._process.id, self.offset, self._reconnect, cause),
                    code="unavailable",
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def __next__(self) -> OutputChunk:
        while not self._done:
            assert self._events is not None
            try:
                ev = next(self._events)
            except StopIteration:
                ev = None
                cut: Optional[BaseException] = None
            except ConnectionLostError as e:
                ev, cut = None, e
            if ev is None:
                if self._resp is not None:
                    self._resp.close()
                if not self._follow:
                    self._done = True
                    break
                if self._reconnect <= 0:
                    self._done = True
                    raise cut or ConnectionLostError(
                        "the output stream of process %s ended before the process did (resume from offset %d)"
                        % (self._process.id, self.offset),
                        code="unavailable",
                    )
                self._reopen(cut or ConnectionLostError("stream ended", code="unavailable"))
                continue
            t = ev.get("type")
            if t in ("stdout", "stderr"):
                c = OutputChunk.from_event(ev)
                if c.offset < self.offset:  # sent again after a resume
                    c = OutputChunk(c.stream, c.data[self.offset - c.offset :], self.offset)
                if not c.data:
                    continue
                self.offset = c.offset + len(c.data)
                return c
            if self._ended(ev, "output"):
                break
        raise StopIteration

    def read(self) -> bytes:
        """All remaining output, both streams together, as bytes."""
        return b"".join(c.data for c in self)


class Process:
    """A detached process in a sandbox (kept by the guest agent: it survives
    daemon restarts). :attr:`info` is the daemon's last description."""

    def __init__(self, sandbox: "Sandbox", info: ProcessInfo) -> None:
        self._sandbox = sandbox
        self.info = info

    @property
    def id(self) -> str:
        """The process id in the API (also its exec id)."""
        return self.info.id

    @property
    def pid(self) -> int:
        """The guest process id."""
        return self.info.pid

    @property
    def state(self) -> str:
        """running, exited or lost (as of :attr:`info`)."""
        return self.info.state

    def __repr__(self) -> str:
        return "Process(id=%r, pid=%r, state=%r)" % (self.id, self.pid, self.state)

    def _params(self) -> Dict[str, str]:
        return {"id": self._sandbox.id, "pid": self.id}

    def refresh(self) -> ProcessInfo:
        """Fetches the process's current description."""
        self.info = ProcessInfo.from_json(self._sandbox._client._json("get_process", self._params()))
        return self.info

    def output(self, offset: int = 0, follow: bool = False, reconnect: float = 60.0) -> OutputStream:
        """Its output from offset (in the combined output of stdout and
        stderr) as an iterator of chunks; with follow, until it ends.
        Raises :class:`~agentbox.OutputDroppedError` when offset fell out
        of the guest's ring."""
        return OutputStream(self, offset, follow, reconnect)

    def wait(self, reconnect: float = 60.0) -> ExitStatus:
        """Waits until the process ends and returns how (its output is not
        kept). Raises :class:`~agentbox.AgentboxError` for a lost process."""
        info = self.refresh()
        while info.state == "running":
            # Follow from the end of its output to learn of its end; output
            # made faster than read here falls out of the ring: follow on
            # from the new end.
            try:
                s = self.output(offset=info.output_bytes, follow=True, reconnect=reconnect)
                for _ in s:
                    pass
                if s.exit is not None:
                    break
            except OutputDroppedError:
                pass
            info = self.refresh()
        info = self.refresh()
        if info.exit is None:
            raise AgentboxError("process %s is %s: its end is unknown" % (self.id, info.state), code="internal")
        return info.exit

    def write_stdin(self, data: Data, close: bool = False) -> int:
        """Writes data to its stdin (it must have been started with
        ``stdin_open=True``) and returns how many bytes reached it; with
        close, closes its stdin afterwards. A file-like object or iterable
        is streamed."""
        body: Any = data.encode("utf-8") if isinstance(data, str) else data
        query = {"close": close, "resume": self._sandbox.auto_resume}
        out = self._sandbox._client._json("process_stdin", self._params(), query=query, body=body, content_type="application/octet-stream")
        return int(out.get("bytes", 0))

    def close_stdin(self) -> None:
        """Closes its stdin (it reads end of file)."""
        self.write_stdin(b"", close=True)

    def kill(self, signal: Union[str, int] = "KILL") -> None:
        """Sends signal (a name like "TERM" or a number) to its process
        group."""
        self._sandbox._client._request(
            "kill_process", self._params(), query={"resume": self._sandbox.auto_resume}, json_body={"signal": str(signal)}
        ).close()


class Files:
    """The files of a sandbox (``sandbox.files``). Paths are absolute guest
    paths."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    def _q(self, path: str, **extra: Any) -> Dict[str, Any]:
        q: Dict[str, Any] = {"path": path, "resume": self._sandbox.auto_resume}
        q.update(extra)
        return q

    def write(
        self, path: str, data: Data, mode: Optional[int] = None, parents: bool = False, owner: Optional[str] = None
    ) -> FileInfo:
        """Writes data to the file path, replacing it atomically, with
        permission bits mode (default 0o644); parents creates missing
        parent directories; owner (a guest account name or numeric uid)
        owns the file and the directories made (default the guest agent's
        user). A file-like object or an iterable of bytes is
        streamed with chunked transfer encoding, a block at a time, so
        memory stays bounded whatever its size."""
        body: Any = data.encode("utf-8") if isinstance(data, str) else data
        q = self._q(path, mode=_octal(mode), parents=parents, owner=owner)
        d = self._sandbox._client._json(
            "upload_file", {"id": self._sandbox.id}, query=q, body=body, content_type="application/octet-stream"
        )
        return FileInfo.from_json(d)

    upload = write

    def download(self, path: str, writer: BinaryIO) -> FileInfo:
        """Streams the regular file path into writer (anything with a
        ``write(bytes)`` method), 64 KiB at a time, and returns its info.
        Raises :class:`~agentbox.ConnectionLostError` when the download is
        cut short."""
        resp = self._sandbox._client._request("download_file", {"id": self._sandbox.id}, query=self._q(path))
        with resp:
            length = int(resp.header("Content-Length", "-1"))
            n = 0
            while True:
                block = resp.read(64 * 1024)
                if not block:
                    break
                writer.write(block)
                n += len(block)
            if length >= 0 and n != length:
                raise ConnectionLostError("downloading %s: got %d of %d bytes" % (path, n, length), code="unavailable")
        clean = "/" + "/".join(p for p in path.split("/") if p and p != ".")
        return FileInfo(
            name=clean.rsplit("/", 1)[-1],
            path=clean,
            type="file",
            size=n,
            mode=resp.header("X-Agentbox-Mode"),
            mod_time=parse_time(resp.header("X-Agentbox-Mod-Time")) if resp.header("X-Agentbox-Mod-Time") else None,
        )

    def read(self, path: str) -> bytes:
        """The whole content of the regular file path (held in memory: use
        :meth:`download` for large files)."""
        resp = self._sandbox._client._request("download_file", {"id": self._sandbox.id}, query=self._q(path))
        with resp:
            length = int(resp.header("Content-Length", "-1"))
            data = resp.read()
        if length >= 0 and len(data) != length:
            raise ConnectionLostError("downloading %s: got %d of %d bytes" % (path, len(data), length), code="unavailable")
        return data

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of path decoded as text."""
        return self.read(path).decode(encoding)

    def stat(self, path: str) -> FileInfo:
        """Describes path (without following a final symlink)."""
        return FileInfo.from_json(self._sandbox._client._json("stat_file", {"id": self._sandbox.id}, query=self._q(path)))

    def exists(self, path: str) -> bool:
        """Whether path exists."""
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def list(self, path: str, depth: Optional[int] = None) -> List[FileInfo]:
        """The entries of the directory path, sorted by name; with depth > 1
        (levels, at most 64) each subdirectory's entries follow it
        (symbolic links are not followed)."""
        d = self._sandbox._client._json("list_files", {"id": self._sandbox.id}, query=self._q(path, depth=depth))
        return [FileInfo.from_json(f) for f in d.get("files") or []]

    def mkdir(self, path: str, mode: Optional[int] = None, parents: bool = False, owner: Optional[str] = None) -> None:
        """Creates the directory path (mode default 0o755); parents: also
        missing parents, and no error when it exists (mkdir -p); owner (a
        guest account name or numeric uid) owns the directories made."""
        body: Dict[str, Any] = {"path": path}
        if mode is not None:
            body["mode"] = _octal(mode)
        if parents:
            body["parents"] = True
        if owner:
            body["owner"] = owner
        self._sandbox._client._request(
            "mkdir", {"id": self._sandbox.id}, query={"resume": self._sandbox.auto_resume}, json_body=body
        ).close()

    def move(self, source: str, destination: str, parents: bool = False, owner: Optional[str] = None) -> FileInfo:
        """Renames source to destination (rename(2): atomic, on one guest
        filesystem; an existing file at destination is replaced) and
        returns the destination's info. parents creates missing parent
        directories of destination, owned by owner when given."""
        body: Dict[str, Any] = {"source": source, "destination": destination}
        if parents:
            body["parents"] = True
        if owner:
            body["owner"] = owner
        d = self._sandbox._client._json(
            "move_file", {"id": self._sandbox.id}, query={"resume": self._sandbox.auto_resume}, json_body=body
        )
        return FileInfo.from_json(d)

    rename = move

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes path; a directory with its content when recursive."""
        self._sandbox._client._request(
            "remove_file", {"id": self._sandbox.id}, query=self._q(path, recursive=recursive)
        ).close()


class Sandbox:
    """A handle on one sandbox. :attr:`info` is the daemon's last
    description of it (refreshed by every call that answers with one).

    Used as a context manager it is removed (forcibly) when the block
    ends::

        with client.create(image=img) as sb:
            print(sb.exec(["uname", "-a"]).stdout)
    """

    def __init__(self, client: "Client", info: SandboxInfo) -> None:
        self._client = client
        self.info = info
        #: Send ``?resume=true`` with exec, process and file calls: a paused
        #: sandbox is resumed first instead of answering 409
        #: sandbox_not_running.
        self.auto_resume = False
        #: The sandbox's files.
        self.files = Files(self)

    @property
    def id(self) -> str:
        """The sandbox ID (12 hex digits)."""
        return self.info.id

    @property
    def name(self) -> str:
        """Its name ("" when it has none)."""
        return self.info.name

    @property
    def state(self) -> str:
        """Its state as of :attr:`info`."""
        return self.info.state

    def __repr__(self) -> str:
        return "Sandbox(id=%r, name=%r, state=%r)" % (self.id, self.name, self.state)

    def _p(self) -> Dict[str, str]:
        return {"id": self.id}

    def _update(self, d: Dict[str, Any]) -> "Sandbox":
        self.info = SandboxInfo.from_json(d)
        return self

    # --- lifecycle ----------------------------------------------------------

    def refresh(self) -> SandboxInfo:
        """Fetches its current description."""
        self._update(self._client._json("get_sandbox", self._p()))
        return self.info

    def stop(self) -> "Sandbox":
        """Powers the VM off; the record, console log and disk stay
        (:meth:`start` boots it again)."""
        return self._update(self._client._json("stop_sandbox", self._p()))

    def start(self) -> "Sandbox":
        """Boots a stopped (or failed) sandbox again on its disk: same ID,
        name, limits and network; files kept, processes gone."""
        return self._update(self._client._json("start_sandbox", self._p()))

    def pause(self, to_disk: bool = False, end_ttl: bool = False) -> "Sandbox":
        """Pauses it: in memory (vCPUs stopped), or with to_disk its machine
        saved into its disk and its QEMU ended (host memory freed). With
        end_ttl the TTL ends with the pause (the sandbox stays paused until
        a new :meth:`set_timeout` or its removal); else it runs on."""
        body: Dict[str, Any] = {}
        if to_disk:
            body["to_disk"] = True
        if end_ttl:
            body["end_ttl"] = True
        return self._update(self._client._json("pause_sandbox", self._p(), json_body=body))

    def resume(self) -> "Sandbox":
        """Resumes a paused sandbox in place."""
        return self._update(self._client._json("resume_sandbox", self._p()))

    def set_timeout(self, seconds: float) -> "Sandbox":
        """Makes it expire seconds from now (rounded up to a second),
        longer or shorter than before; ``info.expires_at`` shows it."""
        s = int(math.ceil(seconds))
        if s < 1:
            raise invalid_argument("timeout %r: want at least 1 second" % seconds)
        return self._update(self._client._json("set_timeout", self._p(), json_body={"timeout_seconds": s}))

    def remove(self, force: bool = False) -> None:
        """Removes it and everything it holds. A running sandbox needs
        force (else :class:`~agentbox.SandboxRunningError`)."""
        self._client._request("delete_sandbox", self._p(), query={"force": force}).close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.remove(force=True)
        except NotFoundError:
            pass

    # --- commands -----------------------------------------------------------

    def exec_stream(
        self,
        cmd: Command,
        stdin: Union[bytes, str, None] = None,
        env: Env = None,
        cwd: Optional[str] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
        timeout: Optional[float] = None,
        user: Optional[str] = None,
    ) -> ExecStream:
        """Starts cmd and returns its output as a stream of chunks (see
        :class:`ExecStream`); arguments as :meth:`exec`'s."""
        body = exec_body(cmd, stdin=stdin, env=env, cwd=cwd, uid=uid, gid=gid, timeout=timeout, user=user)
        resp = self._client._request("exec", self._p(), query={"resume": self.auto_resume}, json_body=body)
        return ExecStream(resp)

    def exec(
        self,
        cmd: Command,
        stdin: Union[bytes, str, None] = None,
        env: Env = None,
        cwd: Optional[str] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
        timeout: Optional[float] = None,
        user: Optional[str] = None,
    ) -> ExecResult:
        """Runs cmd and returns its collected output and exit status.

        cmd is an argv (run without a shell) or a string (run by
        ``/bin/sh -c``). stdin (bytes or text) is given to the command
        whole (None: /dev/null); env adds variables (a mapping or
        "KEY=VALUE" strings); cwd is its absolute working directory; uid
        and gid the user and group it runs as, or user a guest account
        (from its /etc/passwd: uid, gid, HOME, USER, cwd default its home;
        an unknown one exits 126); timeout (seconds) kills it
        when reached (``timed_out`` and exit code 124). A non-zero exit is
        not an exception: look at ``exit_code``.
        """
        with self.exec_stream(cmd, stdin=stdin, env=env, cwd=cwd, uid=uid, gid=gid, timeout=timeout, user=user) as s:
            return s.result()

    def start_process(
        self,
        cmd: Command,
        stdin: Union[bytes, str, None] = None,
        stdin_open: bool = False,
        env: Env = None,
        cwd: Optional[str] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
        timeout: Optional[float] = None,
        user: Optional[str] = None,
    ) -> Process:
        """Starts cmd detached and returns at once. With stdin_open its
        stdin stays open for :meth:`Process.write_stdin`; other arguments
        as :meth:`exec`'s."""
        body = exec_body(cmd, stdin=stdin, env=env, cwd=cwd, uid=uid, gid=gid, timeout=timeout, stdin_open=stdin_open, user=user)
        d = self._client._json("start_process", self._p(), query={"resume": self.auto_resume}, json_body=body)
        return Process(self, ProcessInfo.from_json(d))

    def processes(self) -> List[Process]:
        """Its detached processes, oldest first."""
        d = self._client._json("list_processes", self._p())
        return [Process(self, ProcessInfo.from_json(p)) for p in d.get("processes") or []]

    def process(self, process_id: str) -> Process:
        """The detached process with that id."""
        d = self._client._json("get_process", {"id": self.id, "pid": process_id})
        return Process(self, ProcessInfo.from_json(d))

    # --- snapshots ----------------------------------------------------------

    def snapshot(self, name: str) -> Snapshot:
        """Saves the running sandbox (memory, devices, disk) as snapshot
        name; it keeps running. :meth:`Client.restore` starts new
        sandboxes from it."""
        return Snapshot.from_json(self._client._json("save_snapshot", self._p(), json_body={"name": name}))
