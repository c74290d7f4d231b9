"""exec against a real guest: the collected result, the stream in order,
stdin, env, cwd, user, timeout."""

from __future__ import annotations

import hashlib
import threading

import agentbox


def test_collected_result(sb: agentbox.Sandbox) -> None:
    r = sb.exec(["python3", "-c", "print(6*7)"])
    assert (r.stdout, r.stderr, r.exit_code, r.signal, r.timed_out) == (b"42\n", b"", 0, 0, False)
    assert r.ok and r.exec_id.startswith("e") and r.pid > 0
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == (b"out\n", b"err\n", 3, False)


def test_stdin_env_cwd_user(sb: agentbox.Sandbox) -> None:
    data = bytes(range(256)) * 1000
    r = sb.exec(["sha256sum"], stdin=data)
    assert r.stdout.decode().split()[0] == hashlib.sha256(data).hexdigest()
    r = sb.exec(["sh", "-c", 'echo "$A|$B"; pwd; id -u; id -g'], env={"A": "1", "B": "two words"}, cwd="/tmp", uid=1234, gid=4321)
    assert r.stdout == b"1|two words\n/tmp\n1234\n4321\n", r
    r = sb.exec(["sh", "-c", "echo $X"], env=["X=y"])
    assert r.stdout == b"y\n"
    r = sb.exec(["cat"], stdin="text é")
    assert r.stdout == "text é".encode()
    r = sb.exec(["sh", "-c", 'id -un; echo "$USER"'], user="nobody")
    assert r.stdout == b"nobody\nnobody\n", r
    r = sb.exec(["true"], user="no-such-user")
    assert r.exit_code == 126, r


def test_timeout_and_signals_and_start_failures(sb: agentbox.Sandbox) -> None:
    r = sb.exec(["sleep", "30"], timeout=1)
    assert r.timed_out and r.exit_code == 124, r
    r = sb.exec(["sh", "-c", "kill -TERM $$"])
    assert (r.exit_code, r.signal) == (143, 15)
    r = sb.exec(["no-such-command-here"])
    assert r.exit_code == 127 and "not found" in r.error, r


def test_stream_keeps_the_order_of_stdout_and_stderr(sb: agentbox.Sandbox) -> None:
    """Chunks come in the order the command wrote them across both streams,
    with offsets counting both together."""
    script = "for i in 1 2 3 4 5; do echo out$i; sleep 0.5; echo err$i >&2; sleep 0.5; done; exit 5"
    with sb.exec_stream(["sh", "-c", script]) as s:
        assert s.exec_id and s.pid > 0
        chunks = list(s)
        assert s.exit is not None and s.exit.exit_code == 5
    runs = []
    for c in chunks:
        if runs and runs[-1][0] == c.stream:
            runs[-1] = (c.stream, runs[-1][1] + c.data)
        else:
            runs.append((c.stream, c.data))
    want = []
    for i in range(1, 6):
        want += [("stdout", b"out%d\n" % i), ("stderr", b"err%d\n" % i)]
    assert runs == want
    off = 0
    for c in chunks:
        assert c.offset == off
        off += len(c.data)


def test_stream_is_live(sb: agentbox.Sandbox) -> None:
    """The first chunk arrives while the command still runs: it waits for a
    file that a second exec makes only after the chunk was received."""
    sb.exec(["rm", "-f", "/tmp/go"])
    with sb.exec_stream("echo ready; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo done") as s:
        first = next(iter(s))
        assert (first.stream, first.data) == ("stdout", b"ready\n")
        assert sb.exec(["touch", "/tmp/go"]).ok
        r = s.result()
        assert r.stdout == b"done\n" and r.exit_code == 0


def test_closing_a_stream_kills_the_command(sb: agentbox.Sandbox) -> None:
    s = sb.exec_stream("echo $$ > /tmp/killme.pid; echo up; exec sleep 1000")
    assert next(iter(s)).data == b"up\n"
    s.close()
    r = sb.exec("for i in $(seq 100); do kill -0 $(cat /tmp/killme.pid) 2>/dev/null || { echo gone; exit 0; }; sleep 0.1; done; echo alive")
    assert r.stdout == b"gone\n"


def test_large_output_is_exact(sb: agentbox.Sandbox) -> None:
    r = sb.exec(["sh", "-c", "head -c 3000000 /dev/urandom > /tmp/rand; sha256sum < /tmp/rand >&2; cat /tmp/rand"])
    assert len(r.stdout) == 3000000
    assert r.stderr.decode().split()[0] == hashlib.sha256(r.stdout).hexdigest()


def test_concurrent_execs_on_one_client(sb: agentbox.Sandbox) -> None:
    out = {}

    def run(i: int) -> None:
        out[i] = sb.exec(["sh", "-c", "sleep 0.3; echo %d" % i]).stdout

    ts = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out == {i: b"%d\n" % i for i in range(6)}
