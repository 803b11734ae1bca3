"""The PostgreSQL statements that append events send the live notification themselves
(migration 021 dropped the trigger that did): a statement that inserts into wf_events and
forgets it would leave its watchers waiting for their next re-read.

tests/integration/core/test_live_statements.py checks the notifications on the real
server; this checks, from the text, that no statement is left out.
"""

from __future__ import annotations

import re

from statemachine_wf.stores._pgconn import _joined, _then_claim
from statemachine_wf.stores._pggroup import CONTINUES, FINISHES
from statemachine_wf.stores._sql import queries

# Nobody can watch an instance before it exists (live_watch refuses an unknown id), so a
# create's WORKFLOW_CREATED needs no notification, nor the STEP_STARTED a leased start
# writes in the same commit.
CREATES = {"create", "create_leased", "create_offered", "create_many", "dag_create"}
NOTIFY = "pg_notify(%(live)s"
# The group commit's events piece is never sent alone, nor the DAG commit's sibling take:
# the statements they are part of are checked whole
# (test_the_grouped_statements_notify_once_and_read_it, test_a_dag_commit_reads_its_...).
PIECES = {"group_events", "dag_takes"}


def test_every_statement_that_inserts_events_notifies_the_watchers() -> None:
    q = queries("postgres")
    appending = {name for name, text in q.items() if "INSERT INTO wf_events" in text}
    assert appending >= {"append_events", "claim", "dag_claim", "dag_takes", "soft_delete"}
    for name in sorted(appending - CREATES - PIECES):
        text = q[name]
        assert NOTIFY in text, f"{name}: no live notification"
        # Only for a watched instance: the row's flag, or the registry.
        watched = ".watched" in text or "wf_live_watches" in text
        assert watched, f"{name}: notifies whether watched or not"


def _final_select(text: str) -> str:
    """The statement's last top-level SELECT, to its end."""
    starts = [m.start() for m in re.finditer(r"^SELECT ", text, re.M)]
    assert starts, text
    return text[starts[-1] :]


def test_every_statement_reads_its_notification_so_that_it_runs() -> None:
    # A CTE that nothing reads is never run: each last SELECT reads its notifications.
    q = queries("postgres")
    decision_tails = [n for n in q if n.startswith("apply_") and re.search(r"^SELECT ", q[n], re.M)]
    assert set(decision_tails) >= {"apply_continue", "apply_finish", "apply_keep"}
    for name in decision_tails:  # append_events' `live`
        assert "(SELECT count(*) FROM live)" in _final_select(q[name]), name
    assert "(SELECT count(*) FROM dag_live)" in _final_select(q["dag_end"])
    claim = _final_select(q["claim"])
    assert "(SELECT count(*) FROM live)" in claim  # the finish's, in a finish-and-claim
    assert "(SELECT count(*) FROM started_live)" in claim
    for name in sorted(
        {"dag_claim", "dag_record", "heartbeat_logged", "quarantine", "soft_delete"}
    ):
        assert "(SELECT count(*) FROM live)" in _final_select(q[name]), name


def test_the_finish_and_claim_statement_keeps_both_notifications() -> None:
    fused = _then_claim(("apply_head", "append_events", "apply_finish"))
    assert fused.count(NOTIFY) == 2  # the finished instance's and the claimed one's
    assert "SELECT NULL::void AS sent WHERE false" not in fused  # the claim's placeholder
    assert "(SELECT count(*) FROM live) + (SELECT count(*) FROM started_live)" in fused


def test_the_grouped_statements_notify_once_and_read_it() -> None:
    # Each statement of the group commit that inserts events: one notifying CTE, read.
    text = _joined(CONTINUES)
    assert "INSERT INTO wf_events" in text
    assert text.count(NOTIFY) == 1
    assert ".watched" in text
    assert "(SELECT count(*) FROM live)" in _final_select(text)
    # The finishes and the claim after them: the finishes' and the claimed instances'.
    fused = _then_claim(FINISHES)
    assert fused.count(NOTIFY) == 2
    claim = _final_select(fused)
    assert "(SELECT count(*) FROM live)" in claim
    assert "(SELECT count(*) FROM started_live)" in claim


def test_a_dag_commit_reads_its_notification_with_or_without_the_takes() -> None:
    # The sibling's NODE_STARTED (dag_takes) is in the one notification dag_end sends, and
    # the commit without takes (dag_takes_none) has the same names for dag_end to read.
    for takes in ("dag_takes", "dag_takes_none"):
        text = _joined(("dag_head", "append_events", "dag_tasks", takes, "dag_end"))
        assert "SELECT seq FROM sib_started" in text
        assert "(SELECT count(*) FROM dag_live)" in _final_select(text)
        assert ".watched" in text
        for name in ("retried", "sib_taken", "sib_started"):
            assert f", {name} AS (" in text or f"), {name} AS (" in text, (takes, name)
