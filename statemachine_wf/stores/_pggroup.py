"""PostgreSQL group commit: decisions that a runner's threads commit at the same moment,
sent as one statement (docs/architecture.md, "Group commit on PostgreSQL").

Three kinds are grouped, each by its own :class:`~._group.Group`: a step that moves on
or saves its progress (a plain Continue or KeepTask: :data:`CONTINUES`), an instance's
end with the claim of its worker's next task (a plain Finish, one claim a finish:
:data:`FINISHES` and the claim), and a plain DAG node commit (no vouched head, dead
letter, retry, sibling or same-instance group: :data:`DAG_COMMITS`; a chain's node and
the node it hands to its worker). Every other decision goes alone, as before. Each
decision keeps its own CAS and its own outcome; a statement that fails having written
nothing (a duplicate event, a value the server refuses, a dispatched node whose task is
still open) is followed by each decision alone, so that only the one at fault fails.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from ..core.decide import Continue, Decision, Finish, KeepTask
from ..core.store import Commit, DagCommit
from ..definition.limits import MAX_STORED_DEPTH, checked_dumps
from ..errors import ConcurrencyConflict, DataRejected, StoreError, StoreUnavailable
from ._base import Row
from ._common import dumps, event_dicts, projection_params
from ._group import Group
from ._pgconn import PgConnections, _joined, _then_claim, execute

log = logging.getLogger("statemachine_wf.postgres")

R = TypeVar("R")

GROUP_MOST = 32
"""The most decisions one statement carries."""

CONTINUES = ("group_head", "group_events", "group_live", "group_continue")
"""The named pieces of the statement of several Continues."""
FINISHES = ("group_head", "group_events", "group_live", "apply_finish")
"""Of several finishes, whose tail is a lone finish's (it reads ``inst`` as a set); the
claim's CTEs follow them (``_pgconn._then_claim``)."""

DAG_COMMITS = ("dag_group_head", "group_events", "group_live", "dag_group_tail")
"""Of several plain DAG node commits, each on its own instance (queries.sql)."""

Finished = tuple[int, list[tuple[Row, Any, Any]] | None]
"""A finish's outcome: its new version, and its claim's rows (None: the statement made a
task due and claimed nothing, so the worker claims on its own)."""


@dataclass(frozen=True, slots=True)
class _ClaimFor:
    """Whose claim a finish makes: the same for every finish of one statement."""

    types: tuple[str, ...]
    worker: str
    lease: float
    incarnation: str


@dataclass(frozen=True, slots=True)
class _Item:
    commit: Commit
    text: str
    """The decision as one element of the statement's batch (see :func:`_batch_item`)."""
    alone: Callable[[], Any]
    """Sends the decision alone, as it was sent before there were groups."""
    claim: _ClaimFor | None = None


@dataclass(frozen=True, slots=True)
class _DagItem:
    commit: DagCommit
    text: str
    """The commit as one element of ``dag_group_head``'s batch (:func:`_dag_batch_item`)."""
    alone: Callable[[], Row]
    """Sends the commit alone (``DagCommits._dag_apply``)."""


