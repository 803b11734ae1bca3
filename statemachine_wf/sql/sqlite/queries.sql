-- Named queries for the SQLite store. Parameters are named (:x); nothing is formatted in,
-- except the number of `type LIKE ?` alternatives in claim filters (a count, not a value).

-- name: insert_instance
INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority,
                          parent_id, created_at, updated_at)
VALUES (:id, :type, :kind, 'PENDING', :step, :input, :key, :priority, :parent_id, :now, :now);

-- name: insert_event
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
VALUES (:instance_id, :node, :event_type, :attempt, :payload, :error, :worker, :now);

-- name: insert_task
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, created_at)
VALUES (:instance_id, '', :node, :kind, :type, :priority, :due_at, :now);

-- name: instance_by_key
SELECT id, type FROM wf_instances WHERE idempotency_key = :key;

-- name: get_instance
SELECT * FROM wf_instances WHERE id = :id;

-- name: get_task
SELECT * FROM wf_tasks WHERE instance_id = :id AND slot = :slot;

-- name: events
SELECT * FROM wf_events WHERE instance_id = :id ORDER BY seq;

-- name: update_projection
UPDATE wf_instances
SET status = :status, step = :step, step_attempts = :step_attempts, attempts = :attempts,
    progress = :progress, error = :error, cancel_requested = :cancel_requested,
    version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: bump_version
UPDATE wf_instances SET version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: task_continue
UPDATE wf_tasks
SET node = :node, attempt = :attempt, in_flight = 1, failures = :failures,
    lease_owner = :worker, due_at = :due_at
WHERE instance_id = :instance_id AND slot = '';

-- name: task_reschedule
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt, in_flight,
                      failures, lease_owner, created_at)
SELECT id, '', :node, kind, type, priority, :due_at, :attempt, 0, :failures, NULL, :now
FROM wf_instances WHERE id = :instance_id
ON CONFLICT (instance_id, slot) DO UPDATE
SET node = excluded.node, due_at = excluded.due_at, in_flight = 0,
    failures = excluded.failures, lease_owner = NULL;

-- name: task_finish
DELETE FROM wf_tasks WHERE instance_id = :instance_id AND slot = '';

-- name: lease_task
UPDATE wf_tasks SET lease_owner = :worker, lease_token = :token, due_at = :due_at
WHERE id = :task_id;

-- name: heartbeat
UPDATE wf_tasks SET due_at = :due_at WHERE lease_owner = :worker AND due_at > :now;

-- name: release
UPDATE wf_tasks SET lease_owner = NULL, due_at = :now
WHERE lease_owner = :worker AND instance_id = :instance_id;

-- name: release_all
UPDATE wf_tasks SET lease_owner = NULL, due_at = :now WHERE lease_owner = :worker;

-- name: active
SELECT * FROM wf_instances WHERE status IN ('RUNNING', 'STALLED') ORDER BY created_at;

-- name: dead_letter
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
VALUES (:instance_id, :envelope, :reason, :worker, :now);

-- name: dead_letters
SELECT * FROM wf_dead_letters ORDER BY id DESC LIMIT :limit;

-- name: rebuild
UPDATE wf_instances
SET status = :status, step = :step, step_attempts = :step_attempts, attempts = :attempts,
    progress = :progress, error = :error, cancel_requested = :cancel_requested,
    version = version + 1, updated_at = :now
WHERE id = :id;

-- name: quarantine_instance
UPDATE wf_instances SET status = 'STALLED', error = :error, version = version + 1, updated_at = :now
WHERE id = :id;

-- name: quarantine_task
UPDATE wf_tasks SET lease_owner = NULL, in_flight = 0, due_at = :due_at WHERE instance_id = :instance_id;

-- name: raw_instance
SELECT id, type, status, step, CAST(input AS TEXT) AS input, CAST(progress AS TEXT) AS progress
FROM wf_instances WHERE id = :id;

-- name: lock_wait
INSERT OR IGNORE INTO wf_lock_waiters (key, instance_id, since) VALUES (:key, :id, :now);

-- name: lock_insert
INSERT OR IGNORE INTO wf_locks (key, holder, since) VALUES (:key, :id, :now);

