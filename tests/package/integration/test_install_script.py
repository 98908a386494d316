"""``scripts/install`` as a user without root meets it: each missing system package named with
what it is for and the Debian/Ubuntu line that installs it, and a gVisor older than the one the
local sandbox is tested with refused with where to get a current one (issue 17); as root, an
optional package apt offers is installed. The machine's tools are hidden behind a PATH of a few
links; a fake ``id`` says whether the user is root, and fake apt tools record what they are asked."""

from __future__ import annotations

import contextlib
import os
import pty
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
    tools: tuple[str, ...] = ("bwrap", "runsc", "node", "npm", "postgres", "nginx", "wrk", "chromium")
    tools += ("mmdebstrap", "buildah", "runc")
    tools += ("ipset", "iptables", "gcc")  # the real node's (its CNI plugins are a file, installed here by CI)
    tools += ("dockerd", "podman")  # the --isolation docker tier's daemons (catatonit is a file, installed by CI)
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
    assert done.stderr == "error: unknown option '--tests' (usage: bash scripts/install [--test] [--replace-link])\n"


# --- the link to `ironflow` on PATH (issue 31) -----------------------------------------------
#: What the script runs past the system packages when everything is present (pip, npm faked).
LINK_TOOLS = (*TOOLS, "ln", "readlink")


def _checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A checkout with the script, a made venv whose pip is a no-op, the Claude CLI in the cache,
    every system tool present, and ``~/.local/bin`` on PATH; the environment to run it in."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / "scripts" / "install")
    home = tmp_path / "home"
    venv_bin = checkout / ".venv" / "bin"
    claude_bin = home / ".cache" / "ironflow" / "claude-code" / "2.1.332" / "node_modules" / ".bin"
    for directory in (venv_bin, claude_bin, home / ".local" / "bin", tmp_path / "bin"):
        directory.mkdir(parents=True)
    for tool in LINK_TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (tmp_path / "bin" / tool).symlink_to(found)
    fakes = {
        tmp_path / "bin" / "id": "echo 1000",
        tmp_path / "bin" / "runsc": "echo 'runsc version release-20240101.0'",
        **{tmp_path / "bin" / name: "true" for name in ("bwrap", "node", "npm", "python3")},
        venv_bin / "python": "true",
        venv_bin / "ironflow": "true",
        claude_bin / "claude": "echo '2.1.332 (Claude Code)'",
    }
    for fake, body in fakes.items():
        fake.write_text(f"#!{shutil.which('bash')}\n{body}\n")
        fake.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'bin'}:{home / '.local' / 'bin'}", "HOME": str(home)}
    return checkout, env


def _run(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [env["PATH"].split(":")[0] + "/bash", str(checkout / "scripts" / "install"), *args]
    return subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_fresh_install_links_ironflow_on_path(tmp_path: Path) -> None:
    checkout, env = _checkout(tmp_path)
    done = _run(checkout, env)
    assert done.returncode == 0, done.stderr
    link = Path(env["HOME"]) / ".local" / "bin" / "ironflow"
    assert Path(os.readlink(link)) == checkout / ".venv" / "bin" / "ironflow"
    assert f"install: linked {link} -> {checkout}/.venv/bin/ironflow" in done.stderr.splitlines()


def test_a_link_to_another_checkout_is_kept_with_one_line_naming_it_and_the_flag(tmp_path: Path) -> None:
    """Without a terminal to ask at, the link stays and one line says where it points and how to
    replace it; ``--replace-link`` replaces it."""
    checkout, env = _checkout(tmp_path)
    other = tmp_path / "other" / ".venv" / "bin" / "ironflow"
    other.parent.mkdir(parents=True)
    other.write_text("")
    link = Path(env["HOME"]) / ".local" / "bin" / "ironflow"
    link.symlink_to(other)
    done = _run(checkout, env)
    assert done.returncode == 0, done.stderr
    assert Path(os.readlink(link)) == other
    mine = checkout / ".venv" / "bin" / "ironflow"
    said = [line for line in done.stderr.splitlines() if str(link) in line]
    assert said == [
        f"install: note: {link} links to {other}, another checkout's; kept: "
        f"bash scripts/install --replace-link points it at {mine} (or run {mine})"
    ]

    replaced = _run(checkout, env, "--replace-link")
    assert replaced.returncode == 0, replaced.stderr
    assert Path(os.readlink(link)) == mine
    assert f"install: linked {link} -> {mine} (it pointed at {other})" in replaced.stderr.splitlines()


def test_a_link_to_a_checkout_that_is_gone_is_replaced_saying_so(tmp_path: Path) -> None:
    checkout, env = _checkout(tmp_path)
    gone = tmp_path / "removed" / ".venv" / "bin" / "ironflow"
    link = Path(env["HOME"]) / ".local" / "bin" / "ironflow"
    link.symlink_to(gone)
    done = _run(checkout, env)
    mine = checkout / ".venv" / "bin" / "ironflow"
    assert done.returncode == 0, done.stderr
    assert Path(os.readlink(link)) == mine
    assert f"install: linked {link} -> {mine} (it pointed at {gone})" in done.stderr.splitlines()
    again = _run(checkout, env)  # run again: nothing to change
    assert f"install: {link} already links to {mine}" in again.stderr.splitlines()


def _read_until(fd: int, marker: bytes) -> bytes:
    """What the terminal's other end shows until ``marker`` (or the script's end)."""
    seen = b""
    while marker not in seen:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the script exited and closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    return seen


def test_at_a_terminal_the_link_is_replaced_only_when_the_user_says_yes(tmp_path: Path) -> None:
    checkout, env = _checkout(tmp_path)
    other = tmp_path / "other-ironflow"
    other.write_text("")
    link = Path(env["HOME"]) / ".local" / "bin" / "ironflow"
    link.symlink_to(other)
    mine = checkout / ".venv" / "bin" / "ironflow"
    for answer, expected in (("n\n", other), ("y\n", mine)):
        leader, follower = pty.openpty()
        try:
            argv = [env["PATH"].split(":")[0] + "/bash", str(checkout / "scripts" / "install")]
            proc = subprocess.Popen(argv, env=env, stdin=follower, stdout=follower, stderr=follower)
            os.close(follower)
            seen = _read_until(leader, b"[y/N]")
            assert seen.endswith(b"[y/N] "), seen
            assert f"{link} links to {other}".encode() in seen
            os.write(leader, answer.encode())
            with contextlib.suppress(OSError):  # EIO once the script has exited
                while os.read(leader, 4096):
                    pass
            assert proc.wait(timeout=60) == 0
        finally:
            os.close(leader)
        assert Path(os.readlink(link)) == expected
