"""The runs page's query string as a checked value: filters, page size, the cursor (pure).

A value that cannot be right is refused with one line naming the parameter and what it
takes (the handler answers 400 with it); an absent or empty parameter is no filter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ironflow.engine import model

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "BadQuery", "RunsQuery", "parse_runs_query"]

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
#: What a run id (the cursor) may look like: generated ids are UUIDs, tests' are words.
_RUN_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_MAX_WORKFLOW: Final = 1000


class BadQuery(ValueError):
    """A query parameter that cannot be right; ``str()`` is the one line to show."""


@dataclass(frozen=True)
class RunsQuery:
    status: model.RunStatus | None = None
    workflow: str | None = None
    before: str | None = None
    limit: int = DEFAULT_LIMIT

    def params(self, *, before: str | None = None) -> dict[str, str | None]:
        """The query string of this page's filters (the ``older`` link adds its cursor)."""
        return {
            "status": str(self.status) if self.status else None,
            "workflow": self.workflow,
            "limit": str(self.limit) if self.limit != DEFAULT_LIMIT else None,
            "before": before,
        }


def parse_runs_query(query: Mapping[str, str]) -> RunsQuery:
    """``?status=&workflow=&before=&limit=`` as a :class:`RunsQuery`.

    Raises:
        BadQuery: a value is not one the parameter takes.
    """
    unknown = sorted(set(query) - {"status", "workflow", "before", "limit"})
    if unknown:
        raise BadQuery(f"unknown query parameter {unknown[0]!r}; the runs page takes status, workflow, before, limit")
    status = query.get("status") or None
    if status is not None and status not in set(model.RunStatus):
        raise BadQuery(f"status {status!r} is not a run state; use one of {', '.join(model.RunStatus)}")
    workflow = (query.get("workflow") or "").strip() or None
    if workflow is not None and len(workflow) > _MAX_WORKFLOW:
        raise BadQuery(f"workflow is longer than {_MAX_WORKFLOW} characters")
    before = query.get("before") or None
    if before is not None and not _RUN_ID.fullmatch(before):
        raise BadQuery("before must be a run id (the cursor of the older link)")
    raw_limit = query.get("limit") or str(DEFAULT_LIMIT)
    if not (raw_limit.isascii() and raw_limit.isdigit() and 1 <= int(raw_limit) <= MAX_LIMIT):
        raise BadQuery(f"limit {raw_limit!r} is not a number from 1 to {MAX_LIMIT}")
    return RunsQuery(model.RunStatus(status) if status else None, workflow, before, int(raw_limit))
