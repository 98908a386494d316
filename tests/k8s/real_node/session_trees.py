"""The tree the session snapshot tests on the real node write, list and compare (shared by the archive
and the VolumeSnapshot forms)."""

from __future__ import annotations

from ironflow.k8s.settings import K8sResources
from ironflow.sessions.client import AsyncSandbox

#: Eleven pods at once on a small node.
SMALL = K8sResources(
    cpu_request="20m", memory_request="48Mi", ephemeral_storage_request=None, ephemeral_storage_limit=None
)
#: A tree with the modes a copy tends to lose: group-writable, read-only, setgid dirs, symlinks.
MAKE = (
    "set -e; mkdir -p w/d w/e w/g/deep; cd w; printf 'echo hi\\n' > d/x.sh; chmod 751 d/x.sh; chmod 750 d;"
    " chmod 700 e; printf shared > g/deep/s; chmod 664 g/deep/s; chmod 2775 g; printf ro > ro; chmod 444 ro;"
    " head -c 300000 /dev/urandom > bin; chmod 600 bin; ln -s d/x.sh link; ln -s ../ro g/up"
)
#: Every entry under the session's root: type, mode, bytes' digest (a symlink: its text); not the runtime's state.
LIST = (
    "find . -path ./.ironflow -prune -o -mindepth 1 -print | LC_ALL=C sort | while read -r p; do"
    ' if [ -L "$p" ]; then echo "$p l $(readlink "$p")";'
    ' elif [ -f "$p" ]; then echo "$p f $(stat -c %a "$p") $(sha256sum < "$p" | cut -c1-16)";'
    ' else echo "$p d $(stat -c %a "$p")"; fi; done'
)


async def listing(sandbox: AsyncSandbox) -> list[str]:
    """:data:`LIST` run in the session."""
    ran = await sandbox.commands.run(["sh", "-c", LIST])
    assert ran.exit_code == 0, ran
    return ran.stdout.splitlines()


def less_setgid(lines: list[str]) -> list[str]:
    """A listing as a restore leaves it: setuid and setgid dropped (an emptyDir with fsGroup sets setgid)."""
    out = []
    for line in lines:
        path, kind, *rest = line.split(" ")
        if kind in ("d", "f"):
            rest[0] = f"{int(rest[0], 8) & 0o1777:o}"
        out.append(" ".join([path, kind, *rest]))
    return out
