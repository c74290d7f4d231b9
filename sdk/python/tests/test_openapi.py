"""The SDK against vmctl/api/openapi.yaml, the one description of the wire
(no daemon needed): its routes, its request bodies, its dataclasses."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import openapi_check as oa
import pytest

import agentbox
from agentbox import types
from agentbox.client import create_body, restore_body
from agentbox.routes import ROUTES
from agentbox.sandbox import exec_body


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_route_exists_with_its_parameters(name: str) -> None:
    r = ROUTES[name]
    op = oa.operation(r.method, r.path)
    assert op is not None, "%s: %s %s is not in openapi.yaml" % (name, r.method, r.path)
    in_template = set(re.findall(r"\{(\w+)\}", r.path))
    assert in_template == oa.params_in(r.method, r.path, "path")
    undeclared = r.query - oa.params_in(r.method, r.path, "query")
    assert not undeclared, "%s: query parameters %s are not declared for %s %s" % (name, sorted(undeclared), r.method, r.path)


#: The dataclasses and the schemas they decode.
DECODED = [
    (types.ImageRef, "ImageRef"),
    (types.Limits, "Limits"),
    (types.NetworkInfo, "NetworkInfo"),
    (types.PauseInfo, "PauseInfo"),
    (types.SandboxInfo, "Sandbox"),
    (types.ExitStatus, "ExitStatus"),
    (types.ProcessInfo, "Process"),
    (types.FileInfo, "FileInfo"),
    (types.Snapshot, "Snapshot"),
    (types.WarmTemplate, "WarmTemplate"),
    (types.Template, "Template"),
    (types.SecretInfo, "SecretInfo"),
    (types.Capacity, "Capacity"),
    (types.DaemonInfo, "Info"),
]


@pytest.mark.parametrize("cls,schema_name", DECODED, ids=[s for _, s in DECODED])
def test_dataclass_fields_are_the_schema(cls: Any, schema_name: str) -> None:
    """Every field is a property of the schema (same JSON name) and every
    property a field: a field the API adds fails here until the SDK has it."""
    fields = {f.name for f in dataclasses.fields(cls)}
    props = set(oa.resolve(oa.schema(schema_name))["properties"])
    assert fields - props == set(), "%s has fields %s that %s lacks" % (cls.__name__, sorted(fields - props), schema_name)
    assert props - fields == set(), "openapi.yaml's %s has %s: add them to agentbox/types.py %s" % (
        schema_name,
        sorted(props - fields),
        cls.__name__,
    )


def example(sch: Any) -> Any:
    """A value of schema sch with every property set to a non-zero value."""
    sch = oa.resolve(sch)
    if "oneOf" in sch:
        return example(sch["oneOf"][0])
    t = sch.get("type")
    if t == "object" or "properties" in sch:
        if "properties" in sch:
            return {k: example(v) for k, v in sch["properties"].items()}
        addl = sch.get("additionalProperties")
        return {"k": example(addl) if isinstance(addl, dict) else 1}
    if t == "array":
        return [example(sch.get("items", {}))]
    if t == "integer":
        return 7
    if t == "boolean":
        return True
    if t == "string":
        if sch.get("format") == "date-time":
            return "2024-01-02T03:04:05.123456789Z"
        if sch.get("format") == "byte":
            return "aGk="
        if "enum" in sch:
            return [e for e in sch["enum"] if e][-1]
        return "x"
    return "x"


@pytest.mark.parametrize("cls,schema_name", DECODED, ids=[s for _, s in DECODED])
def test_decoders_read_every_field(cls: Any, schema_name: str) -> None:
    """from_json of an object with every property set leaves no field at
    its default: each field is read from its JSON name."""
    obj = cls.from_json(example(oa.schema(schema_name)))
    for f in dataclasses.fields(cls):
        v = getattr(obj, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None  # type: ignore[misc]
        )
        assert v != default and v is not None, "%s.%s was not decoded (%r)" % (cls.__name__, f.name, v)


def test_times_parse_with_nanoseconds() -> None:
    t = types.parse_time("2024-01-02T03:04:05.123456789+02:00")
    assert t is not None and t.microsecond == 123456 and t.utcoffset().total_seconds() == 7200
    assert types.parse_time("2024-01-02T03:04:05Z").tzinfo is not None


def test_create_body_with_every_option_is_a_create_request() -> None:
    body = create_body(
        image="/img",
        name="w1",
        vcpus=2,
        memory_mib=512,
        disk_mib=2048,
        labels={"team": "a"},
        ttl=3600,
        idle_timeout=60.5,
        exec_timeout=1.5,
        max_execs=10,
        idle_action="pause-to-disk",
        paused_ttl=86400,
        network="allowlist",
        allow=["example.com", "host:8080"],
        warm=True,
        accel="tcg",
        boot_timeout=90,
        cpu_quota_percent=50,
        io_bps=1 << 20,
        iops=100,
        io_weight=200,
        pids=128,
        net_bps=1 << 20,
        env={"A": "1"},
        secrets=[types.SecretSpec("TOKEN", "s3cret", ["example.com"])],
        ttl_action="pause",
        priority="high",
    )
    assert oa.validate(body, oa.schema("CreateSandboxRequest")) == []
    assert body["limits"] == {
        "ttl_seconds": 3600,
        "idle_timeout_seconds": 61,
        "exec_timeout_ms": 1500,
        "max_execs": 10,
        "idle_action": "pause-to-disk",
        "paused_ttl_seconds": 86400,
        "ttl_action": "pause",
    }
    assert body["env"] == ["A=1"]
    assert body["secrets"] == [{"name": "TOKEN", "value": "s3cret", "hosts": ["example.com"]}]
    assert body["network"] == {"mode": "allowlist", "allow": ["example.com", "host:8080"]}
    assert body["boot_timeout_ms"] == 90000
    # Every property is set: image, or template instead of it.
    tb = create_body(template="base", name="t1")
    assert tb == {"template": "base", "name": "t1"} and oa.validate(tb, oa.schema("CreateSandboxRequest")) == []
    assert set(oa.schema("CreateSandboxRequest")["properties"]) == set(body) | {"template"}
    assert set(oa.schema("Limits")["properties"]) == set(body["limits"])
    assert set(oa.schema("SecretSpec")["properties"]) == set(body["secrets"][0])


def test_exec_and_restore_bodies() -> None:
    e = exec_body(["sh", "-c", "cat"], stdin=b"\x00\xff", env={"A": "1"}, cwd="/tmp", uid=1000, gid=1000, timeout=2.5, stdin_open=True)
    assert oa.validate(e, oa.schema("ExecRequest")) == []
    assert e["timeout_ms"] == 2500 and e["stdin"] == "AP8=" and e["env"] == ["A=1"]
    assert exec_body("echo hi")["cmd"] == ["/bin/sh", "-c", "echo hi"]
    u = exec_body(["id"], user="nobody")
    assert u == {"cmd": ["id"], "user": "nobody"} and oa.validate(u, oa.schema("ExecRequest")) == []
    r = restore_body("fork", {"a": "b"}, 3, 60, 30, 1, 5, "stop", 100, "pause-to-disk")
    assert r["limits"]["ttl_action"] == "pause-to-disk"
    assert oa.validate(r, oa.schema("RestoreRequest")) == []
    assert set(oa.schema("RestoreRequest")["properties"]) == set(r)


def test_bad_arguments_are_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each is the SDK's InvalidArgumentError (an AgentboxError, as the
    daemon's refusals are, and a ValueError), with no HTTP status."""
    monkeypatch.delenv("AGENTBOX_IMAGE", raising=False)
    for call, match in [
        (lambda: exec_body([]), "cmd is empty"),
        (lambda: exec_body(["true"], timeout=0), "timeout"),
        (lambda: create_body(image=""), "no image"),
        (lambda: create_body(image="/img", template="base"), "not both"),
        (lambda: exec_body(["id"], user="nobody", uid=0), "not both"),
        (lambda: agentbox.Client(socket="/x", url="http://h:1"), "socket= or url="),
        (lambda: agentbox.Client(url="http://h:1/v1"), "want only a scheme, host and port"),
        (lambda: agentbox.Client(url="ftp://h:1"), "http://HOST:PORT"),
        (lambda: agentbox.Client(url="http://h:99999"), "port is not a number"),
    ]:
        with pytest.raises(agentbox.InvalidArgumentError, match=match) as ei:
            call()
        assert isinstance(ei.value, agentbox.AgentboxError) and isinstance(ei.value, ValueError)
        assert (ei.value.code, ei.value.status) == ("invalid_argument", None)


def test_info_checks_the_api_version_against_openapi() -> None:
    """The API version the SDK speaks is the one openapi.yaml describes."""
    assert oa.doc()["info"]["version"] == agentbox.API_VERSION
    assert all(r.path.startswith("/" + agentbox.API_VERSION + "/") for r in ROUTES.values())
