"""The bubblewrap and gVisor argv builders: posture flags, mounts, and no value on the argv."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, environment, forwarder, gvisor, seccomp

ROOT = (
    bwrap.HostEntry("usr", is_dir=True),
    bwrap.HostEntry("bin", "usr/bin"),
    bwrap.HostEntry("etc", is_dir=True),
    bwrap.HostEntry("root", is_dir=True),
    bwrap.HostEntry("home", is_dir=True),
    bwrap.HostEntry("run", is_dir=True),
    bwrap.HostEntry("tmp", is_dir=True),
    bwrap.HostEntry("var", is_dir=True),
)
ETC = (
    bwrap.HostEntry("passwd"),
    bwrap.HostEntry("shadow"),
    bwrap.HostEntry("claude-code", is_dir=True),
    bwrap.HostEntry("os-release", "../usr/lib/os-release"),
)


def _settings(**changes: object) -> bwrap.BwrapSettings:
    base = bwrap.BwrapSettings(command=("sh", "-c", "true"), root_entries=ROOT, etc_entries=ETC)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_every_namespace_is_new_and_no_capability_kept() -> None:
    argv = bwrap.bwrap_argv(_settings())
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--uid") + 1] == argv[argv.index("--gid") + 1] == "10001"
    assert "--share-net" not in argv


def test_root_entries_bound_read_only_except_hidden_ones() -> None:
    argv = bwrap.bwrap_argv(_settings())
    bound = {dest for _, dest in _pairs(argv, "--ro-bind")}
    assert {"/usr", "/var"} <= bound
    assert not {"/root", "/home", "/run", "/tmp"} & bound
    assert ("usr/bin", "/bin") in _pairs(argv, "--symlink")
    assert tuple(argv[argv.index("--chdir") - 2 : argv.index("--chdir")]) == ("--remount-ro", "/")


def test_one_remount_and_the_host_binds_after_the_small_ones() -> None:
    """bubblewrap re-reads mountinfo at each bind: /home, /run and /dev are directories of the read-only root
    (no tmpfs to remount), and the host's top-level binds, which bring their submounts, come last."""
    argv = bwrap.bwrap_argv(
        _settings(proxy_socket="/t/proxy.sock", read_only_mounts=(bwrap.ReadOnlyMount("/s", "/data"),))
    )
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--remount-ro"] == ["/"]
    assert [argv[argv.index(p) - 1] for p in ("/home", "/run", "/dev")] == ["--dir"] * 3
    small = max(argv.index(p) for p in ("/dev/null", "/etc/shadow", bwrap.PROXY_SOCKET_PATH))
    assert small < argv.index("/usr") < argv.index("/data") < argv.index("--remount-ro")


def test_home_and_tmp_are_size_limited_private_tmpfs() -> None:
    argv = bwrap.bwrap_argv(_settings(home_size_bytes=1234, tmp_size_bytes=5678))
    home = argv.index("/home/claude")
    assert argv[home - 5 : home] == ["--perms", "0700", "--size", "1234", "--tmpfs"]
    tmp = next(i for i, a in enumerate(argv) if a == "/tmp" and argv[i - 1] == "--tmpfs")
    assert argv[tmp - 5 : tmp] == ["--perms", "1777", "--size", "5678", "--tmpfs"]


def test_etc_is_one_bind_with_shadow_masked_when_nothing_is_placed_in_it() -> None:
    argv = bwrap.bwrap_argv(_settings())
    assert ("/etc", "/etc") in _pairs(argv, "--ro-bind")
    assert ("/dev/null", "/etc/shadow") in _pairs(argv, "--ro-bind")
    assert argv[argv.index("/etc/claude-code") - 1] == "--tmpfs"


def test_managed_settings_and_profiles_are_mounted_read_only_where_the_pod_has_them() -> None:
    argv = bwrap.bwrap_argv(_settings(managed_settings_dir="/t/ms", profile_dirs=("/t/p0", "/t/p1")))
    pairs = _pairs(argv, "--ro-bind")
    assert ("/t/ms", "/etc/claude-code") in pairs
    assert ("/t/p0", "/etc/ironflow/claude-profile/0") in pairs
    assert ("/t/p1", "/etc/ironflow/claude-profile/1") in pairs
    assert ("/etc/passwd", "/etc/passwd") in pairs
    assert ("/etc/shadow", "/etc/shadow") not in pairs
    assert ("../usr/lib/os-release", "/etc/os-release") in _pairs(argv, "--symlink")
    assert "--remount-ro" in argv[argv.index("/etc/ironflow/claude-profile/1") :]


