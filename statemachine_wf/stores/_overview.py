"""The operator's reads, written once for both stores: the dashboard's and ``top``'s view
of a store (instances paged by a keyset, counts, queue depth, workers, throughput).

:class:`SqlReads` sits between :class:`~._base.SqlBase` and the decisions'
:class:`~._decisions.SqlStore`; each read is one named query of ``sql/<dialect>/queries.sql``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.store import InstanceRecord
from ..definition.events import Status
from ._base import SqlBase
from ._common import instance_record


class SqlReads(SqlBase):
    """The dashboard's reads (``statemachine_wf.dashboard.reads.Overview``)."""

    def page_instances(
        self,
        *,
        status: Sequence[Status] | None = None,
        type_prefix: str | None = None,
        since: float | None = None,
        until: float | None = None,
        ident: str | None = None,
        after: str | None = None,
        limit: int = 50,
        include_deleted: bool = False,
    ) -> list[InstanceRecord]:
        """Instances newest first (ties by id), strictly after the row ``after`` (a keyset
        cursor: the last id of the previous page), one index range however deep the page.

        ``since``/``until`` bound ``created_at`` (epoch seconds, ``until`` excluded);
        ``ident``, an instance id or an idempotency key, finds that instance alone (the
        other filters are not applied). An ``after`` that names no row (purged meanwhile,
        or not an id) gives an empty page.
        """
        if ident is not None:
            # Text that cannot be an id (PostgreSQL: not a uuid) is looked up as a key
            # only: compared with the uuid column it would fail the whole statement.
            may = self._may_exist(ident)
            found = self._read_all(
                "find_instances",
                ident=ident,
                ident_id=ident if may else None,
                deleted=include_deleted,
            )
            return [instance_record(r) for r in found]
        if after is not None and not self._may_exist(after):
            return []
        where = self._instance_filter(status, type_prefix, include_deleted)
        rows = self._read_all(
            "page_instances", **where, since=since, until=until, after=after, limit=limit
        )
        return [instance_record(r) for r in rows]

    def status_counts(self) -> dict[str, int]:
        """Instances per status (soft-deleted ones left out)."""
        return {r["status"]: int(r["n"]) for r in self._read_all("status_counts")}

    def queue_depth(self) -> list[dict[str, Any]]:
        """Per task type and kind: ``ready`` (due), ``leased`` and ``later`` task counts."""
        return [
            {
                "type": r["type"],
                "kind": r["kind"],
                **{k: int(r[k] or 0) for k in ("ready", "leased", "later")},
            }
            for r in self._read_all("queue_depth")
        ]

    def workers(self) -> list[dict[str, Any]]:
        """Workers holding unexpired leases: ``worker``, ``leases``, ``lease_until`` and
        ``heartbeat_at`` (the last heartbeat logged, or None), times in epoch seconds."""
        return [
            {
                "worker": r["worker"],
                "leases": int(r["leases"]),
                "lease_until": float(r["lease_until"]),
                "heartbeat_at": None if r["heartbeat_at"] is None else float(r["heartbeat_at"]),
            }
            for r in self._read_all("workers")
        ]

    def throughput(self, *, since: float, bucket: float) -> list[tuple[float, str, int]]:
        """``(bucket start, "started" or "finished", count)`` for instances created since
        ``since`` (finished ones counted in the bucket of their last update)."""
        rows = self._read_all("throughput", since=since, bucket=bucket)
        return [(float(r["at"]), str(r["what"]), int(r["n"])) for r in rows]

    def dead_letter_counts(self) -> dict[str, int]:
        """``total`` dead letters and those ``waiting`` (not redriven)."""
        row = self._read_one("dead_letter_counts")
        total, waiting = (0, 0) if row is None else (int(row["total"]), int(row["waiting"] or 0))
        return {"total": total, "waiting": waiting}
