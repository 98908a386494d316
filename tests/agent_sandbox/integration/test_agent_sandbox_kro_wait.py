"""A concept-08 warm pod waits for adoption: its wait loop runs under sh against a labels file
that changes as the downward API would change it when the controller removes the pool label."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ironflow.agent_sandbox import catalog, kro


def wait_loop(labels_file: Path) -> str:
    (rgd,) = catalog.render_pattern("kro-template")
    shell: str = rgd["spec"]["resources"][0]["template"]["spec"]["podTemplate"]["spec"]["containers"][0]["command"][2]
    loop = shell.split("done; ", 1)[0] + "done"
    return loop.replace(f"{kro.PODINFO_DIR}/labels", str(labels_file))


async def test_the_agent_starts_only_once_the_pool_label_is_gone(tmp_path: Path) -> None:
    labels_file = tmp_path / "labels"
    labels_file.write_text(f'{kro.POOL_LABEL}="811c9dc5"\napp.kubernetes.io/managed-by="ironflow"\n')
    proc = await asyncio.create_subprocess_exec("sh", "-c", wait_loop(labels_file) + "; echo started")
    done = asyncio.ensure_future(proc.wait())
    try:
        finished, _ = await asyncio.wait({done}, timeout=1.5)
        assert not finished, "the agent started while the pod was still a pool member"
        labels_file.write_text('agents.x-k8s.io/claim-uid="abc"\napp.kubernetes.io/managed-by="ironflow"\n')
        assert await asyncio.wait_for(done, 3) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