def test_proxy_socket_appears_at_a_fixed_path() -> None:
    argv = bwrap.bwrap_argv(_settings(proxy_socket="/x/proxy.sock"))
    assert ("/x/proxy.sock", bwrap.PROXY_SOCKET_PATH) in _pairs(argv, "--ro-bind")


def test_relay_script_appears_at_a_fixed_path_wherever_the_package_lives() -> None:
    """A package under /tmp (hidden in the sandbox) still gets its relay in: bound at a fixed path."""
    argv = bwrap.bwrap_argv(_settings(proxy_socket="/x/proxy.sock", forwarder_script="/tmp/clone/forwarder.py"))
    assert ("/tmp/clone/forwarder.py", bwrap.FORWARDER_PATH) in _pairs(argv, "--ro-bind")
    assert bwrap.FORWARDER_PATH.startswith("/run/ironflow/")


def test_the_command_follows_the_separator_untouched() -> None:
    argv = bwrap.bwrap_argv(_settings(command=("echo", "--uid", "0")))
    assert argv[argv.index("--") + 1 :] == ["echo", "--uid", "0"]


def test_no_env_flag_is_ever_emitted() -> None:
    argv = bwrap.bwrap_argv(_settings(managed_settings_dir="/m", proxy_socket="/s"))
    assert "--setenv" not in argv
    assert "--clearenv" not in argv


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("relative/path", "must be absolute"),
        ("/home/claude", "reserved path"),
        ("/home/claude/x", "reserved path"),
        ("/tmp", "reserved path"),
        ("/etc/claude-code", "reserved path"),
        ("/etc/ironflow/claude-profile/0", "reserved path"),
        ("/", "reserved path"),
    ],
)
def test_a_step_mount_at_a_reserved_or_relative_path_is_refused(target: str, problem: str) -> None:
    with pytest.raises(errors.ConfigError, match=problem):
        bwrap.bwrap_argv(_settings(read_only_mounts=(bwrap.ReadOnlyMount("/src", target),)))


def test_duplicate_mount_paths_are_refused() -> None:
    mounts = (bwrap.ReadOnlyMount("/a", "/data"), bwrap.ReadOnlyMount("/b", "/data/"))
    with pytest.raises(errors.ConfigError, match="duplicate volume mount path"):
        bwrap.bwrap_argv(_settings(read_only_mounts=mounts))


def test_empty_command_and_bad_sizes_are_refused() -> None:
    with pytest.raises(errors.ConfigError, match="needs a command"):
        bwrap.bwrap_argv(_settings(command=()))
    with pytest.raises(errors.ConfigError, match="home size limit"):
        bwrap.bwrap_argv(_settings(home_size_bytes=0))


@given(st.lists(st.from_regex(r"[a-z][a-z0-9.-]{0,12}", fullmatch=True), max_size=12, unique=True))
def test_hidden_root_entries_never_bound_whatever_the_host_holds(names: list[str]) -> None:
    entries = tuple(bwrap.HostEntry(n, is_dir=True) for n in [*names, "root", "home", "run"])
    argv = bwrap.bwrap_argv(_settings(root_entries=entries))
    bound = {dest for _, dest in _pairs(argv, "--ro-bind")}
    assert not {"/root", "/home", "/run"} & bound


# --- gVisor --------------------------------------------------------------------------------


def test_gvisor_without_proxy_has_no_network_and_drops_to_uid_10001() -> None:
    shown = gvisor.GvisorSettings(command=("id",), managed_settings_dir="/m")
    argv = gvisor.gvisor_argv(shown, "/t/gvisor")
    assert argv[:4] == ["runsc", "--rootless", "--ignore-cgroups", "--network=none"]
    assert argv[-6:] == ["--root", "/t/gvisor/state", "run", "--bundle", "/t/gvisor", gvisor.container_id("/t/gvisor")]
    script = gvisor.oci_spec(shown, {})["process"]["args"][-1]
    assert "setpriv --reuid 10001 --regid 10001 --clear-groups" in script
    assert "--bounding-set=-all" in script
    assert "--no-new-privs" in script
    assert script.rstrip().endswith("'id'")


