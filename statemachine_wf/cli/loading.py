"""What a command loads before it runs: the workflow modules (``-m``), the worker's
dependencies (``--deps``) and DAG registry (``--dag-registry``), and the store (``--db``).

Every name is resolved from the current directory first (:func:`_cwd_on_path`), and a
name that does not resolve is a ``ValueError`` saying what was looked for and where.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.store import Store
from ..definition.config import Config
from ..definition.workflow import Workflow
from ..stores import open_store

if TYPE_CHECKING:
    from ..runtime.dag_handlers import Registry


def load_workflows(modules: Sequence[str]) -> list[type[Workflow[Any, Any]]]:
    """Every concrete ``Workflow`` subclass defined in these modules.

    A module that is a package is searched with all its modules (imported, except
    ``__main__``). A module in which nothing is found is an error that says where it
    looked, so a typo never starts a worker that runs nothing.
    """
    found: dict[str, type[Workflow[Any, Any]]] = {}
    for name in modules:
        module = _import(name, "-m")
        searched = [module]
        if hasattr(module, "__path__"):  # a package: search its modules too
            for info in pkgutil.walk_packages(module.__path__, prefix=f"{name}."):
                # A package's __main__ runs its program when imported: never import it.
                if info.name.rsplit(".", 1)[-1] != "__main__":
                    searched.append(importlib.import_module(info.name))
        # Only classes defined in the module itself (a class imported into several named
        # modules is hosted once, from its own) and with a spec of their own: an abstract
        # base (or one marked __abstract__) has none, and inherits its parent's otherwise.
        here = {
            obj.spec().workflow_type: obj
            for m in searched
            for _, obj in inspect.getmembers(m, inspect.isclass)
            if issubclass(obj, Workflow)
            and obj.__module__ == m.__name__
            and "__swf_spec__" in obj.__dict__
        }
        if not here:
            where = ", ".join(m.__name__ for m in searched)
            raise ValueError(
                f"-m {name}: no Workflow subclass is defined in {where} "
                f"({getattr(module, '__file__', None) or name}); name the module that "
                "defines your workflows (-m package.module)"
            )
        found.update(here)
    return list(found.values())


def _import(name: str, flag: str) -> Any:
    """Import ``name`` for ``flag``; a module that does not exist is a clear error."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(f"{exc.name}.")):
            raise  # the module exists; something it imports does not: show the traceback
        raise ValueError(
            f"{flag} {name}: no module named {exc.name!r} (looked in the current directory "
            f"{os.getcwd()} and on sys.path)"
        ) from exc


def _cwd_on_path() -> None:
    """Resolve ``-m`` and ``--deps`` from the current directory first, as ``python -m``,
    uvicorn and celery do (an installed console script starts with its bin directory
    first on ``sys.path`` instead)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _open(args: argparse.Namespace) -> Store:
    # --schema defaults to None, not SWF_PG_SCHEMA: open_store then reads the env itself,
    # and refuses a schema given for SQLite only when one was really given.
    if not args.db.startswith("postgres"):
        return open_store(args.db, schema=args.schema)
    # The pool settings come from SWF_PG_* like everything else; --schema wins over the env.
    options = Config.from_env().store_options()
    options.pop("schema", None)
    return open_store(args.db, schema=args.schema, **options)


def _dependencies(spec: str | None) -> dict[str, Any]:
    if not spec:
        return {}
    module_name, _, func_name = spec.partition(":")
    if not func_name:
        raise ValueError(f"--deps must be MODULE:FUNCTION, got {spec!r}")
    factory = getattr(_import(module_name, "--deps"), func_name, None)
    if not callable(factory):
        raise ValueError(f"--deps: module {module_name} has no function {func_name!r}")
    deps = factory()
    if not isinstance(deps, dict):
        raise ValueError(f"{spec} returned {type(deps).__name__}, not a dict")
    return deps


def _dag_registry(spec: str | None) -> Registry | None:
    """The ``dag.Registry`` instance named ``MODULE:ATTR``."""
    if not spec:
        return None
    from ..runtime.dag_handlers import Registry  # only a DAG worker needs the DAG package

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--dag-registry must be MODULE:ATTR, got {spec!r}")
    found = getattr(_import(module_name, "--dag-registry"), attr, None)
    if found is None:
        raise ValueError(f"--dag-registry: module {module_name} has no attribute {attr!r}")
    # Checked here, so a wrong attribute is an error naming the flag, not one from the Runner.
    if not isinstance(found, Registry):
        raise ValueError(f"--dag-registry: {spec} is a {type(found).__name__}, not a Registry")
    return found
