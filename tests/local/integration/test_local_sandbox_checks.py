"""The seed's live-pod "Checks", asserted for real in the local sandbox (bubblewrap and gVisor; the
posture and hostile-step ones under a real Docker daemon too, in the runner image)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator

import pytest
from tests.fakes.local_sandbox import ALL_ISOLATIONS, DOCKER, ISOLATIONS, PODMAN, PODMAN_GAPS, on_podman

from ironflow import errors
from ironflow.claude import layout
from ironflow.fake_model.server import FakeAnthropic, Script
from ironflow.local.sandbox import environment
from ironflow.local.sandbox.bwrap import ReadOnlyMount
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret
from ironflow.testing import assert_no_leaks

KEY = "sk-ant-api03-local-sandbox-test-key-0123456789"
PYTHON = os.path.realpath(sys.executable)
#: A host directory outside what either sandbox hides, holding this file.
HERE = os.path.dirname(os.path.realpath(__file__))
#: A host directory (and a file in it) any user may read, outside every path the sandbox reserves
#: (a checkout may lie under /tmp, /home or a 0700 home, so not this checkout; not a PATH directory: reserved).
MOUNTABLE_DIR, MOUNTABLE_FILE = "/usr/lib", "os-release"

pytestmark = pytest.mark.bwrap

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (the probes use it)")


def _all_cmdlines() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    out.append(fh.read().decode(errors="replace"))
            except OSError:
                continue
    return out


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(Script.of("hi"), required_credential=KEY) as server:
        yield server


def _provider(isolation: environment.Isolation, fake: FakeAnthropic) -> LocalSandboxProvider:
    return LocalSandboxProvider(
        isolation=isolation, timeout=30, credential=ProxyCredential(Secret(KEY), "api_key", fake.url)
    )


@pytest.fixture(params=ISOLATIONS)
def provider(request: pytest.FixtureRequest, fake: FakeAnthropic) -> LocalSandboxProvider:
    """bubblewrap and gVisor, for the checks that use the host's tools (its python) in the sandbox."""
    return _provider(request.param, fake)


@pytest.fixture(params=ALL_ISOLATIONS)
def any_runtime(request: pytest.FixtureRequest, fake: FakeAnthropic) -> LocalSandboxProvider:
    """Every runtime, Docker included: the posture every sandbox must have, whatever its image."""
    return _provider(request.param, fake)


