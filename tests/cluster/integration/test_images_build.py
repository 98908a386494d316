"""``scripts/images`` builds the auth-proxy image (the smallest; the base and the fetched wheels are
cached across runs) with no network at all: after ``fetch``, the whole build runs inside a network
namespace with no route out, so any registry lookup would fail it. A rebuild gives the same image
(content digest), which is local, runs as uid 10001, has its archive and SBOM where the build
says, and a further build is a cache hit.
Skipped with the reason when mmdebstrap, buildah or runc is missing or not root."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ironflow.cluster import image_builds
from ironflow.testing import images

ROOT = Path(__file__).resolve().parents[3]
MISSING = images.missing_tools()
pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=f"cannot build images here: missing {', '.join(MISSING)}"),
    # Cold (155 s measured): the base (mmdebstrap 36-66 s, import 15 s), the wheels (13 s), two builds;
    # with the cache of an earlier run: one build, about 50 s.
    pytest.mark.timeout(900),
]
NAME = "auth-proxy"


def _images(*args: str, offline: bool) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(ROOT / "scripts" / "images"), *args]
    if offline:
        argv = ["unshare", "--net", "--", *argv]  # only a down loopback: no route out
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=850)


def test_the_image_builds_with_no_network_runs_as_10001_and_a_rebuild_hits_the_cache() -> None:
    fetched = _images("fetch", NAME, offline=False)
    assert fetched.returncode == 0, fetched.stderr

    first = _images("build", NAME, offline=True)  # cached across runs, else built here
    assert first.returncode == 0, first.stdout + first.stderr
    built = _images("build", "--rebuild", NAME, offline=True)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.split()[1] == first.stdout.split()[1], "two builds of the same inputs, the same image"
    reference = image_builds.local_reference(image_builds.IMAGES[NAME].reference)
    assert built.stdout.startswith(f"{reference}  sha256:"), built.stdout
    fields = dict(line.split(maxsplit=1) for line in built.stdout.splitlines()[1:])
    sbom = Path(fields["sbom"])
    inventory = sbom.read_text(encoding="utf-8")
    assert "\npython3 3.11" in inventory
    assert "\naiohttp==" in inventory

    user = subprocess.run(
        [*images.buildah_argv(), "inspect", "--type", "image", "--format", "{{.OCIv1.Config.User}}", reference],
        capture_output=True,
        text=True,
        check=True,
    )
    assert user.stdout.strip() == "10001:10001"
    path = _images("path", NAME, offline=True)
    assert Path(path.stdout.strip()).stat().st_size > 10_000_000

    start = time.monotonic()
    again = _images("build", NAME, offline=True)
    assert again.returncode == 0, again.stderr
    assert "(cached in" in again.stdout
    assert time.monotonic() - start < 20
    assert again.stdout.split()[1] == built.stdout.split()[1], "the same image, by content digest"