class PgGrouped(PgConnections):
    """:class:`PgConnections` whose plain Continues, Finishes and DAG node commits go in
    shared statements."""

    def __init__(self, url: str, *, group_min: int = 2, **options: Any) -> None:
        """Open the pool (see :class:`~._pgconn.PgConnections` for ``url`` and ``options``).

        Args:
            group_min: the fewest decisions of this process's threads that share one
                statement; fewer go alone. 2 by default: a decision that finds none queued
                beside it is sent at once, alone, as it always was. 1 sends even a lone
                one through the shared statement (the contract suite runs a store so);
                0 never groups.
        """
        if group_min < 0:
            raise ValueError(f"group_min must be >= 0, got {group_min}")
        super().__init__(url, **options)
        self._group_min = group_min
        self._continues: Group[_Item, int] | None = None
        self._finishes: Group[_Item, Finished] | None = None
        self._dag_commits: Group[_DagItem, Row] | None = None
        if group_min:
            self._continues = Group(self._send_continues, most=GROUP_MOST, interrupted=_unknown)
            self._finishes = Group(self._send_finishes, most=GROUP_MOST, interrupted=_unknown)
            self._dag_commits = Group(self._send_dag_commits, most=GROUP_MOST, interrupted=_unknown)

    # -- the decisions that are grouped ---------------------------------------------------
    def apply(self, commit: Commit) -> int:
        # A step that moves on, or a progress save mid-step (the identity a side effect
        # is written under, saved before it): the two commits a step makes most.
        if self._continues is None or not _groupable(commit.decision, (Continue, KeepTask)):
            return super().apply(commit)
        return self._continues.submit(commit.instance_id, self._continue_item(commit))

    def _finish_claiming(
        self, commit: Commit, types: Sequence[str], lease: float, incarnation: str
    ) -> Finished:
        if self._finishes is None or not _groupable(commit.decision, Finish):
            return super()._finish_claiming(commit, types, lease, incarnation)
        item = self._finish_item(commit, types, lease, incarnation)
        return self._finishes.submit(commit.instance_id, item)

    def _dag_apply(self, commit: DagCommit, params: dict[str, Any]) -> Row:
        # A plain node commit (a chain's, with the node it hands to its worker): the
        # commits of this runner's workers on other instances at the same moment share
        # its statement. Its values were encoded and checked into ``params`` already. The
        # statement tells the other runners itself (dag_group_tail's `notified`), so the
        # lone commit's local wake-up (``_made_due``, SQLite's) has no part here.
        if self._dag_commits is None or not _dag_groupable(commit, params):
            return super()._dag_apply(commit, params)
        alone = partial(super()._dag_apply, commit, params)
        item = _DagItem(commit, _dag_batch_item(commit, params), alone)
        return self._dag_commits.submit(commit.instance_id, item)

    # Each item is encoded on its decision's own thread: a value no store keeps is that
    # decision's DataRejected, raised there, never its batch's.
    def _continue_item(self, commit: Commit) -> _Item:
        alone = partial(super().apply, commit)
        return _Item(commit, _batch_item(commit), alone)

    def _finish_item(
        self, commit: Commit, types: Sequence[str], lease: float, incarnation: str
    ) -> _Item:
        claim = _ClaimFor(tuple(types), str(commit.worker), lease, incarnation)
        alone = partial(super()._finish_claiming, commit, types, lease, incarnation)
        return _Item(commit, _batch_item(commit), alone, claim)

    # -- the groups' sends ----------------------------------------------------------------
    def _send_continues(self, items: Sequence[_Item]) -> list[int | BaseException]:
        def versions(rows: list[Row]) -> list[int | BaseException]:
            new = {str(row["id"]): int(row["version"]) for row in rows}
            return [
                new[i.commit.instance_id]
                if i.commit.instance_id in new
                # its CAS: the version moved since the decision, and nothing of it is written
                else self._cas_lost(i.commit)
                for i in items
            ]

        return self._send(items, _joined(CONTINUES), {}, versions)

    def _send_finishes(self, items: Sequence[_Item]) -> list[Finished | BaseException]:
        # One claim's parameters a statement: the finishes of one runner share them (its
        # worker id, types, lease, incarnation), so there is one statement a runner.
        by_claim: dict[_ClaimFor, list[int]] = {}
        for n, item in enumerate(items):
            by_claim.setdefault(_claim_of(item), []).append(n)
        out: list[Finished | BaseException | None] = [None] * len(items)
        for claim, where in by_claim.items():
            part = [items[n] for n in where]
            for n, outcome in zip(where, self._send_claiming(part, claim), strict=True):
                out[n] = outcome
        return [o for o in out if o is not None]

    def _send_claiming(
        self, items: Sequence[_Item], claim: _ClaimFor
    ) -> list[Finished | BaseException]:
        def finished(rows: list[Row]) -> list[Finished | BaseException]:
            done = {str(r["done_id"]): r for r in rows if r["done_id"] is not None}
            # At most one claim a finish whose CAS held: the claim's LIMIT is their count.
            claimed = self._claimed_rows(None, rows)
            out: list[Finished | BaseException] = []
            for item in items:
                row = done.get(item.commit.instance_id)
                if row is None:  # its CAS: nothing of it written, nothing claimed for it
                    out.append(self._cas_lost(item.commit))
                elif row["made_due"]:  # a finish made a task due: each worker claims
                    out.append((int(row["done_version"]), None))
                else:
                    out.append((int(row["done_version"]), claimed[:1]))
                    claimed = claimed[1:]
            if claimed:  # never, by the LIMIT: handed back rather than left leased
                log.error("group commit: %d claims with no finish to take them", len(claimed))
                self._release_claims(claim.worker, [row for row, _, _ in claimed])
            return out

        extra = self._claim_params(
            claim.types, claim.worker, claim.lease, len(items), claim.incarnation
        )
        # apply_finish's own parameters: no signal settled by any of them (_groupable),
        # and the dead letters of their unapplied signals written by the claim's worker.
        extra["settled"] = "[]"
        return self._send(items, _then_claim(FINISHES), extra, finished)

    def _send_dag_commits(self, items: Sequence[_DagItem]) -> list[Row | BaseException]:
        def committed(rows: list[Row]) -> list[Row | BaseException]:
            # No row: its CAS (as a lone commit's, which reads nothing back either).
            by_id = {str(row["id"]): row for row in rows}
            return [
                by_id.get(i.commit.instance_id)
                or ConcurrencyConflict(i.commit.instance_id, i.commit.version)
                for i in items
            ]

        extra = {"sticky": self.dag_sticky}
        # On the connections a lone DAG commit takes (dag_connections, when set).
        return self._send(items, _joined(DAG_COMMITS), extra, committed, self._lone_commit)

    def _send(
        self,
        items: Sequence[_Item | _DagItem],
        text: str,
        extra: dict[str, Any],
        outcomes: Callable[[list[Row]], list[R | BaseException]],
        connection: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> list[R | BaseException]:
        """The items as one statement ``text``, its rows read by ``outcomes``; each alone
        below ``group_min``, or when the statement failed having written nothing. On a
        connection of ``connection`` (a store's context manager; the gated
        ``_statement`` by default)."""
        if len(items) < self._group_min:
            return [_alone(item) for item in items]
        params = self._params(
            **extra,
            batch="[" + ",".join(item.text for item in items) + "]",
            ids=[item.commit.instance_id for item in items],
        )
        try:
            with (connection or self._statement)() as conn:
                rows = list(execute(conn, text, params).fetchall())
        except (ConcurrencyConflict, DataRejected):
            # A decision's duplicate event (a lost race) or a value the server refused:
            # the statement wrote nothing. Each alone, so that only that one fails.
            return [_alone(item) for item in items]
        except StoreError as exc:  # the database: every decision's, each its own copy
            return [_copied(exc) for _ in items]
        return outcomes(rows)

    def _cas_lost(self, commit: Commit) -> ConcurrencyConflict:
        """A lost CAS, with the version that won where it can be read (the message's;
        the runner reads the instance again anyway)."""
        try:
            current = self.get(commit.instance_id)
        except StoreError:  # read on another thread's behalf: its outcome, not this error
            current = None
        version = None if current is None else current.version
        return ConcurrencyConflict(commit.instance_id, commit.version, version)

    def _release_claims(self, worker: str, rows: list[Row]) -> None:
        for row in rows:
            self.release(
                worker=worker, instance_ids=[str(row["instance_id"])], token=row["lease_token"]
            )


# The projection's JSON columns, each encoded as apply_head's parameter is.
_JSON_FIELDS = ("attempts", "progress", "error", "waits")


def _groupable(
    decision: Decision, kind: type[Continue | Finish] | tuple[type[Continue | KeepTask], ...]
) -> bool:
    """A plain decision of ``kind``: the group's statements write no signals and no
    dead letter of a decision's own."""
    return isinstance(decision.task, kind) and decision.dead_letter is None and not decision.signals


def _batch_item(commit: Commit) -> str:
    """One element of ``group_head``'s batch: the parameters apply_head, append_events
    and apply_continue take for this decision alone, as a JSON object.

    Encoded once, and checked one level deeper than a value alone, since each stored value
    (``attempts``, ``progress``, ``error``, ``waits``, ``events``) sits one level down in
    it: what ``dumps`` refuses in one of them, this refuses in the item. Then, to raise
    the very error (and path) a decision sent alone raises, the item is made again value
    by value (:func:`_batch_item_by_value`). One encoding instead of five: a fifth less
    time an item (bench/README.md, "Session 56"); and its keys unsorted, since the server
    reads it as jsonb: a third less again ("Session 57")."""
    decision = commit.decision
    item: dict[str, Any] = projection_params(decision.state, _as_is)
    item.update(_scalars(commit), events=event_dicts(decision))
    try:
        return checked_dumps(item, max_depth=MAX_STORED_DEPTH + 1)
    except DataRejected:
        return _batch_item_by_value(commit)


def _as_is(value: Any) -> Any:
    return value


def _scalars(commit: Commit) -> dict[str, Any]:
    task = commit.decision.task
    scalars = {"id": commit.instance_id, "version": commit.version, "worker": commit.worker}
    scalars.update(lease=commit.lease, node=None, attempt=None, failures=None)
    if isinstance(task, Continue):
        scalars.update(node=task.node, attempt=task.attempt, failures=task.failures)
    return scalars


def _batch_item_by_value(commit: Commit) -> str:
    """:func:`_batch_item`, each JSON value encoded and checked by the same ``dumps`` as
    a decision sent alone: raises what that decision would."""
    decision = commit.decision
    params = projection_params(decision.state, dumps)
    scalars = {k: v for k, v in params.items() if k not in _JSON_FIELDS}
    scalars.update(_scalars(commit))
    head = json.dumps(scalars, separators=(",", ":"))
    values = "".join(f',"{k}":{"null" if params[k] is None else params[k]}' for k in _JSON_FIELDS)
    return f'{head[:-1]}{values},"events":{dumps(event_dicts(decision))}}}'


def _dag_groupable(commit: DagCommit, params: dict[str, Any]) -> bool:
    """A DAG commit whose lone statement is dag_head, append_events, dag_tasks,
    dag_takes_none and dag_end: what ``dag_group_head`` and ``dag_group_tail`` write."""
    d = commit.decision
    return (
        not commit.blockers
        and d.dead_letter is None
        and d.retry is None
        and not d.also_done
        and params["sib_token"] is None
    )


def _dag_batch_item(commit: DagCommit, params: dict[str, Any]) -> str:
    """One element of ``dag_group_head``'s batch: the commit's parameters as a JSON object,
    its JSON values the texts ``params`` already holds (encoded and checked once)."""
    scalars = {k: params[k] for k in _DAG_SCALARS}
    head = json.dumps(scalars, separators=(",", ":"))
    values = "".join(f',"{k}":{_json_text(params[k])}' for k in _DAG_JSON)
    return f"{head[:-1]}{values}}}"


_DAG_SCALARS = ("id", "version", "status", "worker", "finish", "done", "token", "lease", "keep")
_DAG_JSON = ("progress", "error", "events", "dispatch")


def _json_text(value: Any) -> str:
    """A jsonb parameter's text (``_pgconn._jsonb``), or null."""
    return "null" if value is None else str(value.dumps(value.obj))


def _claim_of(item: _Item) -> _ClaimFor:
    if item.claim is None:
        raise TypeError("a grouped finish carries the claim it makes")
    return item.claim


def _alone(item: _Item | _DagItem) -> Any:
    """The item sent alone: its outcome, or the exception it raised."""
    try:
        return item.alone()
    except Exception as exc:
        return exc


def _copied(exc: StoreError) -> StoreError:
    """A copy of ``exc`` for one submitter (an exception object is raised by one thread)."""
    copy: StoreError = (
        StoreUnavailable(str(exc), lost=exc.lost)
        if isinstance(exc, StoreUnavailable)
        else StoreError(str(exc))
    )
    copy.__cause__ = exc
    return copy


def _unknown(exc: BaseException) -> StoreError:
    """The outcome of a decision whose statement's sending thread was interrupted."""
    return StoreUnavailable(
        f"postgres: the statement carrying this decision was interrupted: {exc!r}"
    )
