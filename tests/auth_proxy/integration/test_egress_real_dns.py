"""The egress proxy's DNS-rebinding and private-answer guards through the system resolver (issue 30).

The cases (``netns_dns_cases.py``) run in a pytest of their own inside ``unshare --net
--mount``: loopback up, mounts private, a ``resolv.conf`` naming the scripted DNS server bound
over ``/etc/resolv.conf``. Nothing of it reaches the host's network or mounts, and the
namespace ends with the child.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CASES = Path(__file__).with_name("netns_dns_cases.py")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs root, unshare and ip for a network namespace of its own",
)


def test_the_guards_hold_against_a_hostile_dns_server_on_the_wire(tmp_path: Path) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:2 attempts:2\n")
    inner = (
        f"ip link set lo up && mount --bind {resolv} /etc/resolv.conf && "
        f'exec {sys.executable} -m pytest -q -p no:randomly --timeout 60 -o addopts="" '
        f"--import-mode=importlib -p ironflow.testing.pytest_plugin {CASES}"
    )
    done = subprocess.run(
        ["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c", inner],
        cwd=ROOT,
        env={**os.environ, "IRONFLOW_IN_DNS_NETNS": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"^5 passed in ", done.stdout, re.MULTILINE), done.stdout[-2000:]  # none skipped
