"""On a real node (kubelet, containerd, runc and gVisor): the pods ironflow renders run under Pod
Security ``restricted`` as the hardening says (uid 10001, read-only root, no capabilities, no new
privileges, seccomp filtering), with RuntimeClass ``gvisor`` in a gVisor kernel, and a root pod
never starts in such a namespace. Skipped when the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.kube import api as k8s

PROBE = (
    "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
    "if touch /probe 2>/dev/null; then echo root-writable; else echo root-read-only; fi; "
    "cat /proc/version"
)


def _fields(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_restricted_pod_runs_hardened_on_the_real_node(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    run = PodRun("probe", need_image["runner"], PROBE).namespace(node_ns).restricted(read_only_root=True).timeout(120)
    if runtime == "gvisor":
        run = run.runtime_class("gvisor")
    out = await run.run(node_api)
    assert out.exit_code == 0, out
    lines = out.logs.splitlines()
    assert lines[0] == "10001"
    fields = _fields(out.logs)
    assert fields["CapEff"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"
    assert "root-read-only" in lines
    version = lines[-1]
    if runtime == "gvisor":
        assert version.split()[2].endswith("-gvisor"), version  # gVisor's kernel, not the host's
        assert fields["Seccomp"] == "0", version  # the sentry filters the sandbox's syscalls itself
    else:
        assert fields["Seccomp"] == "2", "RuntimeDefault seccomp filters the container"
        assert "gvisor" not in version


async def test_a_root_pod_never_starts_in_a_restricted_namespace(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    run = PodRun("root", need_image["runner"], "id -u").namespace(node_ns).timeout(60)
    with pytest.raises(errors.IronflowError) as caught:
        await run.run(node_api)
    assert "violates PodSecurity" in str(caught.value)
