"""The README's Python examples run as written against the real daemon,
each in a fresh interpreter that finds the daemon and the image through
$AGENTBOX_SOCKET and $AGENTBOX_IMAGE, as a user's would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List

import pytest
from conftest import require_live

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def examples() -> List[str]:
    with open(os.path.join(SDK, "README.md"), encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), re.M | re.S)


def test_readme_has_examples() -> None:
    assert len(examples()) >= 7


@pytest.mark.parametrize("i", range(len(examples())))
def test_readme_example_runs(i: int) -> None:
    require_live()
    code = examples()[i]
    env = dict(os.environ, PYTHONPATH=SDK)
    r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, "README example %d failed:\n%s\n--- output:\n%s" % (i + 1, code, r.stdout.decode(errors="replace"))
