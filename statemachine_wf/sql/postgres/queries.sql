-- Named queries for the PostgreSQL store. One statement per decision: the CTEs below
-- write the instance (version-checked), the events and the task in one round trip.
-- Parameters are %(name)s; nothing is formatted into SQL.

-- name: create
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority,
                              parent_id)
    VALUES (%(id)s, %(type)s, %(kind)s, 'PENDING', %(step)s, %(input)s, %(key)s,
            %(priority)s, %(parent_id)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, type
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, payload)
    SELECT id, 'WORKFLOW_CREATED', %(created)s FROM ins
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
    SELECT id, '', %(step)s, %(kind)s, type, %(priority)s,
           now() + %(delay)s * interval '1 second'
    FROM ins
)
SELECT id, pg_notify(%(channel)s, type) FROM ins;

-- name: instance_by_key
SELECT id FROM wf_instances WHERE idempotency_key = %(key)s;

-- name: get_instance
SELECT * FROM wf_instances WHERE id = %(id)s;

-- name: get_task
SELECT *, (lease_owner IS NOT NULL AND due_at > now()) AS leased
FROM wf_tasks WHERE instance_id = %(id)s AND slot = %(slot)s;

-- name: events
SELECT * FROM wf_events WHERE instance_id = %(id)s ORDER BY seq;

-- name: apply_head
WITH inst AS (
    UPDATE wf_instances
    SET status = %(status)s, step = %(step)s, step_attempts = %(step_attempts)s,
        attempts = %(attempts)s, progress = %(progress)s, error = %(error)s,
        cancel_requested = %(cancel_requested)s, version = version + 1, updated_at = now()
    WHERE id = %(id)s AND version = %(version)s
    RETURNING id, version, type, kind, priority
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker)
    SELECT inst.id, e.node, e.event_type, e.attempt, coalesce(e.payload, '{}'), e.error,
           %(worker)s
    FROM inst,
         ROWS FROM (jsonb_to_recordset(%(events)s::jsonb)
                    AS (node text, event_type text, attempt int, payload jsonb, error jsonb))
         WITH ORDINALITY AS e (node, event_type, attempt, payload, error, ord)
    ORDER BY e.ord
)

-- name: apply_continue
, task AS (
    UPDATE wf_tasks t
    SET node = %(node)s, attempt = %(attempt)s, in_flight = true, failures = %(failures)s,
        lease_owner = %(worker)s, due_at = now() + %(lease)s * interval '1 second'
    FROM inst WHERE t.instance_id = inst.id AND t.slot = ''
)
SELECT version FROM inst;

-- name: apply_reschedule
, task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                          failures)
    SELECT inst.id, '', %(node)s, inst.kind, inst.type, inst.priority,
           now() + %(delay)s * interval '1 second', %(attempt)s, %(failures)s
    FROM inst
    ON CONFLICT (instance_id, slot) DO UPDATE
    SET node = excluded.node, due_at = excluded.due_at, in_flight = false,
        failures = excluded.failures, lease_owner = NULL
)
SELECT version, pg_notify(%(channel)s, type) FROM inst;

-- name: apply_finish
, task AS (
    DELETE FROM wf_tasks t USING inst WHERE t.instance_id = inst.id AND t.slot = ''
), rel AS (
    -- An instance that ends releases its locks and wakes their waiters, in the same commit.
    DELETE FROM wf_locks l USING inst WHERE l.holder = inst.id RETURNING l.key
), woke AS (
    UPDATE wf_tasks SET due_at = now()
    WHERE lease_owner IS NULL
      AND instance_id IN (SELECT w.instance_id FROM wf_lock_waiters w JOIN rel ON rel.key = w.key)
)
SELECT version, pg_notify(%(channel)s, 'finish') FROM inst;

-- name: apply_keep
SELECT version FROM inst;

