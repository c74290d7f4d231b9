"""The in-tree build backend makes an installable wheel of the package
(offline: it needs nothing but the standard library)."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import zipfile
from typing import Any

import agentbox

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, SDK)

import build_backend  # noqa: E402


def test_wheel(tmp_path: Any) -> None:
    assert build_backend.get_requires_for_build_wheel() == []
    name = build_backend.build_wheel(str(tmp_path))
    assert name == "agentbox-%s-py3-none-any.whl" % agentbox.__version__
    with zipfile.ZipFile(os.path.join(str(tmp_path), name)) as z:
        names = set(z.namelist())
        for mod in ("__init__", "client", "sandbox", "errors", "types", "routes", "_transport"):
            assert "agentbox/%s.py" % mod in names
        assert "agentbox/py.typed" in names
        di = "agentbox-%s.dist-info/" % agentbox.__version__
        meta = z.read(di + "METADATA").decode()
        assert "Version: %s\n" % agentbox.__version__ in meta and "Requires-Python: >=3.9" in meta and "Requires-Dist" not in meta
        for line in z.read(di + "RECORD").decode().splitlines():
            path, digest, size = line.split(",")
            if path.endswith("RECORD"):
                continue
            data = z.read(path)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() and int(size) == len(data)


def test_sdist_and_editable(tmp_path: Any) -> None:
    assert build_backend.build_sdist(str(tmp_path)) == "agentbox-%s.tar.gz" % agentbox.__version__
    name = build_backend.build_editable(str(tmp_path))
    with zipfile.ZipFile(os.path.join(str(tmp_path), name)) as z:
        assert z.read("_agentbox_editable.pth").decode().strip() == SDK
