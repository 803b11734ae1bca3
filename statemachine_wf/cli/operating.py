"""The commands that operate the runtime rather than one instance: ``migrate`` (the
schema, and the hosted types declared for SQL producers) and ``worker`` (a
:class:`~statemachine_wf.runtime.runner.Runner` over the hosted workflows and DAG registry)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import Any

from ..core.store import Store
from ..definition.workflow import Workflow
from ..runtime.observe import JsonFormatter, Observer
from ..runtime.runner import Runner, RunnerOptions
from .loading import _dag_registry, _dependencies
from .output import progress


def configure_logging(level: int, log_format: str) -> None:
    """The root logger's level and format (``--log-format``: text or json)."""
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level, handlers=[handler])
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def migrate(store: Store, workflows: list[type[Workflow[Any, Any]]]) -> None:
    # A bar over the pending migrations on a terminal (on a large store one can take a
    # while: an index over every row), nothing otherwise.
    with progress("migrating the schema", total=0) as advance:
        version = store.migrate(on_migration=lambda done, pending: advance(min(done, 1), pending))
    print(f"schema at version {version}")
    if workflows:  # declare them for SQL producers before any runner starts
        store.register_types([w.spec().workflow_type for w in workflows], by="migrate")


def worker(
    store: Store, workflows: list[type[Workflow[Any, Any]]], args: argparse.Namespace
) -> None:
    dags = _dag_registry(args.dag_registry)
    if not workflows and dags is None:
        raise ValueError(
            "nothing to run: name workflow modules with -m (SWF_MODULES) "
            "or a DAG registry with --dag-registry (SWF_DAG_REGISTRY)"
        )
    if args.dag_types and dags is None:
        raise ValueError("--dag-type needs --dag-registry")
    options = RunnerOptions(
        concurrency=args.concurrency,
        lease=args.lease,
        prefixes=tuple(args.prefixes),
        worker_id=args.worker_id,
    )
    # Only replaced when given: RunnerOptions keeps its own default DAG task types.
    if args.dag_types:
        options = dataclasses.replace(options, dag_types=tuple(args.dag_types))
    observer = None
    if getattr(args, "metrics_port", None) is not None:
        from .metrics import serve_metrics

        observer = Observer(serve_metrics(store, args.metrics_host, args.metrics_port))
    runner = Runner(
        store,
        workflows,
        dependencies=_dependencies(args.deps),
        options=options,
        dags=dags,
        observer=observer,
    )
    # --until-idle is for scripts and tests: bounded, so work that never stops being due
    # ends the command (TimeoutError after an hour) instead of holding it open for ever.
    if args.until_idle:
        runner.run_until_idle(timeout=3600)
    else:
        runner.run()
