"""Versioned SQL migrations for PostgreSQL, shared by every ironflow component that has tables.

A component ships ``NNNN_name.sql`` files in a package directory; :func:`migrate`
applies the ones not yet recorded, in version order, each in its own transaction,
and records ``(component, version)`` in ``ironflow.schema_migrations``. The whole pass
runs under a session advisory lock, so replicas starting together apply each file
exactly once and the others wait, then find nothing to do.

Never edits an applied file's effect: a change is a new file with the next number.
:func:`plan` (pure) decides which files to apply from the recorded versions.

>>> [m.version for m in plan([Migration(1, "a", ""), Migration(2, "b", "")], applied={1})]
[2]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final

from ironflow.errors import ConfigError

__all__ = ["LOCK_KEY", "Migration", "load", "migrate", "plan"]

#: Advisory lock id shared by all components: one migration pass at a time per database.
LOCK_KEY: Final = 0x1F0_F10A
_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
_BOOKKEEPING: Final = """
CREATE SCHEMA IF NOT EXISTS ironflow;
CREATE TABLE IF NOT EXISTS ironflow.schema_migrations (
    component TEXT NOT NULL,
    version INT NOT NULL,
    name TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (component, version)
);
"""


@dataclass(frozen=True)
class Migration:
    """One SQL file: its version (the ``NNNN`` prefix), name and text."""

    version: int
    name: str
    sql: str = field(repr=False)


def load(package: str) -> list[Migration]:
    """Every ``NNNN_name.sql`` of a package directory, sorted; other files are ignored.

    Raises:
        ConfigError: two files share a version.
    """
    found: dict[int, Migration] = {}
    for entry in resources.files(package).iterdir():
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version in found:
            raise ConfigError(f"migrations of {package}: version {version:04d} appears twice; renumber one file")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def plan(migrations: Iterable[Migration], applied: set[int]) -> list[Migration]:
    """The migrations not yet applied, in version order."""
    return sorted((m for m in migrations if m.version not in applied), key=lambda m: m.version)


async def migrate(connection: Any, component: str, migrations: Sequence[Migration] | str) -> list[int]:
    """Apply the pending migrations of ``component`` on an asyncpg connection; the versions applied.

    ``migrations`` is a package name (its ``.sql`` files) or a list of :class:`Migration`.
    """
    todo_source = load(migrations) if isinstance(migrations, str) else list(migrations)
    await connection.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        await connection.execute(_BOOKKEEPING)
        rows = await connection.fetch("SELECT version FROM ironflow.schema_migrations WHERE component = $1", component)
        applied_now: list[int] = []
        for migration in plan(todo_source, {int(r["version"]) for r in rows}):
            async with connection.transaction():
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO ironflow.schema_migrations (component, version, name) VALUES ($1, $2, $3)",
                    component,
                    migration.version,
                    migration.name,
                )
            applied_now.append(migration.version)
        return applied_now
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