def test_gvisor_with_proxy_runs_in_a_fresh_network_namespace_behind_the_relay() -> None:
    bridge = gvisor.ProxyBridge(18080, "/t/proxy.sock", "/py/bin/python3", "/src/forwarder.py")
    argv = gvisor.gvisor_argv(gvisor.GvisorSettings(command=("true",), proxy=bridge), "/t/gvisor")
    assert argv[:6] == ["bwrap", "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent"]
    runsc = argv.index("runsc")
    assert argv[runsc : runsc + 4] == ["runsc", "--rootless", "--ignore-cgroups", "--network=host"]
    assert argv[-3:] == ["--bundle", "/t/gvisor", gvisor.container_id("/t/gvisor")]
    assert argv[argv.index("/src/forwarder.py") + 1 : runsc] == ["18080", "/t/proxy.sock", "--"]


def test_gvisor_spec_runs_the_setup_as_root_with_few_capabilities_and_refuses_user_namespaces() -> None:
    shown = gvisor.GvisorSettings(command=("true",), profile_dirs=("/p",))
    spec = gvisor.oci_spec(shown, {"HOME": "/home/claude", "A": "b=c"})
    process = spec["process"]
    assert process["user"] == {"uid": 0, "gid": 0}
    assert process["args"][:2] == ["sh", "-c"]
    assert process["args"][2].rstrip().endswith("'true'")
    assert process["env"] == ["HOME=/home/claude", "A=b=c"]
    assert set(process["capabilities"]["bounding"]) == set(gvisor.SETUP_CAPABILITIES)
    assert process["capabilities"]["inheritable"] == process["capabilities"]["ambient"] == []
    assert process["noNewPrivileges"] is True
    assert "CAP_NET_RAW" not in gvisor.SETUP_CAPABILITIES
    assert spec["root"] == {"path": "/", "readonly": False}
    assert spec["linux"]["seccomp"] == seccomp.oci_user_namespace_rules()
    assert {m["destination"]: m.get("options") for m in spec["mounts"]}["/sys"] == ["ro"]


def test_a_gvisor_step_with_nothing_to_do_as_root_starts_as_its_uid_with_no_capability() -> None:
    """runsc sets the uid, the groups, the capabilities and no_new_privs: no setpriv, no root shell."""
    spec = gvisor.oci_spec(gvisor.GvisorSettings(command=("id",), working_dir="/home/claude/w"), {})
    process = spec["process"]
    assert process["user"] == {"uid": 10001, "gid": 10001}
    assert all(caps == [] for caps in process["capabilities"].values())
    assert set(process["capabilities"]) == {"bounding", "effective", "permitted", "inheritable", "ambient"}
    assert process["noNewPrivileges"] is True
    script = process["args"][2]
    assert "setpriv" not in script
    assert "mount" not in script
    assert script.splitlines()[-1] == "exec 'id'"  # the shell's 127 and 126, not runsc's 128
    assert "cd '/home/claude/w'" in script  # a spec cwd runsc would make on the host when missing
    assert process["cwd"] == "/"


def test_the_environment_is_in_the_spec_never_on_the_gvisor_argv() -> None:
    shown = gvisor.GvisorSettings(command=("true",))
    argv = gvisor.gvisor_argv(shown, "/t/gvisor")
    assert "ifap_secret" in str(gvisor.oci_spec(shown, {"ANTHROPIC_AUTH_TOKEN": "ifap_secret"}))
    assert not [a for a in argv if "ifap_" in a or ("=" in a and not a.startswith("--"))]


def test_gvisor_setup_copies_settings_before_hiding_tmp_and_limits_sizes() -> None:
    """A tmpfs over a copy's source is the script's, after the copy, with /run last; the others the spec's."""
    shown = gvisor.GvisorSettings(command=("true",), managed_settings_dir="/tmp/x/ms", home_size_bytes=99)
    script = gvisor.setup_script(shown)
    copy = script.index("/etc/claude-code")
    hide_tmp = script.index("tmpfs '/tmp'")
    assert copy < hide_tmp < script.index("tmpfs '/run'")
    assert script.startswith("_ifl_fail()")
    assert gvisor.script_tmpfs(shown) == ("/tmp", "/run")
    tmpfs = {m["destination"]: m["options"] for m in gvisor.tmpfs_mounts(shown)}
    assert tmpfs == {
        "/home": ["mode=0755", "size=1m"],
        "/home/claude": ["mode=0700", "uid=10001", "gid=10001", "size=99"],
        "/var/tmp": ["mode=1777", f"size={shown.tmp_size_bytes}"],
    }
    assert "tmpfs '/home" not in script


