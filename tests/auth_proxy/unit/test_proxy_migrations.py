"""The versioned-SQL migration runner's pure parts: which files, in which order."""

from __future__ import annotations

from ironflow import migrations


def test_plan_keeps_only_unapplied_versions_in_order() -> None:
    files = [migrations.Migration(3, "c", ""), migrations.Migration(1, "a", ""), migrations.Migration(2, "b", "")]
    assert [m.version for m in migrations.plan(files, applied={2})] == [1, 3]
    assert migrations.plan(files, applied={1, 2, 3}) == []


def test_load_reads_the_auth_proxy_sql_files_in_version_order() -> None:
    loaded = migrations.load("ironflow.auth_proxy.migrations")
    assert [m.version for m in loaded] == sorted(m.version for m in loaded)
    assert [m.name for m in loaded][:2] == ["grants", "revocations"]
    assert "auth_proxy_grants" in loaded[0].sql
