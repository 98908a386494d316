"""The workspaces a provider keeps between attempts of a step that asked for it (``keep_on_retry``) (I/O).

By default each attempt opens its workspace afresh in its own run dir, gone when the attempt
returns: a retry starts from the original tree, as ``release_run`` promises. A workspace with
``keep_on_retry`` and a step scope is opened in a directory of its own instead: when the
attempt fails, the provider keeps it (the copy, its first snapshot, the private object store
and a git source's clean clone) under the step's run and name, and the next attempt of that
step works on the very same copy, so it starts from the tree the failed attempt left while
its change set stays relative to the source. An attempt that succeeds, and
:meth:`KeptWorkspaces.release` of the run, remove it; past :data:`MAX_KEPT` the oldest goes,
and a killed worker's are swept by the next provider when it is made (the directories carry
their owner).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Final

from ironflow import errors
from ironflow.local import workdirs
from ironflow.local.workspaces.copies import PreparedWorkspace
from ironflow.workspaces import Workspace

if TYPE_CHECKING:
    from ironflow.steps import AgentConfig

__all__ = ["MAX_KEPT", "PREFIX", "KeptWorkspaces"]

PREFIX: Final = workdirs.KEPT_PREFIX
#: The most workspaces one provider keeps: a step whose last attempt failed is not told to the
#: provider (only ``release_run`` is), so the oldest kept one goes when a new one would pass this.
MAX_KEPT: Final = 16
#: Opens a workspace in a directory: the provider's copy or clone.
Opener = Callable[[Workspace, str], Awaitable[PreparedWorkspace]]


class KeptWorkspaces:
    """Kept workspaces by ``(run id, step)``; one provider's, in its temp dir."""

    def __init__(self, temp_dir: str | None, *, limit: int = MAX_KEPT) -> None:
        self.temp_dir = temp_dir
        self.limit = limit
        self._kept: dict[tuple[str, str], tuple[str, PreparedWorkspace]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    @contextlib.asynccontextmanager
    async def attempt(
        self, config: AgentConfig, run_dir: str, open_: Opener
    ) -> AsyncIterator[PreparedWorkspace | None]:
        """The attempt's workspace (None: the step has none): opened in ``run_dir``, or, kept
        across attempts, the previous failed attempt's (opened anew the first time)."""
        spec, scope = config.workspace, config.scope
        if spec is None:
            yield None
            return
        if not spec.keep_on_retry or scope is None:
            yield await open_(spec, run_dir)
            return
        key = (scope.run_id, scope.step)
        kept = self._kept.pop(key, None)
        if kept is None:
            place = workdirs.marked_dir(self.temp_dir, PREFIX)
            try:
                kept = (place, await open_(spec, place))
            except BaseException:
                shutil.rmtree(place, ignore_errors=True)
                raise
        try:
            yield kept[1]
        except errors.WorkspaceUnsafe:
            shutil.rmtree(kept[0], ignore_errors=True)  # what no workspace may hold is not kept for a retry
            raise
        except BaseException:
            self._kept[key] = kept  # the next attempt of this step starts from this tree
            while len(self._kept) > self.limit:  # dicts keep insertion order: the oldest first
                place, _ = self._kept.pop(next(iter(self._kept)))
                shutil.rmtree(place, ignore_errors=True)
            raise
        shutil.rmtree(kept[0], ignore_errors=True)

    def release(self, run_id: str) -> int:
        """Remove the run's kept workspaces; how many there were."""
        gone = [key for key in self._kept if key[0] == run_id]
        for key in gone:
            place, _ = self._kept.pop(key)
            shutil.rmtree(place, ignore_errors=True)
        return len(gone)