-- name: lock_holder
SELECT holder FROM wf_locks WHERE key = :key;

-- name: lock_unwait
DELETE FROM wf_lock_waiters WHERE key = :key AND instance_id = :id;

-- name: lock_held
SELECT key FROM wf_locks WHERE holder = :id AND (:key IS NULL OR key = :key);

-- name: lock_delete
DELETE FROM wf_locks WHERE holder = :id AND key = :key;

-- name: lock_wake
UPDATE wf_tasks SET due_at = :now
WHERE lease_owner IS NULL
  AND instance_id IN (SELECT instance_id FROM wf_lock_waiters WHERE key = :key);

-- name: wake_instance
UPDATE wf_tasks SET due_at = :now WHERE instance_id = :id AND lease_owner IS NULL;

-- DAG instances (kind = 'dag'): one task per dispatched node, slot = node id. --------

-- name: dag_insert_instance
INSERT INTO wf_instances (id, type, kind, status, input, idempotency_key, priority,
                          parent_id, created_at, updated_at)
VALUES (:id, :type, 'dag', 'RUNNING', :input, :key, :priority, :parent_id, :now, :now);

-- name: dag_insert_run
INSERT INTO wf_dag_runs (instance_id, name, version, test)
VALUES (:id, :name, :version, :test);

-- name: dag_insert_task
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                      created_at)
SELECT id, :node, :node, 'dag', type, priority, :due_at, :attempt, :now
FROM wf_instances WHERE id = :instance_id;

-- name: dag_due
SELECT * FROM wf_tasks WHERE due_at <= ? AND kind = 'dag'

-- name: dag_lease
UPDATE wf_tasks SET lease_owner = :worker, due_at = :due_at, attempt = attempt + 1,
                    in_flight = 1
WHERE id = :task_id;

-- name: dag_started
INSERT OR IGNORE INTO wf_events (instance_id, node, event_type, attempt, payload, worker,
                                 created_at)
VALUES (:instance_id, :node, 'NODE_STARTED', :attempt, :payload, :worker, :now);

-- name: dag_record
INSERT OR IGNORE INTO wf_events (instance_id, node, event_type, attempt, payload, error,
                                 worker, created_at)
SELECT id, :node, :event_type, :attempt, :payload, :error, :worker, :now
FROM wf_instances
WHERE id = :id AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');

-- name: dag_slots
SELECT slot FROM wf_tasks WHERE instance_id = :id ORDER BY slot;

-- name: dag_update_instance
UPDATE wf_instances
SET status = coalesce(:status, status), progress = coalesce(:progress, progress),
    error = coalesce(:error, error), version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;

-- name: dag_task_done
DELETE FROM wf_tasks WHERE instance_id = :instance_id AND slot = :slot;

-- name: dag_tasks_finish
DELETE FROM wf_tasks WHERE instance_id = :instance_id;

-- name: dag_task_retry
UPDATE wf_tasks
SET due_at = :due_at, failures = :failures, in_flight = 0, lease_owner = NULL
WHERE instance_id = :instance_id AND slot = :slot AND lease_owner = :worker;

-- name: dag_save
INSERT INTO wf_dag_definitions (name, version, definition, created_at)
SELECT :name, coalesce(max(version), 0) + 1, :definition, :now
FROM wf_dag_definitions WHERE name = :name
RETURNING version;

-- name: dag_definition
SELECT version, definition FROM wf_dag_definitions
WHERE name = :name AND (:version IS NULL OR version = :version)
ORDER BY version DESC LIMIT 1;

-- name: dag_definitions
SELECT name, max(version) AS version FROM wf_dag_definitions GROUP BY name ORDER BY name;

-- name: dag_instances_of
SELECT count(*) AS n FROM wf_dag_runs WHERE name = :name AND NOT test;

-- name: dag_delete_instances_of
DELETE FROM wf_instances
WHERE id IN (SELECT instance_id FROM wf_dag_runs WHERE name = :name AND NOT test);

-- name: dag_delete_definition
DELETE FROM wf_dag_definitions WHERE name = :name;

-- name: dag_delete_test_run
DELETE FROM wf_instances
WHERE id = :id AND id IN (SELECT instance_id FROM wf_dag_runs WHERE test);