-- name: claim
WITH picked AS (
    SELECT id FROM wf_tasks
    WHERE due_at <= now() AND type = ANY(%(types)s)
    ORDER BY priority, due_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), prev AS (
    SELECT t.id AS task_id, t.node, i.id AS instance_id, i.version,
           coalesce((i.attempts ->> t.node)::int, 0) + 1 AS next_attempt,
           (i.kind = 'machine' AND NOT t.in_flight AND NOT i.cancel_requested
            AND i.status IN ('PENDING', 'RUNNING', 'STALLED')) AS fast
    FROM picked p
    JOIN wf_tasks t ON t.id = p.id
    JOIN wf_instances i ON i.id = t.instance_id
), bumped AS (
    -- Claim and intent in one commit: the version bump fences out any earlier holder.
    UPDATE wf_instances i
    SET version = i.version + 1,
        status = CASE WHEN p.fast THEN 'RUNNING' ELSE i.status END,
        step = CASE WHEN p.fast THEN p.node ELSE i.step END,
        step_attempts = CASE WHEN p.fast THEN p.next_attempt ELSE i.step_attempts END,
        attempts = CASE WHEN p.fast
                        THEN jsonb_set(i.attempts, ARRAY[p.node], to_jsonb(p.next_attempt))
                        ELSE i.attempts END,
        updated_at = now()
    FROM prev p
    WHERE i.id = p.instance_id AND i.version = p.version
    RETURNING i.*, p.fast
), started AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, worker)
    SELECT b.id, b.step, 'STEP_STARTED', b.step_attempts, %(worker)s FROM bumped b WHERE b.fast
), claimed AS (
    UPDATE wf_tasks t
    SET lease_owner = %(worker)s,
        lease_token = %(token)s,
        due_at = now() + %(lease)s * interval '1 second',
        attempt = CASE WHEN b.fast THEN b.step_attempts ELSE t.attempt END,
        in_flight = t.in_flight OR coalesce(b.fast, false)
    FROM prev p LEFT JOIN bumped b ON b.id = p.instance_id
    WHERE t.id = p.task_id
    RETURNING t.*, coalesce(b.fast, false) AS started
)
SELECT c.*, true AS leased, to_jsonb(b) AS instance
FROM claimed c LEFT JOIN bumped b ON b.id = c.instance_id;

-- name: claim_instance_lock
SELECT t.*, i.status AS instance_status
FROM wf_tasks t JOIN wf_instances i ON i.id = t.instance_id
WHERE t.instance_id = %(id)s AND t.slot = ''
  AND (t.lease_owner IS NULL OR t.due_at <= now())
  AND (t.in_flight OR t.due_at <= now() OR i.status = 'STALLED')
FOR UPDATE OF t SKIP LOCKED;

-- name: bump_version
UPDATE wf_instances SET version = version + 1, updated_at = now()
WHERE id = %(id)s RETURNING *;

-- name: lease_task
UPDATE wf_tasks SET lease_owner = %(worker)s, lease_token = %(token)s,
                    due_at = now() + %(lease)s * interval '1 second'
WHERE id = %(task_id)s
RETURNING *, true AS leased;

-- name: heartbeat
UPDATE wf_tasks SET due_at = now() + %(lease)s * interval '1 second'
WHERE lease_owner = %(worker)s AND due_at > now();

-- name: release
UPDATE wf_tasks SET lease_owner = NULL, due_at = now()
WHERE lease_owner = %(worker)s AND instance_id = ANY(%(ids)s);

-- name: release_all
UPDATE wf_tasks SET lease_owner = NULL, due_at = now() WHERE lease_owner = %(worker)s;

-- name: active
SELECT * FROM wf_instances WHERE status IN ('RUNNING', 'STALLED') ORDER BY created_at;

-- name: next_due
SELECT extract(epoch FROM (min(due_at) - now()))::float8 AS wait
FROM wf_tasks WHERE type = ANY(%(types)s);

-- name: dead_letter
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
VALUES (%(instance_id)s, %(envelope)s, %(reason)s, %(worker)s);

-- name: dead_letters
SELECT * FROM wf_dead_letters ORDER BY id DESC LIMIT %(limit)s;

