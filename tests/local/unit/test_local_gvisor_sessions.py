"""A gVisor session's sandbox as values: the runtime started as root, which binds its socket and
drops, its code packed in the socket dir under gVisor's own /dev, no network, nothing on the argv
but runsc."""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shlex
import stat
from pathlib import Path

from tests.sessions.unit.runtime_files import runtime_module

from ironflow import sandbox_runtime
from ironflow.local.sandbox import argv, bwrap, gvisor
from ironflow.local.sessions import gvisor_runtime

SHAPE = argv.SandboxShape("gvisor", (), 1 << 20, 1 << 20, None, None)
RUNTIME = gvisor_runtime.runtime_command("/py/bin/python3", "--token-fd", "0")


def _settings() -> gvisor.GvisorSettings:
    return gvisor_runtime.runtime_settings(SHAPE, RUNTIME, python="/py/bin/python3", runsc_path="/usr/bin/runsc")


def test_the_runtime_starts_as_gvisors_root_binds_its_socket_and_sets_its_uids_apart() -> None:
    """No setpriv: it would give the runtime its commands' every uid (gVisor has no pid namespace
    to put between them); the runtime binds its socket as root and drops to uids apart itself
    (``--runtime-uid``). Nothing before it: no second interpreter, and no setup shell (the spec
    starts it in the home, and it opens the interpreter's home for traversal itself)."""
    settings = dataclasses.replace(_settings(), traverse=("/root/.pyenv/bin/python3",))
    process = gvisor.oci_spec(settings, {})["process"]
    isolation = ("--isolate-commands", "--runtime-uid", "10002", "--commands-uid", "10001")
    assert process["args"] == [*RUNTIME, *isolation, "--traverse", "/root"]
    assert process["cwd"] == "/home/claude"
    assert process["user"] == {"uid": 0, "gid": 0}
    # Without a home to open, nothing is added.
    assert gvisor.oci_spec(_settings(), {})["process"]["args"] == [*RUNTIME, *isolation]
    # It execs nothing as root: no bounding set, so its runtime needs no libc binding to drop one.
    capabilities = process["capabilities"]
    assert capabilities["bounding"] == capabilities["inheritable"] == capabilities["ambient"] == []
    assert set(capabilities["effective"]) == set(capabilities["permitted"]) == set(gvisor.SETUP_CAPABILITIES)
    assert process["noNewPrivileges"] is True


def test_a_session_with_work_for_root_still_runs_its_setup_script_then_the_runtime() -> None:
    """A workspace's copy is bound on at /workspace by the script (runsc binds a source at its own
    path): the shell stays, and execs the runtime, still without setpriv, after its ``chmod``."""
    writable = (bwrap.WritableMount("/state/ifs-x/copy", "/workspace"),)
    settings = gvisor_runtime.runtime_settings(
        SHAPE, RUNTIME, python="/root/py/bin/python3", runsc_path="/usr/bin/runsc", writable=writable
    )
    process = gvisor.oci_spec(settings, {})["process"]
    assert process["args"][:2] == ["sh", "-c"]
    assert process["cwd"] == "/"
    script = process["args"][2]
    assert "mount --bind '/state/ifs-x/copy' '/workspace'" in script
    assert "chmod o+x '/root'" in script
    words = shlex.split(script[script.rindex("\nexec ") :])
    assert "setpriv" not in words
    assert words[: len(RUNTIME) + 1] == ["exec", *RUNTIME]
    assert "--traverse" not in words
    # Its shell execs mount, cp and the runtime as root: they keep the bounding set they need.
    assert set(process["capabilities"]["bounding"]) == set(gvisor.SETUP_CAPABILITIES)


def test_a_command_that_does_not_drop_itself_is_dropped_by_setpriv() -> None:
    last = gvisor.setup_script(gvisor.GvisorSettings(command=("true",), profile_dirs=("/p",))).splitlines()[-1]
    assert last.startswith("exec setpriv --reuid 10001 ")


def test_the_runtime_runs_its_packed_code_from_its_socket_dir() -> None:
    """No directory of code bound in: ``packed_start.py``'s text on the argv reads the one file of the
    runtime's code beside its socket, in the directory only gVisor's root can enter."""
    assert RUNTIME[:4] == ("/py/bin/python3", "-I", "-S", "-c")
    assert RUNTIME[4] == sandbox_runtime.packed_start_source()
    assert RUNTIME[5:8] == (gvisor_runtime.PACKED_PATH, "--unix", gvisor_runtime.SOCKET_PATH)
    assert posixpath.dirname(gvisor_runtime.PACKED_PATH) == gvisor_runtime.SOCKET_DIR
    assert RUNTIME[4].startswith("import ")  # its module docstring stays out of every ps line


