-- The partial indexes' predicates as comparisons, not IN lists. SQLite tests a partial
-- index's WHERE for every row a statement inserts, deletes or moves in or out of it, and
-- an IN list of more than two constants is tested by building a temporary b-tree of the
-- list (OpenEphemeral: a page allocated and zeroed, a b-tree opened and closed) each
-- time: every event appended (wf_events_once), and every write of an instance's status
-- (wf_instances_active and wf_instances_finished, old row and new). That was about half
-- of the temporary b-trees a three-step workflow built on SQLite and a tenth of the
-- instructions of its steps (bench/README.md, "Session 55"). The same rows are indexed;
-- the statements that read through these indexes spell the predicate the same way
-- (queries.sql), since SQLite uses a partial index only for a WHERE that contains its
-- predicate. PostgreSQL tests an IN list without a table and keeps its indexes.
DROP INDEX wf_instances_active;
CREATE INDEX wf_instances_active ON wf_instances (status, type)
    WHERE status = 'PENDING' OR status = 'RUNNING' OR status = 'STALLED';

DROP INDEX wf_instances_finished;
CREATE INDEX wf_instances_finished ON wf_instances (created_at)
    WHERE status = 'COMPLETED' OR status = 'FAILED' OR status = 'CANCELLED';

DROP INDEX wf_events_once;
CREATE UNIQUE INDEX wf_events_once ON wf_events (instance_id, node, event_type, attempt)
    WHERE node IS NOT NULL
      AND (event_type = 'STEP_STARTED' OR event_type = 'STEP_COMPLETED'
           OR event_type = 'STEP_FAILED' OR event_type = 'NODE_STARTED'
           OR event_type = 'NODE_COMPLETED' OR event_type = 'NODE_FAILED'
           OR event_type = 'NODE_DISPATCHED');
