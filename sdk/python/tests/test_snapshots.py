"""Snapshots, restore (one and several) and warm templates against a real
daemon. Runs after test_restart.py: the session's client and sandbox are
the ones used before the daemon's restart."""

from __future__ import annotations

import pytest

import agentbox


def test_snapshot_restore_delete(client: agentbox.Client, sb: agentbox.Sandbox) -> None:
    sb.files.write("/root/state", b"before")
    snap = sb.snapshot("pysdk-snap")
    assert snap.name == "pysdk-snap" and snap.sandbox == sb.id and snap.vmstate_bytes > 0 and len(snap.id) == 12
    sb.files.write("/root/state", b"after")  # the source goes on; the snapshot keeps "before"
    assert client.get_snapshot("pysdk-snap").id == snap.id
    assert client.get_snapshot(snap.id).name == "pysdk-snap"
    assert [s.name for s in client.list_snapshots(sandbox="pysdk")] == ["pysdk-snap"]
    assert "pysdk-snap" in [s.name for s in client.list_snapshots()]
    with pytest.raises(agentbox.NameTakenError) as ei:
        sb.snapshot("pysdk-snap")
    assert (ei.value.code, ei.value.status) == ("name_taken", 409)

    with client.restore("pysdk-snap", name="pysdk-fork", labels={"suite": "pysdk"}, ttl=1800) as fork:
        assert fork.state == "running" and fork.name == "pysdk-fork" and fork.id != sb.id
        assert fork.info.limits.ttl_seconds == 1800
        assert fork.files.read("/root/state") == b"before"
        assert sb.files.read("/root/state") == b"after"

    forks = client.restore_many("pysdk-snap", 2, name="pysdk-many", labels={"suite": "pysdk", "many": "1"})
    try:
        assert sorted(f.name for f in forks) == ["pysdk-many-1", "pysdk-many-2"]
        outs = {f.name: f.exec(["sh", "-c", "cat /root/state; head -c 16 /dev/urandom | od -An -tx1"]).stdout for f in forks}
        assert all(o.startswith(b"before") for o in outs.values())
        assert len(set(outs.values())) == 2, "the forks' randomness differs"
        assert sorted(s.name for s in client.list(labels={"many": "1"})) == ["pysdk-many-1", "pysdk-many-2"]
    finally:
        for f in forks:
            f.remove(force=True)

    client.delete_snapshot("pysdk-snap")
    with pytest.raises(agentbox.NotFoundError) as e2:
        client.get_snapshot("pysdk-snap")
    assert (e2.value.code, e2.value.status) == ("not_found", 404)
    with pytest.raises(agentbox.NotFoundError):
        client.restore("pysdk-snap")


def test_warm_templates(client: agentbox.Client) -> None:
    with client.create(warm=True, memory_mib=256, labels={"suite": "pysdk"}) as s:
        assert s.exec(["echo", "warm"]).stdout == b"warm\n"
    ts = [t for t in client.list_warm_templates() if t.memory_mib == 256]
    assert len(ts) == 1 and len(ts[0].key) == 24 and ts[0].size_bytes > 0
    client.delete_warm_template(ts[0].key)
    assert ts[0].key not in [t.key for t in client.list_warm_templates()]
    with pytest.raises(agentbox.NotFoundError):
        client.delete_warm_template(ts[0].key)
    with pytest.raises(agentbox.InvalidArgumentError) as ei:
        client.delete_warm_template("not-a-key")
    assert (ei.value.code, ei.value.status) == ("invalid_argument", 400)