async def test_step_runs_as_non_root_uid_10001(any_runtime: LocalSandboxProvider) -> None:
    result = await any_runtime.run_command(["sh", "-c", "id -u; id -g"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["10001", "10001"]


async def test_no_capability_is_left(any_runtime: LocalSandboxProvider) -> None:
    result = await any_runtime.run_command(["sh", "-c", "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status"])
    assert result.exit_code == 0, result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines()] == ["0000000000000000"] * 3


@pytest.mark.parametrize("command", [["unshare", "-r", "id"], ["unshare", "-U", "true"]])
async def test_no_nested_user_namespace_can_be_created(
    any_runtime: LocalSandboxProvider, command: list[str], request: pytest.FixtureRequest
) -> None:
    """Both runtimes refuse it the same way (seccomp: EPERM), as the pod's RuntimeDefault profile does."""
    result = await any_runtime.run_command(command)
    if on_podman(request) and result.exit_code == 0:
        pytest.xfail(PODMAN_GAPS["userns"])
    assert (result.exit_code, result.stdout) == (1, ""), result.stderr
    assert result.stderr == "unshare: unshare failed: Operation not permitted\n"


async def test_clone3_answers_enosys_so_its_flags_cannot_open_a_user_namespace(provider: LocalSandboxProvider) -> None:
    """bubblewrap: the filter's rule; gVisor: not implemented on this release (its spec's rules see only
    clone and unshare). A gVisor that implements clone3 fails here: then it needs a rule too."""
    probe = "import ctypes; c = ctypes.CDLL(None, use_errno=True); c.syscall(435, 0, 0); print(ctypes.get_errno())"
    result = await provider.run_command([PYTHON, "-I", "-S", "-c", probe], auth_proxy=True)
    assert result.stdout.strip() == "38", result.stderr  # ENOSYS: libc falls back to clone, which the rules see


@pytest.mark.parametrize("path", ["/usr/local/probe", "/etc/probe", "/probe"])
async def test_writing_to_the_root_filesystem_fails(any_runtime: LocalSandboxProvider, path: str) -> None:
    result = await any_runtime.run_command(["touch", path])
    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr


async def test_bwrap_run_home_and_dev_are_read_only_directories_of_the_root() -> None:
    """No tmpfs of their own (fewer mounts for bubblewrap): read-only with the root, as the tmpfs were."""
    provider = LocalSandboxProvider(isolation="bwrap", timeout=30)
    result = await provider.run_command(["sh", "-c", "for p in /run /home /dev; do touch $p/probe 2>&1; done"])
    assert result.stdout.count("Read-only file system") == 3, result.stdout


@pytest.mark.parametrize("isolation", [ISOLATIONS[0], DOCKER, PODMAN])
async def test_home_and_tmp_are_private_writable_and_size_limited(isolation: environment.Isolation) -> None:
    provider = LocalSandboxProvider(isolation=isolation, home_size_bytes=2 << 20, tmp_size_bytes=2 << 20)
    script = "echo ok > $HOME/f && echo ok > /tmp/f && dd if=/dev/zero of=$HOME/big bs=1M count=4 2>&1; echo $?"
    result = await provider.run_command(["sh", "-c", script])
    assert result.stdout.strip().splitlines()[-1] != "0", "a 4 MiB write fit in a 2 MiB HOME"
    assert "No space left on device" in result.stdout


async def test_host_homes_and_runtime_sockets_are_hidden(provider: LocalSandboxProvider) -> None:
    # Globs, not ls: coreutils' ls fails with EINVAL on this gVisor release.
    result = await provider.run_command(["sh", "-c", "echo /home/* /run/*; cat /etc/shadow 2>&1; echo /root/.ssh/*"])
    first = result.stdout.splitlines()[0].split()
    assert first[0] == "/home/claude"  # /home holds only the sandbox's HOME
    assert all(not p.startswith("/run/") or p == "/run/*" for p in first[1:]), first
    assert "root:" not in result.stdout
    assert "/root/.ssh/id" not in result.stdout


async def test_no_credential_in_the_sandbox_environment(any_runtime: LocalSandboxProvider) -> None:
    result = await any_runtime.run_command(["sh", "-c", "env | grep -c sk-ant"], auth_proxy=True)
    assert result.stdout.strip() == "0"
    token = await any_runtime.run_command(["sh", "-c", 'echo "$ANTHROPIC_AUTH_TOKEN"'], auth_proxy=True)
    assert token.stdout.startswith("ifap_")
    assert_no_leaks([KEY], result.stdout, result.stderr, token.stdout)


@needs_curl
async def test_the_proxy_refuses_an_unknown_token_with_401(any_runtime: LocalSandboxProvider) -> None:
    probe = (
        'curl -s -o /dev/null -w "%{http_code}" -H "Authorization: Bearer invalide" '
        '-H "content-type: application/json" -d "{}" "$ANTHROPIC_BASE_URL/v1/messages"'
    )
    result = await any_runtime.run_command(["sh", "-c", probe], auth_proxy=True)
    assert result.stdout.strip() == "401", result.stderr


@needs_curl
async def test_the_proxy_relays_the_sandbox_token_with_the_key_injected(
    any_runtime: LocalSandboxProvider, fake: FakeAnthropic
) -> None:
    probe = (
        'curl -s -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" '
        '-H "content-type: application/json" '
        '-d \'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}\' '
        '"$ANTHROPIC_BASE_URL/v1/messages"'
    )
    result = await any_runtime.run_command(["sh", "-c", probe], auth_proxy=True)
    assert result.stdout.strip() == "200", result.stderr
    assert fake.message_requests[-1].header("x-api-key") == KEY


@needs_curl
async def test_no_network_but_the_proxy(any_runtime: LocalSandboxProvider) -> None:
    """A loopback service of the host and an outside address are unreachable; the proxy is."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nhost-service")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        script = (
            f"curl -s -m 2 http://127.0.0.1:{port}/ ; echo host=$?; "
            "curl -s -m 2 http://1.1.1.1/ ; echo outside=$?; "
            'curl -s -m 2 -o /dev/null -w "%{http_code}" "$ANTHROPIC_BASE_URL/healthz"; echo " proxy=$?"'
        )
        result = await any_runtime.run_command(["sh", "-c", script], auth_proxy=True)
    finally:
        server.close()
        await server.wait_closed()
    assert "host-service" not in result.stdout
    assert "host=0" not in result.stdout
    assert "outside=0" not in result.stdout
    assert "200 proxy=0" in result.stdout, result.stdout + result.stderr


@needs_curl
async def test_without_auth_proxy_nothing_at_all_is_reachable(any_runtime: LocalSandboxProvider) -> None:
    result = await any_runtime.run_command(["sh", "-c", "curl -s -m 2 http://1.1.1.1/; echo $?; env"])
    assert result.stdout.splitlines()[0] != "0"
    assert "ANTHROPIC" not in result.stdout


async def test_secrets_never_appear_on_any_command_line(any_runtime: LocalSandboxProvider) -> None:
    """While a sandbox runs, no /proc/<pid>/cmdline on the host holds the key or the token."""
    task = asyncio.create_task(
        any_runtime.run_command(
            ["sh", "-c", 'echo "$ANTHROPIC_AUTH_TOKEN"; sleep 1'], auth_proxy=True, run_id="cmdline"
        )
    )
    cmdlines: list[str] = []
    while not task.done():
        await asyncio.sleep(0.05)
        cmdlines += _all_cmdlines()
    result = await task
    token = result.stdout.strip()
    assert token.startswith("ifap_")
    runtime = "runsc" if any_runtime.isolation == "gvisor" else "sleep"  # gVisor's command is in its spec file
    assert any(runtime in c for c in cmdlines), "the sandbox was not seen running"
    assert_no_leaks([KEY, token], cmdlines)


async def test_bubblewrap_seccomp_refuses_what_runtime_default_refuses() -> None:
    """ptrace, keyctl and mount answer EPERM; ordinary calls work."""
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for name, nr in (('ptrace', 101), ('keyctl', 250), ('mount', 165), ('bpf', 321)):\n"
        "    rc = libc.syscall(nr, 0, 0, 0, 0, 0)\n"
        "    print(name, rc, ctypes.get_errno())\n"
        "print('getpid', os.getpid() > 0)\n"
    )
    python = PYTHON
    prefix = os.path.dirname(os.path.dirname(python))
    mounts = (ReadOnlyMount(prefix, prefix),) if prefix.startswith(("/root", "/home")) else ()
    result = await LocalSandboxProvider().run_command([python, "-I", "-S", "-c", probe], read_only_mounts=mounts)
    assert result.exit_code == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    for name in ("ptrace", "keyctl", "mount", "bpf"):
        assert lines[name] == "-1 1", (name, lines[name])  # EPERM
    assert lines["getpid"] == "True"


def _host_root() -> set[str]:
    return set(os.listdir("/"))


async def test_a_read_only_mount_of_a_plain_command_is_shown_or_refused_never_dropped(
    provider: LocalSandboxProvider,
) -> None:
    here, name = MOUNTABLE_DIR, MOUNTABLE_FILE
    at_itself = await provider.run_command(
        ["test", "-f", f"{here}/{name}"], read_only_mounts=[ReadOnlyMount(here, here)]
    )
    assert at_itself.exit_code == 0, at_itself.stderr
    moved = [ReadOnlyMount(here, "/data")]
    top = _host_root()
    result = await provider.run_command(["test", "-f", f"/data/{name}"], read_only_mounts=moved)
    assert result.exit_code == 0, result.stderr
    assert _host_root() == top  # gVisor's bind made no mount point on the host
    if provider.isolation == "gvisor":
        with pytest.raises(errors.ConfigError, match="hides '/run' under the sandbox's own tmpfs"):
            await provider.run_command(["true"], read_only_mounts=[ReadOnlyMount(here, "/run/data")])
    with pytest.raises(errors.ConfigError, match="reserved path '/etc/claude-code'"):
        await provider.run_command(["true"], read_only_mounts=[ReadOnlyMount(here, "/etc/claude-code")])


def _probe_parent() -> str:
    """A directory both runtimes show at itself: this checkout, unless it sits under /tmp (reserved)."""
    return next(
        d
        for d in (HERE, "/srv", "/opt", "/var/lib")
        if os.path.isdir(d) and layout.mount_path_problem("probe", d) is None and not environment.hidden_from_sandbox(d)
    )


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the root-worker identity needs a worker running as root")


@needs_root
async def test_a_root_worker_sandbox_cannot_read_root_only_files(provider: LocalSandboxProvider) -> None:
    """Issue 19: as root, bubblewrap's sandbox uid mapped to host root; now it is a non-root host uid."""
    # Outside every path either runtime hides or reserves (a checkout under /tmp is reserved).
    parent = _probe_parent()
    shown = tempfile.mkdtemp(prefix="root-only-", dir=parent)
    try:
        os.chmod(shown, 0o755)  # noqa: S103 - the directory is listable, its file is not readable
        fd = os.open(os.path.join(shown, "key"), os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(fd, b"root-only-content")
        os.close(fd)
        mounts = (ReadOnlyMount(shown, "/data-probe" if provider.isolation == "bwrap" else shown),)
        where = mounts[0].target
        script = f"echo {where}/*; cat {where}/key; head -c 4 /sys/firmware/acpi/tables/DSDT; id -u"
        result = await provider.run_command(["sh", "-c", script], read_only_mounts=mounts)
    finally:
        shutil.rmtree(shown)
    assert result.stdout.splitlines()[0].endswith("/key"), result.stderr  # the file is there (a glob: gVisor's ls)
    assert "root-only-content" not in result.stdout
    assert "DSDT" not in result.stdout
    assert result.stdout.splitlines()[-1] == "10001"
    assert "Permission denied" in result.stderr or "No such file" in result.stderr


@needs_root
async def test_the_readme_quickstart_tools_still_run_from_a_0700_root_home(provider: LocalSandboxProvider) -> None:
    """Python (the proxy relay) may live under /root: the sandbox still runs it after the uid drop."""
    result = await provider.run_command([PYTHON, "-I", "-S", "-c", "print('ran')"], auth_proxy=True)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "ran"


def _runtime_mount_namespace(marker: str) -> str | None:
    """The mount namespace of the sandbox runtime this process started for ``marker``, if it runs."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            if parent == os.getpid() and marker.encode() in argv:
                return os.readlink(f"/proc/{pid}/ns/mnt")
    return None


@needs_root
async def test_a_root_worker_stages_in_a_mount_namespace_only_what_it_has_to_bind() -> None:
    """Nothing to stage (a plain command, no mount): no private mount namespace is made for it."""
    provider = LocalSandboxProvider()

    async def runtime_namespace(marker: str, mounts: tuple[ReadOnlyMount, ...]) -> str | None:
        task = asyncio.create_task(provider.run_command(["sleep", marker], read_only_mounts=mounts))
        found = None
        while not task.done():
            found = found or _runtime_mount_namespace(marker)
            await asyncio.sleep(0.02)
        assert (await task).exit_code == 0
        assert found, "the sandbox was not seen running"
        return found

    own = os.readlink("/proc/self/ns/mnt")
    assert await runtime_namespace("1.0101", ()) == own
    assert await runtime_namespace("1.0102", (ReadOnlyMount(MOUNTABLE_DIR, "/data"),)) != own
