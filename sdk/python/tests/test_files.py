"""Files against a real guest: bytes and streams (50 MiB byte-exact with
bounded memory), list, stat, mkdir, remove, and their errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from typing import Any

import pytest

import agentbox

HERE = os.path.dirname(os.path.abspath(__file__))

SIZE = 50 << 20
#: The most the 50 MiB transfers may add to the interpreter's peak
#: resident memory: well below the file's size (the transfers move 64 KiB
#: blocks).
MAX_GROWTH_KIB = 8 << 10


def test_50_MiB_up_and_down_exact_with_bounded_memory(sb: agentbox.Sandbox, tmp_path: Any) -> None:
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "bigfile.py"), sb.id, str(SIZE), str(tmp_path)],
        check=True,
        stdout=subprocess.PIPE,
        timeout=600,
    ).stdout
    r = json.loads(out)
    assert r["guest"] == r["want"] and r["back"] == r["want"], r
    assert r["up_size"] == r["down_size"] == r["back_size"] == SIZE, r
    assert r["up_mode"] == r["down_mode"] == "0600", r
    growth = r["peak_after_kib"] - r["peak_before_kib"]
    control = r["peak_after_bytes_kib"] - r["peak_before_control_kib"]
    print(
        "50 MiB up and down streamed: peak RSS %d KiB before, %d KiB after (+%d KiB; getrusage ru_maxrss %d KiB); "
        "files.read of it whole: +%d KiB" % (r["peak_before_kib"], r["peak_after_kib"], growth, r["ru_maxrss_after_kib"], control)
    )
    assert growth < MAX_GROWTH_KIB, "the transfers grew the peak RSS by %d KiB (limit %d KiB)" % (growth, MAX_GROWTH_KIB)
    assert r["bytes_read_ok"] and control > 45 << 10, "the control (reading 50 MiB whole) grew the peak by only %d KiB" % control
    sb.files.remove("/root/big.bin")
    sb.files.remove("/root/warm.bin")


def test_bytes_round_trip_and_metadata(sb: agentbox.Sandbox) -> None:
    data = os.urandom(1 << 20) + b"\x00\r\n"
    fi = sb.files.write("/work/sdk/a/b.bin", data, mode=0o640, parents=True)
    assert (fi.name, fi.path, fi.type, fi.size, fi.mode) == ("b.bin", "/work/sdk/a/b.bin", "file", len(data), "0640")
    assert sb.files.read("/work/sdk/a/b.bin") == data
    st = sb.files.stat("/work/sdk/a/b.bin")
    assert (st.size, st.mode, st.type) == (len(data), "0640", "file") and st.mod_time is not None
    buf = io.BytesIO()
    d = sb.files.download("/work/sdk/a/b.bin", buf)
    assert buf.getvalue() == data and d.size == len(data) and d.mode == "0640" and d.mod_time == st.mod_time
    sb.files.write("/work/sdk/t.txt", "héllo\n")
    assert sb.files.read_text("/work/sdk/t.txt") == "héllo\n"
    sb.files.write("/work/sdk/empty", b"")
    assert sb.files.read("/work/sdk/empty") == b""


def test_list_mkdir_remove(sb: agentbox.Sandbox) -> None:
    sb.files.mkdir("/work/ls/x/y", parents=True)
    sb.files.mkdir("/work/ls/m", mode=0o700)
    sb.files.write("/work/ls/f", b"1")
    ls = sb.files.list("/work/ls")
    assert [(f.name, f.type) for f in ls] == [("f", "file"), ("m", "dir"), ("x", "dir")]
    assert [f.mode for f in ls if f.name == "m"] == ["0700"]
    assert sb.files.exists("/work/ls/x/y") and not sb.files.exists("/work/ls/nope")
    sb.files.mkdir("/work/ls/x", parents=True)  # -p: no error when it exists
    sb.files.remove("/work/ls/f")
    sb.files.remove("/work/ls/x", recursive=True)
    assert [f.name for f in sb.files.list("/work/ls")] == ["m"]


def test_file_errors(sb: agentbox.Sandbox) -> None:
    with pytest.raises(agentbox.NotFoundError) as e1:
        sb.files.read("/no/such/file")
    assert (e1.value.code, e1.value.status) == ("not_found", 404)
    with pytest.raises(agentbox.FailedPreconditionError) as e2:
        sb.files.read("/etc")
    assert (e2.value.code, e2.value.status) == ("not_a_file", 422)
    with pytest.raises(agentbox.FailedPreconditionError) as e3:
        sb.files.list("/etc/passwd")
    assert (e3.value.code, e3.value.status) == ("not_a_directory", 422)
    sb.files.mkdir("/work/dup", parents=True)
    with pytest.raises(agentbox.AlreadyExistsError) as e4:
        sb.files.mkdir("/work/dup")
    assert (e4.value.code, e4.value.status) == ("file_exists", 409) and isinstance(e4.value, agentbox.ConflictError)
    with pytest.raises(agentbox.InvalidArgumentError) as e5:
        sb.files.stat("relative/path")
    assert (e5.value.code, e5.value.status) == ("invalid_argument", 400)
    with pytest.raises(agentbox.InvalidArgumentError):
        sb.files.read("/etc/../etc/passwd")
    with pytest.raises(agentbox.NotFoundError):
        sb.files.write("/no/parent/f", b"x")
    with pytest.raises(ValueError):
        sb.files.write("/work/f", b"x", mode=0o70000)


def test_move_deep_list_and_owner(sb: agentbox.Sandbox) -> None:
    sb.files.mkdir("/work/mv/a/b", parents=True)
    sb.files.write("/work/mv/a/f", b"moved", owner="nobody")
    assert (sb.files.stat("/work/mv/a/f").owner, sb.files.stat("/work/mv/a").owner) == ("nobody", "root")
    fi = sb.files.move("/work/mv/a/f", "/work/mv/n/g", parents=True)
    assert (fi.name, fi.path, fi.type, fi.size, fi.owner) == ("g", "/work/mv/n/g", "file", 5, "nobody")
    assert sb.files.read("/work/mv/n/g") == b"moved" and not sb.files.exists("/work/mv/a/f")
    deep = sb.files.list("/work/mv", depth=3)
    assert [(f.path, f.type) for f in deep] == [
        ("/work/mv/a", "dir"),
        ("/work/mv/a/b", "dir"),
        ("/work/mv/n", "dir"),
        ("/work/mv/n/g", "file"),
    ]
    assert [f.name for f in deep] == ["a", "b", "n", "g"]
    assert [f.path for f in sb.files.list("/work/mv")] == ["/work/mv/a", "/work/mv/n"]
    with pytest.raises(agentbox.NotFoundError):
        sb.files.move("/work/mv/nope", "/work/mv/x")
    sb.files.remove("/work/mv", recursive=True)
