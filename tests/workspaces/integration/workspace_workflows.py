"""The workflow the workspace retry test runs through the engine (loaded by path, as ``ironflow run`` does)."""

from __future__ import annotations

from typing import Any

from ironflow.engine import Context, RetryPolicy
from ironflow.steps import AgentConfig
from ironflow.workspaces import Workspace


async def retried_fix(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """One agent step on a workspace, retried once; its changed files and patch."""
    workspace = Workspace(input["repo"], keep_on_retry=input["keep"])
    result = await ctx.agent(
        "fix", AgentConfig("fix", workspace=workspace), retry=RetryPolicy(1, initial_backoff_s=0.01)
    )
    assert result.workspace is not None
    return {"changed": list(result.workspace.changed_paths), "patch": result.workspace.patch.decode()}
