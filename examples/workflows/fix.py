"""Fix a bug in a repository, then review the fix: the fix step's patch is the review's input.

Runs offline (no key) on the local sandbox, the offline model scripted to edit the file:

    ironflow run examples/workflows/fix.py:fix --wait --fake-model=examples/workflows/fix.yaml \
        --input '{"repo": "examples/workflows/fix-demo", "bug": "add() subtracts"}'

The fix step works on a private copy of ``repo`` at ``/workspace`` (``repo`` itself is not
written); its result carries the change as a git patch, stored with the step, so a run executed
again replays it and the review sees the same patch. Add ``"apply": true`` to the input to
write the fix into ``repo`` once the step succeeds.
"""

from __future__ import annotations

from typing import Any

from ironflow.engine import Context
from ironflow.steps import AgentConfig
from ironflow.workspaces import Workspace

#: What the fix step may do without asking: read and edit files in its workspace.
FIX_TOOLS = ("Read", "Edit", "Write")


async def fix(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """Fix ``input["bug"]`` in the directory ``input["repo"]``; review the patch."""
    bug = input.get("bug", "the failing test")
    workspace = Workspace(input["repo"], apply=bool(input.get("apply", False)))
    fixed = await ctx.agent(
        "fix", AgentConfig(f"Fix this bug in the repository: {bug}", workspace=workspace, allowed_tools=FIX_TOOLS)
    )
    changes = fixed.workspace
    patch = changes.patch.decode(errors="replace") if changes is not None else ""
    if not patch:
        return {"patch": "", "changed_files": [], "review": "no change was made"}
    review = await ctx.agent("review", AgentConfig(f"Review this patch, which should fix '{bug}':\n\n{patch}"))
    return {
        "patch": patch,
        "changed_files": list(changes.changed_paths) if changes is not None else [],
        "applied": changes.applied if changes is not None else False,
        "review": review.text,
    }