def test_gvisor_tmpfs_are_the_specs_when_the_script_reads_nothing_under_them() -> None:
    shown = gvisor.GvisorSettings(command=("true",), managed_settings_dir="/srv/ms", tmp_size_bytes=4096)
    assert gvisor.script_tmpfs(shown) == ()
    spec = gvisor.oci_spec(shown, {})
    tmpfs = [m["destination"] for m in spec["mounts"] if m["type"] == "tmpfs" and m["destination"] != "/dev"]
    assert tmpfs == ["/home", "/home/claude", "/tmp", "/var/tmp", "/run"]  # parents first
    assert "tmpfs" not in gvisor.setup_script(shown)
    home = gvisor.GvisorSettings(command=("true",), profile_dirs=("/home/me/p",))
    assert gvisor.script_tmpfs(home) == ("/home", "/run")


def test_every_gvisor_setup_line_reports_its_own_failure() -> None:
    script = gvisor.setup_script(gvisor.GvisorSettings(command=("true",), managed_settings_dir="/m"))
    body = script.splitlines()[1:-1]
    assert body
    assert all(line.startswith("{ ") and " || _ifl_fail '" in line for line in body)
    assert gvisor.SETUP_FAILED in script.splitlines()[0]
    assert script.splitlines()[-1].startswith("exec setpriv")


def test_a_seccomp_program_is_read_from_the_given_descriptor() -> None:
    argv = bwrap.bwrap_argv(_settings(seccomp_fd=7))
    assert argv[argv.index("--seccomp") + 1] == "7"
    assert "--seccomp" not in bwrap.bwrap_argv(_settings())


def test_gvisor_bounds_the_world_writable_var_tmp() -> None:
    spec = gvisor.oci_spec(gvisor.GvisorSettings(command=("true",), tmp_size_bytes=4096), {})
    assert {"destination": "/var/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["mode=1777", "size=4096"]} in (
        spec["mounts"]
    )
    held = gvisor.setup_script(
        gvisor.GvisorSettings(command=("true",), tmp_size_bytes=4096, profile_dirs=("/var/tmp/p",))
    )
    assert "if [ -d /var/tmp ]; then mount -t tmpfs -o mode=1777,size=4096 tmpfs '/var/tmp'; fi" in held


@pytest.mark.parametrize(
    ("source", "target", "message"),
    [
        ("/home/me/repo", "/home/me/repo", "hides '/home'"),
        ("/srv/data", "/run/user/", "hides '/run'"),
        ("/var/tmp/x", "/var/tmp/x", "hides '/var/tmp'"),
    ],
)
def test_gvisor_refuses_a_host_path_where_its_setup_would_hide_it(source: str, target: str, message: str) -> None:
    problem = gvisor.host_path_problem(source, target)
    assert problem is not None
    assert message in problem
    assert gvisor.host_path_problem("/srv/data", "/srv/data/") is None
    assert gvisor.host_path_problem("/home/me/repo", "/data") is None  # a bind shows a hidden source elsewhere
    with pytest.raises(errors.ConfigError, match=re.escape(message)):
        gvisor.oci_spec(gvisor.GvisorSettings(("true",), writable_mounts=(bwrap.WritableMount(source, target),)), {})


def test_gvisor_binds_each_source_at_its_own_path_then_on_to_its_target_inside() -> None:
    """runsc makes a bind's mount point in the host's root: only a source's own path (it exists) is used."""
    shown = gvisor.GvisorSettings(
        command=("true",),
        read_only_mounts=(bwrap.ReadOnlyMount("/srv/ref", "/workspace/ref/"), bwrap.ReadOnlyMount("/opt/x", "/opt/x")),
        writable_mounts=(bwrap.WritableMount("/tmp/run/workspace", "/workspace"),),
    )
    spec = gvisor.oci_spec(shown, {})
    binds = [m for m in spec["mounts"] if m["type"] == "bind"]
    assert binds == [
        {
            "destination": "/tmp/run/workspace",
            "type": "bind",
            "source": "/tmp/run/workspace",
            "options": ["rbind", "rw"],
        },
        {"destination": "/srv/ref", "type": "bind", "source": "/srv/ref", "options": ["rbind", "ro"]},
    ]  # parents first; a read-only directory at its own path is the host root's view
    script = spec["process"]["args"][-1]
    inside = script.index("mount --bind '/tmp/run/workspace' '/workspace'")
    assert inside < script.index("mount --bind '/srv/ref' '/workspace/ref'") < script.index("tmpfs '/tmp'")
    twice = dataclasses.replace(shown, read_only_mounts=(bwrap.ReadOnlyMount("/srv/ref", "/workspace"),))
    with pytest.raises(errors.ConfigError, match="duplicate volume mount path '/workspace'"):
        gvisor.oci_spec(twice, {})
    again = dataclasses.replace(shown, read_only_mounts=(bwrap.ReadOnlyMount("/tmp/run/workspace", "/data"),))
    with pytest.raises(errors.ConfigError, match="mounts a host directory once"):
        gvisor.oci_spec(again, {})
    reserved = dataclasses.replace(shown, writable_mounts=(bwrap.WritableMount("/srv/x", "/etc/claude-code"),))
    with pytest.raises(errors.ConfigError, match="writable volume cannot be mounted at reserved path"):
        gvisor.oci_spec(reserved, {})
    root = dataclasses.replace(shown, writable_mounts=(bwrap.WritableMount("/", "/data"),))
    with pytest.raises(errors.ConfigError, match="absolute path below '/'"):
        gvisor.oci_spec(root, {})


