"""The store reads the dashboard needs beyond the :class:`~statemachine_wf.Store` port.

Both shipped stores implement them (``stores/_base.py``, with a contract test in
``tests/contract/test_overview.py``); :func:`overview` returns the store typed as
:class:`Overview` when it has them, else None (a store of another make: the dashboard
then pages with ``list_instances`` and leaves the panels it cannot fill empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from statemachine_wf import InstanceRecord, Status, Store


@runtime_checkable
class Overview(Protocol):
    """Reads for operators: a keyset page of instances, and the counts behind the panels."""

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
    ) -> list[InstanceRecord]: ...

    def status_counts(self) -> dict[str, int]: ...

    def queue_depth(self) -> list[dict[str, Any]]: ...

    def workers(self) -> list[dict[str, Any]]: ...

    def throughput(self, *, since: float, bucket: float) -> list[tuple[float, str, int]]: ...

    def dead_letter_counts(self) -> dict[str, int]: ...


def columns(
    rows: Sequence[tuple[float, str, int]], *, since: float, bucket: float, n: int
) -> dict[str, list[int]]:
    """:meth:`Overview.throughput` rows as ``n`` columns of ``bucket`` seconds from
    ``since``: ``{"started": [...], "finished": [...]}`` (the chart's and ``top``'s).

    The store's buckets start at multiples of ``bucket``, so the first begins before
    ``since`` (column -1): it is counted in the first column, not dropped; a row past the
    last column (a clock ahead) in the last. Every row in the window is counted once.
    """
    series: dict[str, list[int]] = {"started": [0] * n, "finished": [0] * n}
    for at, what, count in rows:
        if what in series:
            series[what][min(max(int((at - since) // bucket), 0), n - 1)] += count
    return series


def overview(store: Store) -> Overview | None:
    """``store`` as an :class:`Overview`, or None when it lacks those reads."""
    return store if isinstance(store, Overview) else None
