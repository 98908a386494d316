"""A concept-08 warm pod waits for adoption: its wrapper runs under sh against a labels file
that changes as the downward API would change it when the controller removes the pool label,
then runs the agent's shell (its argument) under ``timeout`` with the provider's deadline."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ironflow.agent_sandbox import catalog, kro


def wrapper(labels_file: Path, *, deadline_s: int | None = None) -> tuple[str, str]:
    """The pod's ``sh -c`` wrapper (labels file moved to ``labels_file``) and its ``$0``."""
    (rgd,) = catalog.render_pattern("kro-template")
    command = rgd["spec"]["resources"][0]["template"]["spec"]["podTemplate"]["spec"]["containers"][0]["command"]
    text: str = command[2].replace(f"{kro.PODINFO_DIR}/labels", str(labels_file))
    if deadline_s is not None:
        text = text.replace("timeout -k 10 360 ", f"timeout -k 1 {deadline_s} ")
        assert f"timeout -k 1 {deadline_s} " in text
    return text, command[3]


async def test_the_agent_starts_only_once_the_pool_label_is_gone(tmp_path: Path) -> None:
    labels_file = tmp_path / "labels"
    labels_file.write_text(f'{kro.POOL_LABEL}="811c9dc5"\napp.kubernetes.io/managed-by="ironflow"\n')
    text, arg0 = wrapper(labels_file)
    proc = await asyncio.create_subprocess_exec("sh", "-c", text, arg0, "echo started", stdout=asyncio.subprocess.PIPE)
    done = asyncio.ensure_future(proc.communicate())
    try:
        finished, _ = await asyncio.wait({done}, timeout=1.5)
        assert not finished, "the agent started while the pod was still a pool member"
        labels_file.write_text('agents.x-k8s.io/claim-uid="abc"\napp.kubernetes.io/managed-by="ironflow"\n')
        out, _ = await asyncio.wait_for(done, 5)
        assert (proc.returncode, out) == (0, b"started\n")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_deadline_ends_an_adopted_agent(tmp_path: Path) -> None:
    """The deadline counts from adoption (``timeout``), not from the pod's start."""
    labels_file = tmp_path / "labels"
    labels_file.write_text('app.kubernetes.io/managed-by="ironflow"\n')
    text, arg0 = wrapper(labels_file, deadline_s=1)
    proc = await asyncio.create_subprocess_exec("sh", "-c", text, arg0, "sleep 30")
    try:
        assert await asyncio.wait_for(proc.wait(), 10) == 124  # timeout's own status
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