-- name: quarantine
WITH inst AS (
    UPDATE wf_instances SET status = 'STALLED', error = %(error)s, version = version + 1,
                            updated_at = now()
    WHERE id = %(id)s
    RETURNING id, type, status, step, input::text AS input, progress::text AS progress
), task AS (
    UPDATE wf_tasks SET lease_owner = NULL, in_flight = false,
                        due_at = now() + interval '1 day'
    WHERE instance_id = %(id)s
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, error, worker)
    SELECT id, 'QUARANTINED', %(error)s, %(worker)s FROM inst
)
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
SELECT id, to_jsonb(inst), %(reason)s, %(worker)s FROM inst;

-- name: rebuild
UPDATE wf_instances
SET status = %(status)s, step = %(step)s, step_attempts = %(step_attempts)s,
    attempts = %(attempts)s, progress = %(progress)s, error = %(error)s,
    cancel_requested = %(cancel_requested)s, version = version + 1, updated_at = now()
WHERE id = %(id)s;

-- name: lock_acquire
WITH waiting AS (
    INSERT INTO wf_lock_waiters (key, instance_id) VALUES (%(key)s, %(id)s)
    ON CONFLICT DO NOTHING
), ins AS (
    INSERT INTO wf_locks (key, holder) VALUES (%(key)s, %(id)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING holder
)
SELECT holder FROM ins
UNION ALL
SELECT holder FROM wf_locks WHERE key = %(key)s
LIMIT 1;

-- name: lock_unwait
DELETE FROM wf_lock_waiters WHERE key = %(key)s AND instance_id = %(id)s;

-- name: lock_release
WITH rel AS (
    DELETE FROM wf_locks WHERE holder = %(id)s AND (%(key)s::text IS NULL OR key = %(key)s)
    RETURNING key
), woke AS (
    UPDATE wf_tasks SET due_at = now()
    WHERE lease_owner IS NULL
      AND instance_id IN (SELECT w.instance_id FROM wf_lock_waiters w JOIN rel ON rel.key = w.key)
    RETURNING instance_id
)
SELECT (SELECT count(*) FROM rel) AS released, (SELECT count(*) FROM woke) AS woken,
       pg_notify(%(channel)s, 'lock');

-- name: lock_holder
SELECT holder FROM wf_locks WHERE key = %(key)s;

-- name: wake_instances
WITH woke AS (
    UPDATE wf_tasks SET due_at = now()
    WHERE instance_id = ANY(%(ids)s) AND lease_owner IS NULL
    RETURNING instance_id
)
SELECT count(*), pg_notify(%(channel)s, 'wake') FROM woke;

-- DAG instances (kind = 'dag'): one task per dispatched node, slot = node id. --------

-- name: dag_create
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, input, idempotency_key, priority,
                              parent_id)
    VALUES (%(id)s, %(type)s, 'dag', 'RUNNING', %(input)s, %(key)s, %(priority)s,
            %(parent_id)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, type
), run AS (
    INSERT INTO wf_dag_runs (instance_id, name, version, test)
    SELECT id, %(name)s, %(version)s, %(test)s FROM ins
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload)
    SELECT ins.id, e.node, e.event_type, e.attempt, coalesce(e.payload, '{}')
    FROM ins,
         ROWS FROM (jsonb_to_recordset(%(events)s::jsonb)
                    AS (node text, event_type text, attempt int, payload jsonb, error jsonb))
         WITH ORDINALITY AS e (node, event_type, attempt, payload, error, ord)
    ORDER BY e.ord
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
    SELECT id, %(start)s, %(start)s, 'dag', type, %(priority)s,
           now() + %(delay)s * interval '1 second'
    FROM ins
)
SELECT id, pg_notify(%(channel)s, type) FROM ins;

