"""Workflow references: ``module:function`` or ``path/to/file.py:function``, both ways.

A run stores the reference, not the code, so any worker can execute it: the worker
imports the module (or loads the file) and looks the function up. A file is loaded once
per process under a private module name derived from its absolute path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Final, cast

from ironflow import errors
from ironflow.engine.context import Workflow

__all__ = ["load_workflow", "workflow_ref"]

_FILE_MODULE_PREFIX: Final = "ironflow_workflow_"


def _file_module_name(path: Path) -> str:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return f"{_FILE_MODULE_PREFIX}{digest}"


def workflow_ref(workflow: Workflow) -> str:
    """The reference a worker can load ``workflow`` from."""
    module_name = getattr(workflow, "__module__", None)
    qualname = getattr(workflow, "__qualname__", None)
    if not module_name or not qualname:
        raise errors.ConfigError(f"{workflow!r} is not a workflow: use an `async def workflow(ctx, input)`")
    if "<locals>" in qualname:
        # Nested functions cannot be looked up again; fine for sub-workflows (run inline), not for runs.
        return f"{module_name}:{qualname}"
    module = sys.modules.get(module_name)
    if module_name.startswith(_FILE_MODULE_PREFIX) and module is not None and module.__file__:
        return f"{module.__file__}:{qualname}"
    if module_name == "__main__" and module is not None and getattr(module, "__file__", None):
        return f"{Path(cast(str, module.__file__)).resolve()}:{qualname}"
    return f"{module_name}:{qualname}"


def _load_file(path: Path) -> Any:
    name = _file_module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise errors.ConfigError(f"cannot load workflow file {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_workflow(ref: str) -> Workflow:
    """The workflow function named by ``ref``.

    Raises:
        ConfigError: the file, module or function is missing, or is not an async function.
    """
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise errors.ConfigError(
            f"workflow reference {ref!r} must look like FILE.py:function or package.module:function"
        )
    if target.endswith(".py") or "/" in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise errors.ConfigError(f"workflow file {target!r} does not exist")
        module = _load_file(path)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise errors.ConfigError(f"workflow module {target!r} cannot be imported: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if part == "<locals>" or not hasattr(obj, part):
            raise errors.ConfigError(f"workflow {attr!r} not found in {target!r}")
        obj = getattr(obj, part)
    if not inspect.iscoroutinefunction(obj):
        raise errors.ConfigError(f"{ref!r} is not an async function; a workflow is `async def name(ctx, input)`")
    return cast(Workflow, obj)
