"""A daemon restart mid-session: the harness kill -9s the daemon while a
followed output stream is open and starts it again; the stream resumes
where it was cut (no byte lost or repeated), and the same client and
sandbox handle keep working."""

from __future__ import annotations

from conftest import restart_daemon

import agentbox


def test_client_survives_a_daemon_restart(client: agentbox.Client, sb: agentbox.Sandbox) -> None:
    sb.files.write("/root/before-restart", b"x")
    p = sb.start_process("i=0; while [ $i -lt 150 ]; do i=$((i+1)); echo $i; sleep 0.04; done; exit 4")
    s = p.output(follow=True)
    got = b""
    for c in s:
        got += c.data
        if got.count(b"\n") >= 10:
            break

    restart_daemon()

    for c in s:  # the stream was cut by the kill; it resumes from its offset
        got += c.data
    assert s.exit is not None and s.exit.exit_code == 4
    assert s.reconnects >= 1
    assert got.decode().split() == [str(i) for i in range(1, 151)]

    # The same client and handle, on connections made to the new daemon.
    assert client.info().api == "v1"
    assert sb.refresh().state == "running"
    assert sb.exec(["cat", "/root/before-restart"]).stdout == b"x"
    assert sb.files.stat("/root/before-restart").size == 1
    assert p.refresh().state == "exited" and p.info.exit is not None and p.info.exit.exit_code == 4
    assert [q.id for q in sb.processes() if q.id == p.id] == [p.id]
    assert sb.id in [x.id for x in client.list()]
