"""The stores that ship with statemachine_wf, and ``open_store(url)`` to pick one.

``sqlite:///path.db`` (the default: ``sqlite:///statemachine_wf.db``) or
``postgresql://user@host:port/db``. The PostgreSQL store needs the ``[postgres]`` extra
and is imported only when asked for.
"""

from __future__ import annotations

from typing import Any

from ..core.store import Store
from ..definition.config import DEFAULT_URL, Config
from ..definition.redact import install_log_redaction, redact_text, redact_url

__all__ = ["DEFAULT_URL", "open_store"]

# psycopg's pool logs every failed connection attempt with psycopg's text, which quotes a
# malformed URI whole (password included); PostgresStore imports this package first.
install_log_redaction("psycopg.pool")


def open_store(url: str | None = None, *, schema: str | None = None, **options: Any) -> Store:
    """Open the store named by ``url``, configured as the CLI is.

    Args:
        url: ``sqlite:///path.db`` or ``postgresql://user@host:port/db``; default
            ``SWF_DATABASE_URL``, else ``sqlite:///statemachine_wf.db``.
        schema: the PostgreSQL schema of the tables; default ``SWF_PG_SCHEMA``, else
            ``public`` (read through :class:`~statemachine_wf.definition.config.Config`, as
            ``statemachine-wf --schema`` is, so a producer and a CLI worker started with
            the same environment use the same tables). An explicit value wins. Only for
            PostgreSQL.
        options: passed to the store (``PostgresStore(pool_size=4, listen=True)``).

    Raises:
        ValueError: an unsupported or malformed URL, or ``schema`` given for SQLite. The
            message shows the URL as ``scheme://host:port`` only (see
            :func:`statemachine_wf.definition.redact.redact_url`): a mistyped URL never echoes its
            password.
    """
    url = url or Config.from_env().database_url
    if url.startswith("sqlite:///"):
        if schema is not None:
            raise ValueError(f"schema={schema!r} applies to PostgreSQL only, not to {url!r}")
        from .sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:///") or ":memory:", **options)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        _check_postgres_url(url)
        return PostgresStore(url, schema=schema or Config.schema_from_env(), **options)
    raise ValueError(
        f"unsupported store URL {redact_url(url)!r}: use sqlite:///path.db or postgresql://..."
    )


def _check_postgres_url(url: str) -> None:
    """Refuse a malformed PostgreSQL URL before psycopg echoes it (password included)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        message = redact_text(str(exc).strip(), url)
        raise ValueError(f"malformed store URL {redact_url(url)!r}: {message}") from None
