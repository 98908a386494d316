"""The old names of renamed symbols: each still works for one release and warns naming the new one."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from ironflow import _renamed
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig

OLD_NAMES = sorted((module, old, new) for module, names in _renamed.RENAMED.items() for old, new in names.items())


@pytest.mark.parametrize(("module", "old", "new"), OLD_NAMES)
def test_an_old_name_warns_and_is_the_new_one(module: str, old: str, new: str) -> None:
    target = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"^{module}\.{old} is renamed {new}; the old name goes"):
        value = getattr(target, old)
    assert value is getattr(target, new)
    assert old not in target.__all__, "an old name is not exported by a star import"
    assert new in target.__all__


@pytest.mark.parametrize(("module", "old", "new"), OLD_NAMES)
def test_from_import_of_an_old_name_warns(module: str, old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is renamed {new}"):
        exec(f"from {module} import {old}", {})  # noqa: S102 - the import statement itself is under test


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    for module in _renamed.RENAMED:
        with pytest.raises(AttributeError, match="no_such_name_here"):
            _ = importlib.import_module(module).no_such_name_here


def test_a_script_using_an_old_name_runs_and_is_told_the_new_one() -> None:
    code = "from ironflow.steps import AccountSession; print(AccountSession.__name__)"
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "AccountLease"
    assert "ironflow.steps.AccountSession is renamed AccountLease" in done.stderr


def test_account_session_builder_is_account_lease_and_warns() -> None:
    lease = AccountLease("acct", "ANTHROPIC_API_KEY", Secret("k"))
    config = AgentConfig("hi")
    with pytest.warns(DeprecationWarning, match="account_session is renamed account_lease"):
        old = config.account_session(lease)
    assert old.account is config.account_lease(lease).account is lease