-- name: dag_claim
-- Lease and intent in one commit: the node's next try and its NODE_STARTED.
WITH picked AS (
    SELECT id FROM wf_tasks
    WHERE due_at <= now() AND type = ANY(%(types)s) AND kind = 'dag'
    ORDER BY priority, due_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE wf_tasks t
    SET lease_owner = %(worker)s, due_at = now() + %(lease)s * interval '1 second',
        attempt = t.attempt + 1, in_flight = true
    FROM picked p WHERE t.id = p.id
    RETURNING t.*
), started AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT c.instance_id, c.slot, 'NODE_STARTED', c.attempt,
           jsonb_build_object('failures', c.failures), %(worker)s
    FROM claimed c
    ON CONFLICT DO NOTHING
)
SELECT c.*, true AS leased, to_jsonb(i) AS instance
FROM claimed c JOIN wf_instances i ON i.id = c.instance_id;

-- name: dag_record
-- A node's result, once: a duplicate delivery hits the unique index and writes nothing.
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker)
SELECT id, %(node)s, %(event_type)s, %(attempt)s, %(payload)s, %(error)s, %(worker)s
FROM wf_instances
WHERE id = %(id)s AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
ON CONFLICT DO NOTHING
RETURNING seq;

-- name: dag_slots
SELECT slot FROM wf_tasks WHERE instance_id = %(id)s ORDER BY slot;

-- name: dag_apply
-- One CAS commit: the version-checked instance row, the events, and the node tasks.
WITH inst AS (
    UPDATE wf_instances
    SET status = coalesce(%(status)s::text, status),
        progress = coalesce(%(progress)s::jsonb, progress),
        error = coalesce(%(error)s::jsonb, error),
        version = version + 1, updated_at = now()
    WHERE id = %(id)s AND version = %(version)s
    RETURNING id, version, type, priority
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker)
    SELECT inst.id, e.node, e.event_type, e.attempt, coalesce(e.payload, '{}'), e.error,
           %(worker)s
    FROM inst,
         ROWS FROM (jsonb_to_recordset(%(events)s::jsonb)
                    AS (node text, event_type text, attempt int, payload jsonb, error jsonb))
         WITH ORDINALITY AS e (node, event_type, attempt, payload, error, ord)
    ORDER BY e.ord
), gone AS (
    DELETE FROM wf_tasks t USING inst
    WHERE t.instance_id = inst.id AND (%(finish)s OR t.slot = %(done)s)
), retried AS (
    UPDATE wf_tasks t
    SET due_at = now() + %(retry_delay)s * interval '1 second', failures = %(retry_failures)s,
        in_flight = false, lease_owner = NULL
    FROM inst
    WHERE t.instance_id = inst.id AND t.slot = %(retry)s AND t.lease_owner = %(worker)s
), added AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt)
    SELECT inst.id, d.node, d.node, 'dag', inst.type, inst.priority,
           now() + d.delay * interval '1 second', d.attempt
    FROM inst, jsonb_to_recordset(%(dispatch)s::jsonb) AS d (node text, delay float8, attempt int)
)
SELECT version, pg_notify(%(channel)s, type) FROM inst;

-- name: dag_save
INSERT INTO wf_dag_definitions (name, version, definition)
SELECT %(name)s, coalesce(max(version), 0) + 1, %(definition)s
FROM wf_dag_definitions WHERE name = %(name)s
RETURNING version;

-- name: dag_definition
SELECT version, definition FROM wf_dag_definitions
WHERE name = %(name)s AND (%(version)s::int IS NULL OR version = %(version)s)
ORDER BY version DESC LIMIT 1;

-- name: dag_definitions
SELECT name, max(version) AS version FROM wf_dag_definitions GROUP BY name ORDER BY name;

-- name: dag_instances_of
SELECT count(*) AS n FROM wf_dag_runs WHERE name = %(name)s AND NOT test;

-- name: dag_delete_instances_of
DELETE FROM wf_instances
WHERE id IN (SELECT instance_id FROM wf_dag_runs WHERE name = %(name)s AND NOT test);

-- name: dag_delete_definition
DELETE FROM wf_dag_definitions WHERE name = %(name)s;

-- name: dag_delete_test_run
DELETE FROM wf_instances
WHERE id = %(id)s AND id IN (SELECT instance_id FROM wf_dag_runs WHERE test)
RETURNING id;
