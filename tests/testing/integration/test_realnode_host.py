"""``scripts/kube-testenv up --node`` from a shell, a pod on the node, then ``down``: nothing it
started is left (processes, cgroups, mounts, network namespaces, the work dir) and the host's
sysctls, iptables rules, ipsets and links are as before. Skipped when the node cannot run here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.fakes.real_node import skip_or_fail

from ironflow.testing import realnode
from ironflow.testing._kubeenv_bins import KubeEnvNotAvailable, find_node_bin_dir

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "kube-testenv"
#: What kubelet, kube-proxy, kube-router, containerd and the CNI plugins want to set on a host.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv4/conf/all/rp_filter",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/ipv6/conf/all/forwarding",
)


def _out(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def _host_state() -> dict[str, object]:
    sysctls: dict[str, str | None] = {}
    for name in SYSCTLS:
        try:
            sysctls[name] = Path("/proc/sys", name).read_text().strip()
        except OSError:
            sysctls[name] = None
    return {
        "sysctls": sysctls,
        "iptables": _out("iptables-save"),
        "ip6tables": _out("ip6tables-save"),
        "ipsets": _out("ipset", "list", "-n"),
        "links": sorted(line.split(":")[1].strip() for line in _out("ip", "-o", "link").splitlines()),
    }


def _strip_counters(rules: str) -> str:
    """iptables-save without its comments and packet counters (they move on their own)."""
    return "\n".join(line.split(" [")[0] for line in rules.splitlines() if not line.startswith("#"))


def _node_traces(workdir: str, cgroup: str) -> dict[str, list[str]]:
    """What one node left: processes naming its work dir or in its cgroup, its cgroup's directories,
    host mounts under its work dir, and the work dir itself (other nodes may run beside it)."""
    procs = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                groups = (proc / "cgroup").read_text()
                zombie = (proc / "stat").read_text().rpartition(")")[2].split()[0] == "Z"
            except (OSError, IndexError):
                continue
            if zombie:  # exited: holds nothing but its pid until this machine's init reaps it
                continue
            if workdir in cmd or f":{cgroup}" in groups:
                procs.append(f"{proc.name}: {cmd[:200]}")
    return {
        "processes": procs,
        "cgroups": [str(p) for p in Path("/sys/fs/cgroup").glob(f"*{cgroup}")],
        "mounts": [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if workdir in line],
        "workdir": [workdir] if Path(workdir).exists() else [],
    }


def _serve_line(state: Path) -> tuple[str, str]:
    """The work dir and cgroup the node's serve process reported (``up: … workdir=… cgroup=…``)."""
    for line in (state / "serve.log").read_text().splitlines():
        if line.startswith("up: "):
            fields = dict(part.split("=", 1) for part in line.split()[2:])
            return fields["workdir"], fields["cgroup"]
    raise AssertionError("the node's serve log has no 'up:' line")


@pytest.fixture
def node_bin() -> Path:
    missing = realnode.missing_tools()
    if missing:
        skip_or_fail(f"the real node needs {', '.join(missing)}: bash scripts/install --test")
    try:
        return find_node_bin_dir()
    except KubeEnvNotAvailable as exc:
        skip_or_fail(str(exc))


@pytest.mark.usefixtures("node_bin")
def test_up_then_down_leaves_the_host_as_it_was(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    before = _host_state()
    up = subprocess.run(["bash", str(SCRIPT), "up", "--node"], capture_output=True, text=True, env=env, timeout=600)
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = tmp_path / "ironflow-kube-testenv-node" / "kubeconfig"
        assert up.stdout.strip() == f"export KUBECONFIG={kubeconfig}"
        workdir, cgroup = _serve_line(tmp_path / "ironflow-kube-testenv-node")
        during = _node_traces(workdir, cgroup)
        assert any("kubelet" in p for p in during["processes"]), during
        assert any("containerd" in p for p in during["processes"]), during
        assert during["cgroups"], during
        state = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, env=env)
        assert state.returncode == 0
        assert f"export KUBECONFIG={kubeconfig}" in state.stdout
        # the host's side while the node runs: its rules live in the node's namespace only
        assert _strip_counters(_out("iptables-save")) == _strip_counters(str(before["iptables"]))
        assert "cni0" not in _out("ip", "-o", "link")
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, env=env, timeout=300)
    assert down.returncode == 0, down.stderr
    assert _node_traces(workdir, cgroup) == {"processes": [], "cgroups": [], "mounts": [], "workdir": []}
    after = _host_state()
    assert after["sysctls"] == before["sysctls"]
    assert _strip_counters(str(after["iptables"])) == _strip_counters(str(before["iptables"]))
    assert _strip_counters(str(after["ip6tables"])) == _strip_counters(str(before["ip6tables"]))
    assert after["ipsets"] == before["ipsets"]
    assert after["links"] == before["links"]
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True, env=env)
    assert status.returncode == 1
