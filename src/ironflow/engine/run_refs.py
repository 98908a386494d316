"""A run as a person names it: its whole id, or a start of it that no other run's id shares.

``ironflow runs show|cancel|retry``, ``ironflow logs`` and the UI's run pages take the same names
and refuse the same ones with the same words (:attr:`RunMatch.problem`): a name no run's id starts
with, and one that starts several (a few of them named). Reads the store; changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ironflow.engine import model
from ironflow.engine.store import Store

__all__ = ["CANDIDATES", "RunMatch", "match_run"]

#: The most run ids a refusal names when a name starts several.
CANDIDATES: Final = 5


@dataclass(frozen=True)
class RunMatch:
    """What ``ref`` names: the run, or none with the ids that start with it (more than one: it is
    ambiguous; at most :data:`CANDIDATES` + 1, so a refusal knows there were more)."""

    ref: str
    run: model.RunRecord | None = None
    candidates: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return self.run is None and len(self.candidates) > 1

    @property
    def problem(self) -> str | None:
        """Why ``ref`` names no run, in one line; None when it names one.

        >>> RunMatch("0190ca", candidates=("0190cafe-1", "0190cafe-2")).problem
        "run id 0190ca is the start of several runs' ids (0190cafe-1, 0190cafe-2); give more of it"
        >>> RunMatch("0190d").problem
        'no run 0190d in the store'
        """
        if self.run is not None:
            return None
        if self.ambiguous:
            named = ", ".join(self.candidates[:CANDIDATES]) + (", …" if len(self.candidates) > CANDIDATES else "")
            return f"run id {self.ref} is the start of several runs' ids ({named}); give more of it"
        return f"no run {self.ref} in the store"


async def match_run(store: Store, ref: str) -> RunMatch:
    """The run whose whole id is ``ref``, else the one run whose id starts with it."""
    if not ref:
        return RunMatch(ref)
    run = await store.get_run(ref)
    if run is not None:
        return RunMatch(ref, run)
    matches = await store.match_run_ids(ref, limit=CANDIDATES + 1)
    if len(matches) > 1:
        return RunMatch(ref, candidates=tuple(matches))
    return RunMatch(ref, await store.get_run(matches[0]) if matches else None)
