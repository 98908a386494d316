"""``scripts/install`` as a user without root meets it: each missing system package named with
what it is for and the Debian/Ubuntu line that installs it, and a gVisor older than the one the
local sandbox is tested with refused with where to get a current one (issue 17); as root, an
optional package apt offers is installed. The machine's tools are hidden behind a PATH of a few
links; a fake ``id`` says whether the user is root, and fake apt tools record what they are asked."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "install"
#: What the script runs before it could touch apt, pip or npm.
TOOLS = ("bash", "dirname", "cat", "grep", "head", "env")


def _bin(tmp_path: Path, fakes: dict[str, str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    for name, body in {"id": "echo 1000", **fakes}.items():
        fake = bin_dir / name
        fake.write_text(f"#!{shutil.which('bash')}\n{body}\n")
        fake.chmod(0o755)
    return bin_dir


def _install(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bash = str(bin_dir / "bash")
    env = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent)}
    return subprocess.run([bash, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_missing_packages_without_root_are_named_with_the_apt_line(tmp_path: Path) -> None:
    done = _install(_bin(tmp_path, {"node": "true", "npm": "true"}))
    assert done.returncode == 1, done
    assert "install: missing: bubblewrap (bwrap, the local sandbox every offline step runs in)" in done.stderr
    assert "install: missing: runsc (gVisor (runsc), the local sandbox's --isolation gvisor; optional)" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: missing system packages: bubblewrap runsc; on Debian or Ubuntu, as root: "
        "apt-get update && apt-get install bubblewrap runsc; then run this again"
    )


def test_a_missing_gvisor_alone_is_a_note_not_a_stop(tmp_path: Path) -> None:
    """Only --isolation gvisor needs runsc: without root the install goes on (here to the Python check)."""
    done = _install(_bin(tmp_path, {"bwrap": "true", "node": "true", "npm": "true"}))
    assert "install: note: not installing runsc without root (only --isolation gvisor needs it)" in done.stderr
    assert "missing system packages" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ironflow needs Python 3.11 or later"), done.stderr


def test_as_root_an_optional_package_apt_offers_is_installed(tmp_path: Path) -> None:
    """``apt-cache policy`` goes on writing after its Candidate line (here after a pause, so the
    reader has surely stopped reading): the script must still see the candidate. Piped into
    ``grep -q`` under pipefail, the writer's SIGPIPE made runsc look absent 35 times in 40."""
    policy = "echo 'runsc:'; echo '  Installed: (none)'; echo '  Candidate: 0.0~20221219.0-2+b3'; "
    policy += f"{shutil.which('sleep')} 0.3; echo '  Version table:'; echo '     0.0~20221219.0-2+b3 500'"
    fakes = {
        "id": "echo 0",
        "bwrap": "true",
        "node": "true",
        "npm": "true",
        "apt-cache": policy,
        "apt-get": 'echo "$*" >> "$HOME/apt-get.log"',
    }
    done = _install(_bin(tmp_path, fakes))
    assert "is not in this system's apt sources" not in done.stderr, done.stderr
    calls = (tmp_path / "apt-get.log").read_text().splitlines()
    assert calls[-1].endswith("install -y -qq --no-install-recommends runsc"), calls


def test_the_test_tools_are_named_too(tmp_path: Path) -> None:
    tools = ("bwrap", "runsc", "node", "npm", "postgres", "nginx", "wrk", "chromium", "mmdebstrap", "buildah", "runc")
    present = {name: "true" for name in tools}
    done = _install(_bin(tmp_path, present), "--test")
    assert done.returncode == 1, done
    assert "missing: chromium-driver (chromedriver, which drives chromium in the UI's browser test)" in done.stderr
    assert "apt-get install chromium-driver;" in done.stderr


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("runsc version release-20220101.0", "error: gVisor 20220101 at "),
        ("runsc version 0.0~20221219.0", "install: note: this is the distribution's 2022 release"),
    ],
)
def test_the_gvisor_release_is_checked(tmp_path: Path, version: str, expected: str) -> None:
    fakes = {"bwrap": "true", "node": "true", "npm": "true", "runsc": f"echo '{version}'"}
    done = _install(_bin(tmp_path, fakes))
    assert expected in done.stderr, done.stderr
    if expected.startswith("error:"):
        assert done.returncode == 1
        assert "is older than 20221219, which --isolation gvisor needs" in done.stderr
        assert "gvisor.dev/docs/user_guide/install" in done.stderr


def test_an_unknown_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _install(_bin(tmp_path, {}), "--tests")
    assert done.returncode == 2
    assert done.stderr == "error: unknown option '--tests' (usage: bash scripts/install [--test])\n"
