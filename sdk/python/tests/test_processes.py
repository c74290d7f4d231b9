"""Detached processes against a real guest: start, list, get, output with
offset and follow, stdin, kill."""

from __future__ import annotations

import hashlib
import io

import pytest

import agentbox


def test_stdin_output_and_exit(sb: agentbox.Sandbox) -> None:
    p = sb.start_process(["sh", "-c", "while read l; do echo got:$l; echo err:$l >&2; done; exit 7"], stdin_open=True, env={"K": "v"})
    assert p.state == "running" and p.info.stdin_open and p.pid > 0
    assert p.id in [q.id for q in sb.processes()]
    assert p.write_stdin(b"a\n") == 2
    assert p.write_stdin("b\n") == 2
    p.close_stdin()
    ex = p.wait()
    assert ex.exit_code == 7
    info = p.refresh()
    assert info.state == "exited" and not info.stdin_open and info.exit is not None and info.exit.exit_code == 7
    assert sb.process(p.id).info.output_bytes == info.output_bytes == len(b"got:a\nerr:a\ngot:b\nerr:b\n")
    s = p.output()
    chunks = list(s)
    assert s.exit is not None and s.exit.exit_code == 7
    # stdout and stderr are two pipes: their order relative to each other
    # is the guest's, each one's own order is kept.
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"got:a\ngot:b\n"
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"err:a\nerr:b\n"
    # From an offset: the rest only.
    assert p.output(offset=12).read() == b"".join(c.data for c in chunks)[12:]
    # A file-like body streams to stdin.
    data = bytes(range(256)) * 1200
    q = sb.start_process(["sha256sum"], stdin_open=True)
    assert q.write_stdin(io.BytesIO(data), close=True) == len(data)
    assert q.wait().exit_code == 0
    assert q.output().read() == hashlib.sha256(data).hexdigest().encode() + b"  -\n"


def test_follow_and_kill(sb: agentbox.Sandbox) -> None:
    p = sb.start_process("i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done")
    got = b""
    s = p.output(follow=True)
    for c in s:
        got += c.data
        if got.count(b"\n") >= 10:
            break
    s.close()
    p.kill("TERM")
    ex = p.wait()
    assert (ex.exit_code, ex.signal) == (143, 15)
    all_out = p.output().read()
    assert all_out.startswith(got)
    lines = all_out.decode().split()
    assert lines == [str(i) for i in range(1, len(lines) + 1)]
    assert p.refresh().state == "exited"


def test_process_errors(sb: agentbox.Sandbox) -> None:
    p = sb.start_process(["sleep", "100"])  # stdin not kept open
    with pytest.raises(agentbox.StdinClosedError) as ei:
        p.write_stdin(b"x")
    assert ei.value.code == "stdin_closed" and ei.value.status == 409 and isinstance(ei.value, agentbox.ConflictError)
    p.kill()
    assert p.wait().signal == 9
    with pytest.raises(agentbox.ProcessExitedError) as ei2:
        p.kill()
    assert ei2.value.code == "process_exited" and ei2.value.status == 409
    with pytest.raises(agentbox.ProcessExitedError):
        p.write_stdin(b"x")
    with pytest.raises(agentbox.NotFoundError) as ei3:
        sb.process("e999999")
    assert ei3.value.code == "not_found" and ei3.value.status == 404
    # Output older than the guest's 1 MiB ring is gone, and says so.
    big = sb.start_process(["head", "-c", "2000000", "/dev/zero"])
    big.wait()
    with pytest.raises(agentbox.OutputDroppedError) as ei4:
        big.output(offset=0).read()
    assert ei4.value.code == "output_dropped" and ei4.value.status == 410
    assert len(big.output(offset=2000000 - 1000).read()) == 1000
