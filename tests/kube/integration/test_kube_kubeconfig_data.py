"""A kubeconfig's inline key material never reaches the disk.

``kubernetes_asyncio`` writes each ``*-data`` field (the CA, the client certificate, the client's
private key) to a file in the temporary directory and removes it only at exit: a worker killed
by SIGKILL or the OOM killer left its private key in ``/tmp``. ``kube/api.py`` makes the loader
put them in memory instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ironflow.kube import kubeconfigs
from ironflow.testing import _kubeenv_pki as pki

#: Connects (the client's TLS context reads the CA, certificate and key) and dies as a killed worker does.
_CONNECT_AND_DIE = """
import asyncio, os, signal, sys
from ironflow.kube import api

async def main() -> None:
    client = await api.KubeApi.connect(api.KubeconfigFile(path=sys.argv[1]))
    configuration = client._client.configuration
    print(configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


def test_a_killed_client_leaves_no_key_in_the_temporary_directory(tmp_path: Path) -> None:
    ca = pki.new_pki()
    config = tmp_path / "kubeconfig"
    config.write_text(
        pki.kubeconfig_yaml("https://127.0.0.1:1", ca.ca.cert_pem, user="u", client=ca.client("u")),
        encoding="utf-8",
    )
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _CONNECT_AND_DIE, str(config)],
        env={**os.environ, "TMPDIR": str(temporary)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert sorted(p.name for p in temporary.iterdir()) == []
    paths = done.stdout.split()
    assert len(paths) == 3
    assert all(p.startswith("/proc/self/fd/") for p in paths), paths


def test_an_in_memory_file_reads_its_content_once_per_content_and_is_not_inherited() -> None:
    key = b"-----BEGIN PRIVATE KEY-----\nnot a real one\n"
    path = kubeconfigs.in_memory_file(key)
    assert Path(path).read_bytes() == key
    assert Path(path).is_file()
    assert kubeconfigs.in_memory_file(key.decode()) == path
    assert kubeconfigs.in_memory_file(b"another") != path
    assert not os.get_inheritable(int(path.rsplit("/", 1)[1]))