def test_the_spec_binds_only_the_socket_dir_under_dev() -> None:
    doc = gvisor_runtime.spec(_settings(), {"B": "2"}, socket_source="/state/ifs-x/s")
    binds = {m["destination"]: m for m in doc["mounts"] if m["type"] == "bind"}
    assert binds == {
        gvisor_runtime.SOCKET_DIR: {
            "destination": gvisor_runtime.SOCKET_DIR,
            "type": "bind",
            "source": "/state/ifs-x/s",
            "options": ["rbind", "rw"],
        }
    }
    # runsc makes a bind's mount point on the host unless it is in a mount of its own: /dev is gVisor's tmpfs.
    assert gvisor_runtime.SOCKET_DIR.startswith("/dev/")
    assert "B=2" in doc["process"]["env"]
    assert {"type": "network"} in doc["linux"]["namespaces"]


def test_the_argv_has_no_network_may_create_host_sockets_and_needs_no_bubblewrap() -> None:
    argv = gvisor.gvisor_argv(_settings(), "/state/ifs-x/gvisor")
    assert argv[0] == "/usr/bin/runsc"
    assert "--network=none" in argv
    assert "--host-uds=create" in argv
    assert "--host-uds=create" not in gvisor.gvisor_argv(gvisor.GvisorSettings(command=("true",)), "/b")


def test_with_a_proxy_runsc_runs_behind_a_steps_relay_in_a_namespace_with_only_lo() -> None:
    """As a one-shot step with a proxy: bubblewrap's fresh network namespace, the relay listening on
    its loopback, then ``runsc --network=host`` of the session (no namespace of its own in the spec)."""
    bridge = gvisor.ProxyBridge(18080, "/s/proxy.sock", "/py/bin/python3", "/f.py", "/usr/bin/bwrap", (18081, "/s/e"))
    shown = gvisor_runtime.runtime_settings(
        SHAPE, RUNTIME, python="/py/bin/python3", runsc_path="/usr/bin/runsc", proxy=bridge, tools=("/opt/claude",)
    )
    full = gvisor.gvisor_argv(shown, "/state/ifs-x/gvisor")
    assert full[:4] == ["/usr/bin/bwrap", "--dev-bind", "/", "/"]
    assert "--unshare-net" in full[: full.index("--")]
    relay = ["/py/bin/python3", "-I", "-S", "/f.py", "18080", "/s/proxy.sock", "18081", "/s/e", "--"]
    start = full.index("/usr/bin/runsc")
    assert full[start - len(relay) : start] == relay
    assert "--network=host" in full[start:]
    assert "--host-uds=create" in full[start:]
    doc = gvisor_runtime.spec(shown, {}, socket_source="/state/ifs-x/s")
    assert {"type": "network"} not in doc["linux"]["namespaces"]
    assert shown.traverse == ("/py/bin/python3", "/opt/claude")


def test_the_bundle_is_private_and_the_socket_dir_closed_with_the_runtimes_code_in_it(tmp_path: Path) -> None:
    bundle = gvisor_runtime.write_bundle(str(tmp_path), {"process": {"env": ["SECRET=x"]}}, b"code")
    assert json.loads(Path(bundle, "config.json").read_text()) == {"process": {"env": ["SECRET=x"]}}
    assert stat.S_IMODE(os.stat(Path(bundle, "config.json")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / gvisor_runtime.SOCKET_SUBDIR).st_mode) == 0o700
    packed = tmp_path / gvisor_runtime.SOCKET_SUBDIR / posixpath.basename(gvisor_runtime.PACKED_PATH)
    assert packed.read_bytes() == b"code"
    assert stat.S_IMODE(packed.stat().st_mode) == 0o600
    assert gvisor_runtime.host_socket(str(tmp_path)) == str(tmp_path / "s" / "rt.sock")


def test_the_runtime_opens_the_home_it_is_given_for_traversal_and_nothing_more(tmp_path: Path) -> None:
    """``--traverse`` is the setup script's ``chmod o+x``, done by the runtime as gVisor's root."""
    home = tmp_path / "root"
    home.mkdir(mode=0o700)
    home.chmod(0o700)
    with runtime_module("startup") as startup:
        startup.open_traverse(startup.parse_args(["--unix", "s", "--traverse", str(home)]))
        assert stat.S_IMODE(home.stat().st_mode) == 0o701
        startup.open_traverse(startup.parse_args(["--unix", "s"]))  # none given: nothing to do
