"""Configuration as a frozen value, read from arguments or from ``SWF_*`` variables.

:class:`Config` is the only reader of ``SWF_*`` settings in the SDK: the CLI, ``open_store``
and the payload limit all take them from here, so a producer and a worker configured by
the same environment see the same store (adapters read only their own secrets, such as
a signer's key, from variables their caller names).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_URL = "sqlite:///statemachine_wf.db"
DEFAULT_SCHEMA = "public"
# Connections a PostgreSQL store's pool opens at most, per process. Few on purpose: a
# worker thread holds one only for a store call, and the runner's threads share their
# statements (group commit), so a runner of 8 threads keeps 2 busy (its share, below).
# More connections than that made more backends than the server has cores: 4 runner
# processes of 8 threads on 2 cores went from 0.52 of raw SQL's step rate with 12
# connections each to 0.71 with 3 (bench/README.md, "Session 38"; docs/architecture.md,
# "Connections").
DEFAULT_POOL_SIZE = 4
DEFAULT_RUNNER_CONNECTIONS = 2
"""Of those, the most a runner's worker threads hold at once (PostgreSQL): the others serve
the process's starts, signals and reads. A runner of 8 threads starting its own workflows
ran 20% faster in 4 processes on 2 cores, at 18% less CPU a step, with 2 than with all 4
(bench/README.md, "Session 61")."""
DEFAULT_DAG_STICKY = 1.0
"""Seconds a DAG node task a runner's commit dispatches is left to that runner before other
runners take it (PostgreSQL; 0: at once): four processes ran a fan-out 1.5 times as fast
with 1 s, and 50 ms did nothing (bench/README.md, "Session 51")."""
DEFAULT_MAX_DAG_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_DAG_NODES = 10_000
DEFAULT_DASHBOARD_SESSION_MAX_AGE = 12 * 3600.0


@dataclass(frozen=True, slots=True)
class Config:
    """Where the store is and how a runner behaves.

    Attributes:
        database_url: ``sqlite:///path.db`` (default ``sqlite:///statemachine_wf.db``) or
            ``postgresql://user@host:port/db``. Env: ``SWF_DATABASE_URL``.
        schema: PostgreSQL schema for the tables (default ``public``). Env: ``SWF_PG_SCHEMA``.
        modules: modules whose ``Workflow`` subclasses a runner hosts. Env: ``SWF_MODULES``
            (comma-separated).
        concurrency: instances one runner drives at once. Env: ``SWF_CONCURRENCY``.
        lease: seconds a claim lasts without a heartbeat. Env: ``SWF_LEASE``.
        prefixes: type prefixes a runner takes (empty: all hosted). Env: ``SWF_PREFIXES``.
        worker_id: a stable runner id (default: host:pid:random). Env: ``SWF_WORKER_ID``.
        deps: ``MODULE:FUNCTION`` returning the dependencies a CLI worker gives its
            workflows. Env: ``SWF_DEPS``.
        dag_registry: ``MODULE:ATTR`` naming the ``dag.Registry`` a CLI worker runs DAG
            instances with. Env: ``SWF_DAG_REGISTRY``.
        max_payload_bytes: the input and signal payload limit (None: 256 KiB, or for the
            SQL producer paths the value stored by ``migrate``). Env: ``SWF_MAX_PAYLOAD_BYTES``.
        pool_size: most PostgreSQL connections the store's calls hold at once, a DAG
            node's commit apart. Env: ``SWF_PG_POOL_SIZE``.
        runner_connections: most of those a runner's worker threads hold at once (the
            others serve the process's starts, signals and reads). Env:
            ``SWF_PG_RUNNER_CONNECTIONS``.
        dag_connections: how many more connections DAG node commits may open (0: they
            share the ``pool_size`` ones). Env: ``SWF_PG_DAG_CONNECTIONS``.
        dag_sticky: seconds a DAG node task a runner's commit dispatches is left to that
            runner before other runners' claims take it (0: at once). Env:
            ``SWF_PG_DAG_STICKY``.
        pool_timeout: seconds a PostgreSQL call waits for a connection before it raises
            ``StoreUnavailable`` (runners then try again, for as long as it takes). Env:
            ``SWF_PG_POOL_TIMEOUT``.
        reconnect_interval: seconds between connection attempts while PostgreSQL is away
            (no back-off): work resumes about this long after it is back. Env:
            ``SWF_PG_RECONNECT_INTERVAL``.
        max_dag_bytes: the largest DAG definition (its JSON, in bytes) that can be loaded,
            saved or started (default 2 MiB). Env: ``SWF_MAX_DAG_BYTES``.
        max_dag_nodes: the most nodes a DAG definition may have (default 10,000). Env:
            ``SWF_MAX_DAG_NODES``.
        operator_token: the secret that lets ``statemachine-wf dashboard`` change
            instances (None: the dashboard is read-only). Env: ``SWF_OPERATOR_TOKEN``.
        dashboard_session_max_age: seconds an operator's sign-in to the dashboard lasts
            (default 12 hours). Env: ``SWF_DASHBOARD_SESSION_MAX_AGE``.
    """

    database_url: str = field(default=DEFAULT_URL, repr=False)  # may hold a password
    schema: str = DEFAULT_SCHEMA
    modules: tuple[str, ...] = ()
    concurrency: int = 8
    lease: float = 30.0
    prefixes: tuple[str, ...] = field(default=())
    worker_id: str | None = None
    deps: str | None = None
    dag_registry: str | None = None
    max_payload_bytes: int | None = None
    pool_size: int = DEFAULT_POOL_SIZE
    runner_connections: int = DEFAULT_RUNNER_CONNECTIONS
    dag_connections: int = 0
    dag_sticky: float = DEFAULT_DAG_STICKY
    pool_timeout: float = 30.0
    reconnect_interval: float = 0.5
    max_dag_bytes: int = DEFAULT_MAX_DAG_BYTES
    max_dag_nodes: int = DEFAULT_MAX_DAG_NODES
    operator_token: str | None = field(default=None, repr=False)  # a secret
    dashboard_session_max_age: float = DEFAULT_DASHBOARD_SESSION_MAX_AGE

    def __post_init__(self) -> None:
        # Checked when the value is built, so a bad SWF_* variable stops the CLI at start
        # (exit 2, naming the setting) instead of surfacing later inside a runner.
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.lease <= 0:
            raise ValueError(f"lease must be > 0 seconds, got {self.lease}")
        if self.pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {self.pool_size}")
        if self.runner_connections < 1:
            raise ValueError(f"runner_connections must be >= 1, got {self.runner_connections}")
        if self.dag_connections < 0:
            raise ValueError(f"dag_connections must be >= 0, got {self.dag_connections}")
        if not (math.isfinite(self.dag_sticky) and self.dag_sticky >= 0):
            raise ValueError(f"dag_sticky must be >= 0 seconds, got {self.dag_sticky}")
        if not self.pool_timeout > 0:
            raise ValueError(f"pool_timeout must be > 0 seconds, got {self.pool_timeout}")
        if not self.reconnect_interval > 0:
            raise ValueError(
                f"reconnect_interval must be > 0 seconds, got {self.reconnect_interval}"
            )
        # The size limits follow one rule, also when read from their variables.
        if self.max_payload_bytes is not None:
            _check_limit("max_payload_bytes", self.max_payload_bytes)
        _check_limit("max_dag_bytes", self.max_dag_bytes)
        _check_limit("max_dag_nodes", self.max_dag_nodes)
        if not (
            math.isfinite(self.dashboard_session_max_age) and self.dashboard_session_max_age > 0
        ):
            raise ValueError(
                "dashboard_session_max_age must be > 0 seconds, "
                f"got {self.dashboard_session_max_age}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        """Read ``SWF_*`` variables; unset ones keep their defaults."""
        env = os.environ if env is None else env

        def listed(name: str) -> tuple[str, ...]:
            return tuple(p.strip() for p in env.get(name, "").split(",") if p.strip())

        # ``or`` rather than a get() default: a variable set empty (``SWF_DEPS=`` in an env
        # file) means unset, not an empty URL, module spec or worker id.
        try:
            return cls(
                database_url=env.get("SWF_DATABASE_URL") or DEFAULT_URL,
                schema=cls.schema_from_env(env),
                modules=listed("SWF_MODULES"),
                concurrency=int(env.get("SWF_CONCURRENCY", "8")),
                lease=float(env.get("SWF_LEASE", "30")),
                prefixes=listed("SWF_PREFIXES"),
                worker_id=env.get("SWF_WORKER_ID") or None,
                deps=env.get("SWF_DEPS") or None,
                dag_registry=env.get("SWF_DAG_REGISTRY") or None,
                max_payload_bytes=cls.payload_limit_from_env(env),
                pool_size=int(env.get("SWF_PG_POOL_SIZE", str(DEFAULT_POOL_SIZE))),
                runner_connections=int(
                    env.get("SWF_PG_RUNNER_CONNECTIONS") or DEFAULT_RUNNER_CONNECTIONS
                ),
                dag_connections=int(env.get("SWF_PG_DAG_CONNECTIONS") or "0"),
                dag_sticky=float(env.get("SWF_PG_DAG_STICKY") or DEFAULT_DAG_STICKY),
                pool_timeout=float(env.get("SWF_PG_POOL_TIMEOUT", "30")),
                reconnect_interval=float(env.get("SWF_PG_RECONNECT_INTERVAL", "0.5")),
                max_dag_bytes=cls.dag_limit_from_env("SWF_MAX_DAG_BYTES", env),
                max_dag_nodes=cls.dag_limit_from_env("SWF_MAX_DAG_NODES", env),
                operator_token=env.get("SWF_OPERATOR_TOKEN") or None,
                dashboard_session_max_age=float(
                    env.get("SWF_DASHBOARD_SESSION_MAX_AGE") or DEFAULT_DASHBOARD_SESSION_MAX_AGE
                ),
            )
        except ValueError as exc:
            raise ValueError(f"bad SWF_* setting: {exc}") from exc

    @staticmethod
    def schema_from_env(env: Mapping[str, str] | None = None) -> str:
        """``SWF_PG_SCHEMA``, else ``public`` (what ``open_store`` uses without ``schema=``)."""
        env = os.environ if env is None else env
        return env.get("SWF_PG_SCHEMA") or DEFAULT_SCHEMA

    @staticmethod
    def payload_limit_from_env(env: Mapping[str, str] | None = None) -> int | None:
        """``SWF_MAX_PAYLOAD_BYTES`` if set (validated), else None."""
        return _limit_from_env(os.environ if env is None else env, "max_payload_bytes")

    @staticmethod
    def dag_limit_from_env(name: str, env: Mapping[str, str] | None = None) -> int:
        """``SWF_MAX_DAG_BYTES`` or ``SWF_MAX_DAG_NODES`` (validated), else its default."""
        field, default = {
            "SWF_MAX_DAG_BYTES": ("max_dag_bytes", DEFAULT_MAX_DAG_BYTES),
            "SWF_MAX_DAG_NODES": ("max_dag_nodes", DEFAULT_MAX_DAG_NODES),
        }[name]
        limit = _limit_from_env(os.environ if env is None else env, field)
        return default if limit is None else limit

    def store_options(self) -> dict[str, Any]:
        """The keyword arguments of ``open_store(self.database_url, ...)``."""
        # SQLite has no pool and no schema: open_store takes these for PostgreSQL only.
        if not self.database_url.startswith("postgres"):
            return {}
        return {
            "schema": self.schema,
            "pool_size": self.pool_size,
            "runner_connections": self.runner_connections,
            "dag_connections": self.dag_connections,
            "dag_sticky": self.dag_sticky,
            "pool_timeout": self.pool_timeout,
            "reconnect_interval": self.reconnect_interval,
        }


# The size limits: each field's variable and floor. One rule for a value given to Config
# and for one read from the variable, with one message naming both.
_LIMITS = {
    "max_payload_bytes": ("SWF_MAX_PAYLOAD_BYTES", 1),
    "max_dag_bytes": ("SWF_MAX_DAG_BYTES", 1),
    # The smallest runnable DAG has a start node and an end node.
    "max_dag_nodes": ("SWF_MAX_DAG_NODES", 2),
}


def _check_limit(field: str, value: object) -> int:
    """``value`` if it is a whole number from the field's floor to 10**18 - 1."""
    variable, low = _LIMITS[field]
    # At most 18 digits: the wf_settings row that migrate copies the payload limit into
    # is checked against ^[1-9][0-9]{0,17}$ and read as a bigint by the SQL contract.
    # bool is an int subclass: True would pass as 1 without the first test.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 10**18:
        raise ValueError(
            f"{field} / {variable} must be an integer from {low} to 10**18 - 1, got {value!r}"
        )
    return value


def _limit_from_env(env: Mapping[str, str], field: str) -> int | None:
    """The limit in the field's variable (checked by :func:`_check_limit`), None if unset."""
    raw = env.get(_LIMITS[field][0])
    if not raw:
        return None
    try:
        value: object = int(raw)
    except ValueError:
        value = raw  # not a number: refused below, quoting the text
    return _check_limit(field, value)
