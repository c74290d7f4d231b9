"""Sandboxes against a real daemon: create, get, list with filters, stop,
start, pause, resume, timeout, remove, the context manager, and the errors
of each (the right exception with the API's code; nothing left behind)."""

from __future__ import annotations

import datetime as dt

import pytest

import agentbox


def test_info(client: agentbox.Client, image: str) -> None:
    info = client.info()
    assert info.api == "v1" and info.version and info.capacity.memory_mib > 0
    assert client.daemon_version == info.version
    # The harness serves the test image as the template "sdk" (serve --template).
    tpls = client.list_templates()
    assert [(t.name, t.image.dir, t.error) for t in tpls] == [("sdk", image, "")]
    assert tpls[0].vcpus > 0 and tpls[0].memory_mib > 0


def test_create_get_list(client: agentbox.Client, sb: agentbox.Sandbox, image: str) -> None:
    assert sb.state == "running" and sb.name == "pysdk" and len(sb.id) == 12
    assert sb.info.image.dir == image and sb.info.labels == {"suite": "pysdk"} and sb.info.memory_mib == 512
    assert client.get("pysdk").id == sb.id and client.get(sb.id).name == "pysdk"
    assert [s.id for s in client.list(labels={"suite": "pysdk"})] == [sb.id]
    assert client.list(labels={"suite": "other"}) == []
    assert sb.id in [s.id for s in client.list(state="running")]
    assert sb.id not in [s.id for s in client.list(state="stopped")]


def test_lifecycle(client: agentbox.Client) -> None:
    with client.create(
        name="pysdk-life",
        memory_mib=256,
        labels={"suite": "pysdk", "kind": "life"},
        ttl=3600,
        idle_timeout=1800,
        exec_timeout=60,
        max_execs=100,
        idle_action="stop",
        network="none",
    ) as s:
        assert s.info.limits.ttl_seconds == 3600 and s.info.limits.idle_action == "stop"
        assert s.info.network is None or s.info.network.mode == "none"
        s.files.write("/root/keep", b"kept")

        # pause in memory: exec refused with the hint, auto_resume resumes
        assert s.pause().state == "paused" and s.info.paused is not None and not s.info.paused.to_disk
        with pytest.raises(agentbox.SandboxNotRunningError) as ei:
            s.exec(["true"])
        assert (ei.value.code, ei.value.status) == ("sandbox_not_running", 409) and isinstance(ei.value, agentbox.ConflictError)
        with pytest.raises(agentbox.ConflictError) as ei2:
            s.start()
        assert (ei2.value.code, ei2.value.status) == ("conflict", 409)
        assert s.resume().state == "running"
        with pytest.raises(agentbox.ConflictError):
            s.resume()
        assert s.exec(["cat", "/root/keep"]).stdout == b"kept"
        s.pause()
        s.auto_resume = True
        assert s.exec(["echo", "auto"]).stdout == b"auto\n"
        assert s.refresh().state == "running"
        s.auto_resume = False

        # timeout: expires_at moves from now
        before = dt.datetime.now(dt.timezone.utc)
        s.set_timeout(600)
        assert s.info.expires_at is not None
        left = (s.info.expires_at - before).total_seconds()
        assert 590 <= left <= 620, left
        with pytest.raises(ValueError):
            s.set_timeout(0)

        # remove of a running sandbox needs force
        with pytest.raises(agentbox.SandboxRunningError) as ei3:
            s.remove()
        assert (ei3.value.code, ei3.value.status) == ("sandbox_running", 409)

        # stop, then start boots it again on its disk
        assert s.stop().state == "stopped"
        assert client.get("pysdk-life").state == "stopped"
        with pytest.raises(agentbox.SandboxNotRunningError):
            s.files.read("/root/keep")
        assert s.start().state == "running"
        assert s.files.read("/root/keep") == b"kept"
        sid = s.id
    with pytest.raises(agentbox.NotFoundError):
        client.get(sid)


def test_exec_limit(client: agentbox.Client, image: str) -> None:
    # Also the create from a daemon template, with an environment for every command.
    with client.create(template="sdk", env={"SDK_ENV": "from create"}, memory_mib=256, max_execs=1, labels={"suite": "pysdk"}) as s:
        assert (s.info.template, s.info.image.dir) == ("sdk", image)
        r = s.exec(["sh", "-c", 'echo "$SDK_ENV"'])
        assert (r.stdout, r.exit_code) == (b"from create\n", 0), r
        with pytest.raises(agentbox.ExecLimitReachedError) as ei:
            s.exec(["true"])
        assert (ei.value.code, ei.value.status) == ("exec_limit_reached", 429)
        assert isinstance(ei.value, agentbox.ResourceExhaustedError)


def test_errors_leave_nothing_behind(client: agentbox.Client, sb: agentbox.Sandbox, tmp_path: object) -> None:
    before = sorted(s.id for s in client.list())
    with pytest.raises(agentbox.NotFoundError) as e1:
        client.get("no-such-sandbox")
    assert (e1.value.code, e1.value.status) == ("not_found", 404) and "agentbox ls" in e1.value.message
    with pytest.raises(agentbox.NameTakenError) as e2:
        client.create(name="pysdk")
    assert (e2.value.code, e2.value.status) == ("name_taken", 409)
    assert isinstance(e2.value, agentbox.ConflictError) and isinstance(e2.value, agentbox.AlreadyExistsError)
    with pytest.raises(agentbox.InvalidArgumentError) as e3:
        client.create(name="bad name!")
    assert (e3.value.code, e3.value.status) == ("invalid_argument", 400)
    with pytest.raises(agentbox.InvalidArgumentError) as e4:
        client.create(memory_mib=100)
    assert (e4.value.code, e4.value.status) == ("invalid_argument", 400) and "256" in e4.value.message
    with pytest.raises(agentbox.InvalidArgumentError) as e5:
        client.create(image=str(tmp_path))
    assert (e5.value.code, e5.value.status) == ("invalid_image", 422)
    with pytest.raises(agentbox.TemplateNotFoundError) as e7:
        client.create(template="no-such-template")
    assert (e7.value.code, e7.value.status) == ("template_not_found", 404) and "sdk" in e7.value.message
    assert isinstance(e7.value, agentbox.NotFoundError)
    with pytest.raises(agentbox.InvalidArgumentError) as e6:
        client.list(state="sleeping")
    assert e6.value.status == 400
    with pytest.raises(agentbox.NotFoundError):
        agentbox.Sandbox(client, agentbox.SandboxInfo(id="000000000000", state="running")).exec(["true"])
    assert sorted(s.id for s in client.list()) == before
