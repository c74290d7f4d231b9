"""A PEP 517 build backend in the standard library only, so that
``pip install ./sdk/python`` needs nothing it would have to download (the
package is pure Python: a wheel is a zip of agentbox/ and its metadata).

It reads name, version, description and requires-python from
pyproject.toml's [project] table (simple ``key = "value"`` lines; tomllib
is not in Python 3.9) and the long description from README.md.
Hooks: build_wheel, build_sdist, build_editable (a .pth file naming this
directory), and the get_requires_* hooks (nothing).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "agentbox"


def _project() -> Dict[str, str]:
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        raise RuntimeError("pyproject.toml has no [project] table")
    out = dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"\s*$', m.group(1), re.M))
    for k in ("name", "version"):
        if k not in out:
            raise RuntimeError("pyproject.toml [project] has no %s" % k)
    return out


def _metadata() -> str:
    p = _project()
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + p["name"],
        "Version: " + p["version"],
        "Summary: " + p.get("description", ""),
        "Requires-Python: " + p.get("requires-python", ">=3.9"),
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + readme


def _sources() -> List[str]:
    """The package's files, relative to HERE, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(HERE, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py") or f == "py.typed":
                out.append(os.path.relpath(os.path.join(dirpath, f), HERE))
    return out


def _dist_info() -> str:
    p = _project()
    return "%s-%s.dist-info" % (p["name"], p["version"])


def _wheel(wheel_directory: str, files: List[Tuple[str, bytes]]) -> str:
    """Writes a py3-none-any wheel of files (archive name, content) and
    its dist-info; returns its file name."""
    p = _project()
    dist_info = _dist_info()
    files = files + [
        (dist_info + "/METADATA", _metadata().encode("utf-8")),
        (dist_info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: agentbox build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(dist_info + "/RECORD,,")
    files.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode("utf-8")))
    name = "%s-%s-py3-none-any.whl" % (p["name"], p["version"])
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


def _read(rel: str) -> bytes:
    with open(os.path.join(HERE, rel), "rb") as f:
        return f.read()


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    """PEP 517: the wheel of the package."""
    return _wheel(wheel_directory, [(rel.replace(os.sep, "/"), _read(rel)) for rel in _sources()])


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose .pth file puts this directory on sys.path."""
    return _wheel(wheel_directory, [("_agentbox_editable.pth", (HERE + "\n").encode("utf-8"))])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """PEP 517: a source archive with what building a wheel needs."""
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    members = ["pyproject.toml", "README.md", "build_backend.py"] + _sources()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in [(m, _read(m)) for m in members] + [("PKG-INFO", _metadata().encode("utf-8"))]:
            info = tarfile.TarInfo(base + "/" + rel.replace(os.sep, "/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return name


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []
