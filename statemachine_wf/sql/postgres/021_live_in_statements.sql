-- Live updates sent by the statements that grow a log, not by a trigger on wf_events.
--
-- What it cost: migration 008's statement-level trigger ran on every statement that
-- inserted events, watched or not: a transition table of the new rows, a plpgsql call
-- and its query of wf_live_watches. Measured on one backend, an event-appending
-- statement took 20-40 us more server CPU with it than without (bench/README.md,
-- "Session 29"). Nobody watches most instances, and every step paid it.
--
-- Now each of the store's statements that appends events sends the notification itself,
-- on the same channel with the same payload, '<instance id> <highest seq>' (queries.sql,
-- append_events' `live`; also claim, dag_claim, dag_record, dag_tail, heartbeat_logged,
-- quarantine, soft_delete). Whether anybody watches is a flag on the instance's row,
-- `watched`, which a registration sets (live_watch) and the last watcher's leaving
-- clears (live_unflag); a statement that updates the row reads it from the row it
-- updates, the latest one, so the flag and the statement are ordered by the row's lock
-- and no such commit after a registration goes unannounced (the two that only append to
-- a row, a logged heartbeat and a DAG node's claim, read it from their snapshot; a
-- watcher's re-read covers the moment between). Creating an instance needs no
-- notification: nobody can watch an instance before it exists (live_watch finds no
-- row). A writer other than the store (a hand-written INSERT into wf_events) sends
-- nothing; a watcher sees its events at its next re-read (live.py: `resync`).
ALTER TABLE wf_instances ADD COLUMN watched boolean NOT NULL DEFAULT false;
UPDATE wf_instances i SET watched = true
WHERE EXISTS (SELECT 1 FROM wf_live_watches w WHERE w.instance_id = i.id);
DROP TRIGGER wf_events_live ON wf_events;
DROP FUNCTION wf_events_live();