def test_gvisor_setup_tmpfs_are_the_paths_it_hides() -> None:
    every = (f"{top}/src" for top in gvisor.SETUP_TMPFS[:-1])  # a source under each: all the script's
    shown = gvisor.GvisorSettings(command=("true",), profile_dirs=tuple(every))
    script = gvisor.setup_script(shown)
    setup = [line.split(" || _ifl_fail ")[0] for line in script.splitlines()]
    mounted = {m for line in setup for m in re.findall(r" tmpfs '?(/[^';\s]*)", line)}
    assert {m for m in mounted if not m.startswith("/home/")} == set(gvisor.SETUP_TMPFS)
    plain = gvisor.tmpfs_mounts(gvisor.GvisorSettings(command=("true",)))
    assert {m["destination"] for m in plain if not m["destination"].startswith("/home/")} == set(gvisor.SETUP_TMPFS)


def test_the_egress_socket_is_bound_and_relayed_beside_the_proxy() -> None:
    argv = bwrap.bwrap_argv(_settings(proxy_socket="/x/proxy.sock", egress_socket="/x/egress.sock"))
    assert ("/x/egress.sock", bwrap.EGRESS_SOCKET_PATH) in _pairs(argv, "--ro-bind")
    relay = bwrap.relay_argv("/py", "/f.py", 18080, "/p.sock", (18081, "/e.sock"))
    assert relay == ("/py", "-I", "-S", "/f.py", "18080", "/p.sock", "18081", "/e.sock", "--")
    bridge = gvisor.ProxyBridge(18080, "/t/proxy.sock", "/py/bin/python3", "/src/forwarder.py", egress=(18081, "/t/e"))
    shown = gvisor.gvisor_argv(gvisor.GvisorSettings(command=("true",), proxy=bridge), "/t/gvisor")
    assert shown[shown.index("/src/forwarder.py") + 1 : shown.index("runsc")] == [
        "18080",
        "/t/proxy.sock",
        "18081",
        "/t/e",
        "--",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["18080", "/p"],
        ["18080", "--", "true"],
        ["18080", "/p", "x", "/e", "--", "true"],
        ["1", "/a", "2", "/b", "3", "/c", "--", "t"],
    ],
)
def test_the_forwarder_refuses_a_bad_relay_list_with_its_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert forwarder.main(argv) == 2
    assert capsys.readouterr().err.startswith("usage: forwarder.py PORT SOCKET [PORT SOCKET] -- CMD")


def test_the_egress_variables_carry_the_token_and_let_loopback_bypass() -> None:
    env = environment.egress_env("ifap_x")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == f"http://ironflow:ifap_x@127.0.0.1:{environment.EGRESS_PORT}"
    assert env["NO_PROXY"] == env["no_proxy"] == "127.0.0.1,localhost"


def test_a_session_sandbox_gets_a_private_devpts_and_dev_stays_read_only() -> None:
    argv = bwrap.bwrap_argv(_settings(ptys=True))
    assert tuple(argv[argv.index("--dev") : argv.index("--dev") + 2]) == ("--dev", "/dev")
    assert argv[argv.index("--remount-ro", argv.index("--dev")) + 1] == "/dev"
    assert "--dev" not in bwrap.bwrap_argv(_settings())  # a step's /dev has no pty


def test_a_sandbox_dies_with_its_parent_unless_kept_across_a_restart() -> None:
    assert "--die-with-parent" in bwrap.bwrap_argv(_settings())
    assert "--die-with-parent" not in bwrap.bwrap_argv(_settings(die_with_parent=False))


def test_the_relay_a_sandbox_runs_is_the_forwarder_modules_own_file() -> None:
    """Named by path, so a plain command does not load the relay's module (ctypes, threads)."""
    assert os.path.realpath(forwarder.__file__) == sandbox_argv.FORWARDER_FILE
    assert os.path.isfile(sandbox_argv.FORWARDER_FILE)
