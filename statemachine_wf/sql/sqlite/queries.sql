-- Named queries for the SQLite store. Parameters are named (:x); nothing is formatted in,
-- except the number of `type LIKE ?` alternatives in claim filters (a count, not a value).

-- name: create
-- A script (one transaction), as PostgreSQL's statement of the same name: the instance
-- unless its idempotency key is known (the upsert target is checked first: the same id
-- and key again inserts nothing), then - only if that row went in (changes() is the
-- previous statement's count) - its WORKFLOW_CREATED event and its task. Returns the id
-- when created.
INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority,
                          parent_id, parent_node, created_at, updated_at, trace_context)
VALUES (:id, :type, :kind, 'PENDING', nullif(:step, ''), :input, :key, :priority, :parent_id,
        :parent_node, :now, :now, :trace)
ON CONFLICT (idempotency_key) DO NOTHING;
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT :id, NULL, 'WORKFLOW_CREATED', NULL, :created, NULL, NULL, :now WHERE changes() = 1;
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, created_at)
SELECT :id, '', :step, :kind, :type, :priority, coalesce(:run_at, :now + :delay), :now
WHERE changes() = 1;
SELECT :id AS id WHERE changes() = 1;

-- name: create_leased
-- `create` for a start kept in its process for a worker asleep that claims its type
-- (stores/_decisions.py, _start), as PostgreSQL's statement of the same name: the task is
-- leased to that worker and its first step started in this commit, as `claim` would: the
-- instance RUNNING at its first attempt, STEP_STARTED after WORKFLOW_CREATED, the task in
-- flight under a fresh token, due when the lease runs out. Each insert runs only if the
-- one before it inserted its row (changes()); the result is the task's row, which the
-- worker runs without a claim.
INSERT INTO wf_instances (id, type, kind, status, step, step_attempts, attempts, input,
                          idempotency_key, priority, parent_id, parent_node, created_at,
                          updated_at, trace_context)
VALUES (:id, :type, :kind, 'RUNNING', :step, 1, json_object(:step, 1), :input, :key,
        :priority, :parent_id, :parent_node, :now, :now, :trace)
ON CONFLICT (idempotency_key) DO NOTHING;
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT :id, NULL, 'WORKFLOW_CREATED', NULL, :created, NULL, NULL, :now WHERE changes() = 1;
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT :id, :step, 'STEP_STARTED', 1, '{}', NULL, :worker, :now WHERE changes() = 1;
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, lease_owner,
                      lease_token, attempt, in_flight, created_at)
SELECT :id, '', :step, :kind, :type, :priority, :now + :lease, :worker, :token, 1, 1, :now
WHERE changes() = 1;
SELECT t.*, 1 AS leased FROM wf_tasks AS t
WHERE t.instance_id = :id AND t.slot = '' AND changes() = 1;

-- The decision pieces of apply (SqlStore._apply_plan names them; the same names as
-- PostgreSQL's). SQLite runs them as one script in the caller's BEGIN IMMEDIATE
-- transaction (SqlStore._run_decision): apply_head first, whose first statement is the CAS,
-- then apply_dead_letter and apply_signals when the decision has them, then one tail. When
-- the CAS changes no row nothing after it runs; when it changes one, the new version is
-- :version + 1, which _run_decision returns itself (a `SELECT :version + 1` ending each
-- tail was a statement a step for a sum).

-- name: apply_head
-- The CAS: the decision was made on :version. Anything committed since (another runner's
-- claim, an operator's cancel, a signal) moved it, and then nothing at all is written.
UPDATE wf_instances
SET step = :step, step_attempts = :step_attempts, attempts = :attempts,
    progress = :progress, error = :error, cancel_requested = :cancel_requested,
    waits = :waits, waiting_key = :waiting_key, waiting_kind = :waiting_kind,
    waiting_token = :waiting_token, waiting_until = :waiting_until,
    version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;
-- The status apart, and only when it changes: SQLite rewrites the entries of every index
-- on a column an UPDATE sets (status leads wf_instances_active and filters it and
-- wf_instances_finished), whether or not its value changes, and most decisions keep it
-- (bench/README.md, "SQLite: the status written only when it changes"). Not run at all
-- when the commit knows the status it was decided on and the decision keeps it
-- (Commit.status; the CAS above makes that the row's status), nor when it knows the status
-- moves: then the head is apply_head_moved, which sets it with the rest.
-- only when :status_unknown
UPDATE wf_instances SET status = :status WHERE :status_unknown AND id = :id AND status <> :status;

-- name: apply_head_moved
-- apply_head for a commit that knows its decision moves the status (Commit.status): one
-- statement, where apply_head's head and its status would be two.
UPDATE wf_instances
SET step = :step, step_attempts = :step_attempts, attempts = :attempts,
    progress = :progress, error = :error, cancel_requested = :cancel_requested,
    waits = :waits, waiting_key = :waiting_key, waiting_kind = :waiting_kind,
    waiting_token = :waiting_token, waiting_until = :waiting_until,
    version = version + 1, updated_at = :now, status = :status
WHERE id = :id AND version = :version;

-- name: append_events
-- The events (:events, a JSON array), in order. A duplicate once-per-attempt event hits the
-- unique index: somebody else already wrote this decision (a lost race, as a lost CAS).
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT :id, value ->> '$.node', value ->> '$.event_type', value ->> '$.attempt',
       value -> '$.payload',
       CASE WHEN json_type(value, '$.error') = 'null' THEN NULL ELSE value -> '$.error' END,
       :worker, :now
FROM json_each(:events) ORDER BY key;

-- name: apply_dead_letter
-- The decision dead-letters its instance: the envelope is what started it.
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
SELECT id,
       json_object('instance_id', id, 'type', type, 'kind', kind, 'input', json(input),
                   'idempotency_key', idempotency_key, 'priority', priority,
                   'step', :step, 'status', :status, 'error', json(:error)),
       :dead_letter, :worker, :now
FROM wf_instances WHERE id = :id;

-- name: apply_signals
-- The wf_signals side of a decision: settle the rows it read (:settled, a JSON array of
-- {id, state}), dead-letter the rejected ones (:dead), insert the wait's timer (a signal of
-- kind 'timer' due at the deadline).
UPDATE wf_signals
SET state = (SELECT o.value ->> '$.state' FROM json_each(:settled) o
             WHERE o.value ->> '$.id' = wf_signals.id),
    settled_at = :now
WHERE instance_id = :id AND state = 'pending'
  AND id IN (SELECT value ->> '$.id' FROM json_each(:settled));
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
SELECT :id, value -> '$.envelope', value ->> '$.reason', :worker, :now
FROM json_each(:dead) ORDER BY key;
-- only when :timer_token
INSERT INTO wf_signals (instance_id, kind, name, payload, token, due_at, created_at)
SELECT :id, 'timer', 'timer', 'null', :timer_token, :timer_due, :now
WHERE :timer_token IS NOT NULL;

-- name: apply_continue
-- The lease is renewed only once half of it is used, as PostgreSQL's (where an unchanged
-- due_at lets the update skip the indexes); the heartbeat renews it too.
UPDATE wf_tasks
SET node = :node, attempt = :attempt, in_flight = 1, failures = :failures,
    lease_owner = :worker,
    due_at = CASE WHEN due_at < :now + :lease / 2.0 THEN :now + :lease ELSE due_at END
WHERE instance_id = :id AND slot = '';

-- name: apply_reschedule
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt, in_flight,
                      failures, lease_owner, created_at)
SELECT id, '', :node, kind, type, priority, :now + :delay, :attempt, :in_doubt, :failures, NULL,
       :now
FROM wf_instances WHERE id = :id
ON CONFLICT (instance_id, slot) DO UPDATE
-- in_flight stays set for a step still in doubt (decide.Reschedule.in_doubt)
SET node = excluded.node, due_at = excluded.due_at, in_flight = excluded.in_flight,
    failures = excluded.failures, lease_owner = NULL;

-- name: apply_park
-- The step waits: parked until its deadline (none: 100 years), or until a pending signal
-- that may concern the wait is due - one with a token, or an untokened one of its name -
-- other than those this commit settles (apply_signals ran first; excluded all the same).
UPDATE wf_tasks
SET node = :node, in_flight = 0, failures = :failures, lease_owner = NULL,
    due_at = min(coalesce(:until, :now + 3153600000.0), coalesce(
        (SELECT min(s.due_at) FROM wf_signals s
         WHERE s.instance_id = :id AND s.state = 'pending' AND s.kind = 'signal'
           AND (s.token IS NOT NULL OR s.name = :wait_name)
           AND s.id NOT IN (SELECT value ->> '$.id' FROM json_each(:settled))),
        coalesce(:until, :now + 3153600000.0)))
WHERE instance_id = :id AND slot = '';

-- name: apply_finish
DELETE FROM wf_tasks WHERE instance_id = :id AND slot = '';
-- What an ending instance leaves to others (its locks and places in lock queues, its
-- pending signals, a parent's waiting node) is five statements, which most finishes have
-- nothing for: they run only when this probe finds some (four fewer calls into SQLite a
-- workflow; PostgreSQL's swf_finish_rest, migration 025). Under the writer lock its
-- answer holds until they run.
-- sets :ends_rest
SELECT EXISTS (SELECT 1 FROM wf_locks WHERE holder = :id)
       OR EXISTS (SELECT 1 FROM wf_lock_waiters WHERE instance_id = :id)
       OR EXISTS (SELECT 1 FROM wf_signals WHERE instance_id = :id AND state = 'pending')
       OR EXISTS (SELECT 1 FROM wf_instances WHERE id = :id AND parent_id IS NOT NULL);
-- An instance that ends releases its locks and wakes one waiter of each, in the same
-- commit (the waiters are found through the locks, so the wake-up goes first). The keys
-- it queued for and never took, now free, pass their wake-up on too: it may have been
-- the waiter a release woke (lock_release, and PostgreSQL's apply_finish).
-- only when :ends_rest
UPDATE wf_tasks SET due_at = :now
WHERE :ends_rest AND lease_owner IS NULL
  AND instance_id IN (
      SELECT (SELECT w.instance_id FROM wf_lock_waiters w
              WHERE w.key = f.key AND w.instance_id <> :id
                AND EXISTS (SELECT 1 FROM wf_tasks t
                            WHERE t.instance_id = w.instance_id AND t.lease_owner IS NULL)
              ORDER BY w.since, w.instance_id LIMIT 1)
      FROM (SELECT key FROM wf_locks WHERE holder = :id
            UNION
            SELECT w.key FROM wf_lock_waiters w
            WHERE w.instance_id = :id
              AND NOT EXISTS (SELECT 1 FROM wf_locks l WHERE l.key = w.key)) AS f);
-- only when :ends_rest
DELETE FROM wf_locks WHERE :ends_rest AND holder = :id;
-- An instance that ends dead-letters the signals it never applied and voids its timers
-- (those this commit settled are no longer pending: apply_signals ran first).
-- only when :ends_rest
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
SELECT instance_id,
       json_object('signal', id, 'instance_id', instance_id, 'kind', kind, 'name', name,
                   'payload', json(CASE WHEN json_valid(payload) THEN payload ELSE json_quote(payload) END),
                   'tokened', json(CASE WHEN token IS NULL THEN 'false' ELSE 'true' END)),
       'the instance ended before the signal was applied', :worker, :now
FROM wf_signals
WHERE :ends_rest AND instance_id = :id AND state = 'pending' AND kind = 'signal';
-- only when :ends_rest
UPDATE wf_signals
SET state = CASE WHEN kind = 'timer' THEN 'void' ELSE 'dead' END, settled_at = :now
WHERE :ends_rest AND instance_id = :id AND state = 'pending';
-- A sub-workflow that ends makes its parent's waiting node task due, in the same commit
-- (left alone while a runner holds it: that runner re-reads the child after parking).
-- (Two scalar subqueries, NULL for an instance with no parent: no temporary table.)
-- only when :ends_rest
UPDATE wf_tasks
SET due_at = CASE WHEN lease_owner IS NULL THEN :now ELSE due_at END
WHERE :ends_rest
  AND instance_id = (SELECT parent_id FROM wf_instances WHERE id = :id)
  AND slot = (SELECT parent_node FROM wf_instances WHERE id = :id);

-- name: apply_keep
-- Nothing beyond the head and the events: the task stays as it is.

-- name: instance_by_key
SELECT id, type FROM wf_instances WHERE idempotency_key = :key;

-- name: get_instance
SELECT * FROM wf_instances WHERE id = :id;

-- name: get_task
SELECT * FROM wf_tasks WHERE instance_id = :id AND slot = :slot;

-- name: events
SELECT * FROM wf_events WHERE instance_id = :id AND seq > :after ORDER BY seq;

-- name: claim_scratch
-- Made once on the write connection (SQLiteConnections._writing), TEMP: this connection's
-- own. Each row the claim inserts is taken by the trigger, in the insert's statement (five
-- statements fewer a claim, each a call into SQLite that lets go of the interpreter lock;
-- bench/README.md, "Session 59"): every picked instance's version is bumped - claim and
-- intent in one commit, and an earlier holder of the task (its lease expired) loses its
-- next CAS - and a fast one gets decide.start's projection and its STEP_STARTED (the
-- contract tests pin both to the fold); a wait whose one due pending row is its own timer
-- (`timer_id`) is fast too, its timer fired in the same commit (TIMER_FIRED's fold and
-- event, before STEP_STARTED; the row applied: PostgreSQL's `prev`). Then the task is
-- leased under the claim's token, fresh for every claim. No version check, unlike
-- PostgreSQL's `bumped`: under the writer lock (BEGIN IMMEDIATE) nothing commits between
-- the pick and the trigger. A state machine's instance has one task (slot ''): one row an
-- instance. The trigger's statements name no schema (SQLite allows none in a trigger's
-- writes); a TEMP trigger's names resolve to the main tables, temp holding none of them.
CREATE TEMP TABLE IF NOT EXISTS swf_claim (task_id INTEGER PRIMARY KEY, instance_id TEXT,
                                           node TEXT, fast INTEGER, next_attempt INTEGER,
                                           timer_id INTEGER, wait_key TEXT, outcome TEXT,
                                           worker TEXT, token TEXT, lease_until REAL,
                                           now REAL);
CREATE TEMP TRIGGER IF NOT EXISTS swf_claim_take AFTER INSERT ON swf_claim
BEGIN
    UPDATE wf_instances
    SET version = version + 1, updated_at = NEW.now,
        status = CASE WHEN NEW.fast THEN 'RUNNING' ELSE status END,
        step = CASE WHEN NEW.fast THEN NEW.node ELSE step END,
        step_attempts = CASE WHEN NEW.fast THEN NEW.next_attempt ELSE step_attempts END,
        attempts = CASE WHEN NEW.fast
                        THEN json_set(attempts, '$."' || NEW.node || '"', NEW.next_attempt)
                        ELSE attempts END,
        waits = CASE WHEN NEW.timer_id IS NOT NULL
                     THEN json_set(waits, '$."' || NEW.wait_key || '"',
                                   json_patch(coalesce(json_extract(waits, '$."' || NEW.wait_key || '"'),
                                                       '{}'),
                                              json_object('outcome', NEW.outcome)))
                     ELSE waits END,
        waiting_key = CASE WHEN NEW.fast THEN NULL ELSE waiting_key END,
        waiting_kind = CASE WHEN NEW.fast THEN NULL ELSE waiting_kind END,
        waiting_token = CASE WHEN NEW.fast THEN NULL ELSE waiting_token END,
        waiting_until = CASE WHEN NEW.fast THEN NULL ELSE waiting_until END
    WHERE id = NEW.instance_id;
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker, created_at)
    SELECT NEW.instance_id, NEW.node, 'TIMER_FIRED', NEW.next_attempt - 1,
           json_object('wait', NEW.wait_key, 'outcome', NEW.outcome, 'signal', NEW.timer_id),
           NEW.worker, NEW.now
    WHERE NEW.timer_id IS NOT NULL;
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker, created_at)
    SELECT NEW.instance_id, NEW.node, 'STEP_STARTED', NEW.next_attempt, '{}', NEW.worker,
           NEW.now
    WHERE NEW.fast;
    UPDATE wf_signals SET state = 'applied', settled_at = NEW.now
    WHERE NEW.timer_id IS NOT NULL AND id = NEW.timer_id AND state = 'pending';
    UPDATE wf_tasks
    SET lease_owner = NEW.worker, lease_token = NEW.token, due_at = NEW.lease_until,
        attempt = CASE WHEN NEW.fast THEN NEW.next_attempt ELSE attempt END,
        in_flight = in_flight OR NEW.fast,
        -- As decide.moved_on's Continue after a delivered wait: no failures carried on.
        failures = CASE WHEN NEW.timer_id IS NOT NULL THEN 0 ELSE failures END
    WHERE id = NEW.task_id;
END;

-- name: claim
-- A script (one transaction), as PostgreSQL's statement of the same name: lease and intent
-- in one commit. The due state-machine tasks of :types (a JSON array), :limit of them, are
-- picked into this connection's scratch table (claim_scratch) with whether each starts at
-- once (`fast`: the rule of PostgreSQL's claim, `prev`; an unreadable `attempts` is not
-- fast, and the claim then quarantines the row) and its next attempt; the table's trigger
-- then takes each row as it is inserted: the version bumped, the step started, a timer
-- fired, the task leased (see claim_scratch). Three statements a claim: the scratch table
-- emptied, filled, and read back with each task's instance as the claim left it.
DELETE FROM temp.swf_claim;
INSERT INTO temp.swf_claim (task_id, instance_id, node, fast, next_attempt, timer_id, wait_key,
                            outcome, worker, token, lease_until, now)
SELECT task_id, instance_id, node, fast,
       CASE WHEN fast THEN coalesce(json_extract(attempts, '$."' || node || '"'), 0) + 1 END,
       CASE WHEN fast THEN timer_id END, wait_key, outcome, :worker, :token, :now + :lease, :now
FROM (SELECT *, (base AND (wait_key IS NULL OR timer_id IS NOT NULL)) AS fast
FROM (SELECT t.id AS task_id, t.instance_id, t.node, i.attempts,
             (i.kind = 'machine' AND NOT t.in_flight AND NOT i.cancel_requested
              AND coalesce(t.node, '') <> ''
              AND (i.status = 'PENDING' OR i.status = 'RUNNING' OR i.status = 'STALLED')
              AND json_valid(i.attempts)) AS base,
             i.waiting_key AS wait_key,
             CASE WHEN i.waiting_kind = 'signal' THEN 'timeout' ELSE 'slept' END AS outcome,
             CASE WHEN i.waiting_key IS NOT NULL AND t.node = i.step AND json_valid(i.waits)
                  THEN (SELECT CASE WHEN count(*) = 1
                                     AND min(s.kind = 'timer' AND s.token IS i.waiting_token)
                                    THEN min(s.id) END
                        FROM wf_signals s
                        WHERE s.instance_id = i.id AND s.state = 'pending'
                          AND s.due_at <= :now) END AS timer_id
      FROM wf_tasks t JOIN wf_instances i ON i.id = t.instance_id
      -- Lock holders' due tasks first (as PostgreSQL's claim: a holder's recheck never
      -- queues behind the work its lock keeps waiting), then the rest by priority and due
      -- time; a task in both counts once. State-machine tasks only: a DAG instance named
      -- after a hosted type is not ours.
      -- Both picks walk an index in their own order and stop at :limit, as PostgreSQL's
      -- do: the holders from wf_locks (CROSS JOIN keeps it the outer loop) to their task
      -- by (instance_id, slot); the rest per type down wf_tasks_type_pick (INDEXED BY, a
      -- correlated pick per type). Left to itself the planner took (type, due_at) and
      -- sorted every due task for each claim: 2,360 claims/s with 100 due tasks, 190 with
      -- 10,000 (bench/README.md, "Claim and backlog").
      WHERE t.id IN (SELECT id FROM (
                       SELECT * FROM (SELECT w.id, 0 AS rank, w.priority, w.due_at
                                      FROM (SELECT DISTINCT holder FROM wf_locks) AS l
                                      CROSS JOIN wf_tasks AS w ON w.instance_id = l.holder
                                      WHERE w.due_at <= :now AND w.kind = 'machine'
                                        AND w.type IN (SELECT value FROM json_each(:types))
                                      ORDER BY w.priority, w.due_at LIMIT :limit)
                       UNION ALL
                       SELECT * FROM (SELECT t2.id, 1 AS rank, t2.priority, t2.due_at
                                      FROM json_each(:types) AS j CROSS JOIN wf_tasks AS t2
                                      WHERE t2.id IN (
                                          SELECT w.id FROM wf_tasks AS w
                                                 INDEXED BY wf_tasks_type_pick
                                          WHERE w.type = j.value AND w.due_at <= :now
                                            AND w.kind = 'machine'
                                          ORDER BY w.priority, w.due_at LIMIT :limit)
                                      ORDER BY t2.priority, t2.due_at LIMIT :limit))
                     GROUP BY id ORDER BY min(rank), min(priority), min(due_at)
                     LIMIT :limit)));
-- more: whether another task of the types is still due (the picked ones are leased by
-- now): the runner wakes one more worker only then. Per type off (type, due_at), the
-- first due row: never a walk of the type's leased or parked tasks.
SELECT t.*, 1 AS leased, c.fast AS started, c.timer_id AS fired,
       EXISTS (SELECT 1 FROM json_each(:types) AS j
               WHERE EXISTS (SELECT 1 FROM wf_tasks AS m INDEXED BY wf_tasks_type_due
                             WHERE m.type = j.value AND m.due_at <= :now
                               AND m.kind = 'machine')) AS more,
       -- The instance, as the claim left it: its columns after the marker
       -- (SQLiteStore._claimed_instance), so the claim needs no read of it.
       NULL AS swf_instance_after, i.*
FROM temp.swf_claim c CROSS JOIN wf_tasks t ON t.id = c.task_id  -- the picked rows outside
JOIN wf_instances i ON i.id = t.instance_id
ORDER BY t.priority, t.due_at;

-- name: claim_instance_lock
-- The instance's task if a claim may take it now: not held by a live lease, and due - or,
-- unless quarantined (only its parked task or a redrive takes it again), in doubt or
-- STALLED. A backoff or a timer is not ours to hurry.
SELECT t.*
FROM wf_tasks t JOIN wf_instances i ON i.id = t.instance_id
WHERE t.instance_id = :id AND t.slot = ''
  AND (t.lease_owner IS NULL OR t.due_at <= :now)
  AND (t.due_at <= :now
       OR ((i.error IS NULL OR NOT json_valid(i.error)
            OR json_extract(i.error, '$.code') IS NOT 'quarantined')
           AND (t.in_flight OR i.status = 'STALLED')));

-- name: bump_version
UPDATE wf_instances SET version = version + 1, updated_at = :now
WHERE id = :id RETURNING *;

-- name: lease_task
UPDATE wf_tasks SET lease_owner = :worker, lease_token = :token, due_at = :now + :lease
WHERE id = :task_id
RETURNING *, 1 AS leased;

-- name: heartbeat
-- :mine: the lease-token prefix of the beating runner's incarnation (NULL: any), so a live
-- runner never keeps a dead twin's leases (same worker id) alive.
UPDATE wf_tasks SET due_at = :now + :lease WHERE lease_owner = :worker AND due_at > :now
  AND (:mine IS NULL OR substr(lease_token, 1, length(:mine)) = :mine);

-- name: heartbeat_logged
-- A script (one transaction), as PostgreSQL's statement of the same name: a HEARTBEAT
-- event (:payload) for every claim already seen held at an earlier heartbeat (same lease
-- token) whose last logged one is :every seconds old - decided before the extension
-- below moves heartbeat_at - then the extension, which marks a claim seen for the first
-- time; the count of claims extended.
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT instance_id, node, 'HEARTBEAT', attempt, :payload, NULL, :worker, :now
FROM wf_tasks
WHERE lease_owner = :worker AND due_at > :now
  AND (:mine IS NULL OR substr(lease_token, 1, length(:mine)) = :mine)
  AND heartbeat_at IS NOT NULL AND heartbeat_token IS lease_token
  AND heartbeat_at <= :now - :every
ORDER BY id;
UPDATE wf_tasks
SET due_at = :now + :lease, heartbeat_token = lease_token,
    heartbeat_at = CASE WHEN heartbeat_at IS NULL OR heartbeat_token IS NOT lease_token
                          OR heartbeat_at <= :now - :every
                        THEN :now ELSE heartbeat_at END
WHERE lease_owner = :worker AND due_at > :now
  AND (:mine IS NULL OR substr(lease_token, 1, length(:mine)) = :mine);
SELECT changes() AS n;

-- name: release
-- A script. :ids is a JSON array. Only this worker's leases, and of those only the claim
-- :token (when given) of this incarnation (:mine, when given): a hand-back never frees a
-- lease a later claim took. :unrun, with a token: that claim started its step and no
-- worker ran it (a runner stopping), so a state-machine attempt gets a STEP_RELEASED and
-- loses its in-flight mark (PostgreSQL's statement of the same name says why).
-- only when :unrun
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT instance_id, node, 'STEP_RELEASED', attempt, '{"reason": "handed back before it ran"}',
       NULL, :worker, :now
FROM wf_tasks
WHERE :unrun AND kind = 'machine'
  AND lease_owner = :worker AND instance_id IN (SELECT value FROM json_each(:ids))
  AND (:token IS NULL OR lease_token = :token)
  AND (:mine IS NULL OR substr(lease_token, 1, length(:mine)) = :mine);
UPDATE wf_tasks
SET lease_owner = NULL, due_at = :now, in_flight = in_flight AND NOT (:unrun AND kind = 'machine')
WHERE lease_owner = :worker AND instance_id IN (SELECT value FROM json_each(:ids))
  AND (:token IS NULL OR lease_token = :token)
  AND (:mine IS NULL OR substr(lease_token, 1, length(:mine)) = :mine);

-- name: lease_incarnations
SELECT DISTINCT substr(lease_token, 1, instr(lease_token, '/') - 1) AS inc FROM wf_tasks
WHERE lease_owner = :worker AND due_at > :now AND instr(lease_token, '/') > 0;

-- name: release_all
UPDATE wf_tasks SET lease_owner = NULL, due_at = :now WHERE lease_owner = :worker
  AND (:mine IS NULL OR substr(lease_token, 1, length(:mine)) = :mine);

-- name: active
SELECT * FROM wf_instances WHERE status IN ('RUNNING', 'STALLED') ORDER BY created_at;

-- name: list_instances
-- :status is a JSON array (ignored when :any_status); :pattern a LIKE prefix (store.like_prefix).
SELECT * FROM wf_instances
WHERE (:any_status OR status IN (SELECT value FROM json_each(:status)))
  AND (:pattern IS NULL OR type LIKE :pattern ESCAPE '\')
  AND (:deleted OR deleted_at IS NULL)
ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset;

-- name: count_instances
SELECT count(*) AS n FROM wf_instances
WHERE (:any_status OR status IN (SELECT value FROM json_each(:status)))
  AND (:pattern IS NULL OR type LIKE :pattern ESCAPE '\')
  AND (:deleted OR deleted_at IS NULL);

-- name: next_due
-- Seconds until the earliest task of :types (a JSON array) is due; negative when overdue.
SELECT min(due_at) - :now AS wait FROM wf_tasks
WHERE type IN (SELECT value FROM json_each(:types));

-- name: next_due_kinds
-- Per type, the first due time read off the (type, due_at) index: the OR with the kinds
-- made the planner visit every task of the types (21 ms at 100,000 tasks, each idle loop).
SELECT min(due) - :now AS wait FROM (
    SELECT (SELECT due_at FROM wf_tasks WHERE type = j.value AND kind = 'machine'
            ORDER BY due_at LIMIT 1) AS due
    FROM json_each(:types) AS j
    UNION ALL
    SELECT (SELECT due_at FROM wf_tasks WHERE type = j.value AND kind = 'dag'
            ORDER BY due_at LIMIT 1)
    FROM json_each(:dag) AS j);

-- name: dead_letter
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
VALUES (:instance_id, :envelope, :reason, :worker, :now);

-- name: dead_letters
SELECT * FROM wf_dead_letters ORDER BY id DESC LIMIT :limit;

-- name: rebuild
UPDATE wf_instances
SET status = :status, step = :step, step_attempts = :step_attempts, attempts = :attempts,
    progress = :progress, error = :error, cancel_requested = :cancel_requested,
    waits = :waits, waiting_key = :waiting_key, waiting_kind = :waiting_kind,
    waiting_token = :waiting_token, waiting_until = :waiting_until,
    version = version + 1, updated_at = :now
WHERE id = :id;

-- name: quarantine
-- A script (one transaction), as PostgreSQL's statement of the same name: the instance set
-- aside (STALLED, the error :error, its version bumped so a decision made before loses its
-- CAS), its task held back a day, its QUARANTINED event and its dead letter (the envelope
-- is the row as quarantined). Nothing for an instance that does not exist.
UPDATE wf_instances SET status = 'STALLED', error = :error, version = version + 1, updated_at = :now
WHERE id = :id;
-- in_flight stays: a step quarantined mid-attempt is still in doubt (see PostgreSQL's).
UPDATE wf_tasks SET lease_owner = NULL, due_at = :now + 86400.0 WHERE instance_id = :id;
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT id, NULL, 'QUARANTINED', NULL, '{}', :error, :worker, :now FROM wf_instances WHERE id = :id;
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker, created_at)
SELECT id, json_object('id', id, 'type', type, 'status', status, 'step', step,
                       'input', CAST(input AS TEXT), 'progress', CAST(progress AS TEXT)),
       :reason, :worker, :now
FROM wf_instances WHERE id = :id;

-- name: lock_acquire
-- A script (one transaction): queue as a waiter, take the lock if it is free, and return
-- the holder, ours or another's (the caller then unqueues a holder: lock_unwait). As
-- PostgreSQL's statement of the same name.
INSERT OR IGNORE INTO wf_lock_waiters (key, instance_id, since) VALUES (:key, :id, :now);
INSERT OR IGNORE INTO wf_locks (key, holder, since) VALUES (:key, :id, :now);
SELECT holder FROM wf_locks WHERE key = :key;

-- name: lock_holder
SELECT holder FROM wf_locks WHERE key = :key;

-- name: locks_held
-- :pattern a LIKE prefix (store.like_prefix) or NULL.
SELECT key, holder, since FROM wf_locks
WHERE :pattern IS NULL OR key LIKE :pattern ESCAPE '\' ORDER BY key;

-- name: lock_waiters
-- Only waiters that can still take the lock: an ended instance's row stays until deleted.
SELECT w.key, w.instance_id, w.since
FROM wf_lock_waiters w JOIN wf_instances i ON i.id = w.instance_id
WHERE (:pattern IS NULL OR w.key LIKE :pattern ESCAPE '\')
  AND (i.status = 'PENDING' OR i.status = 'RUNNING' OR i.status = 'STALLED')
ORDER BY w.key, w.since, w.instance_id;

-- name: lock_unwait
DELETE FROM wf_lock_waiters WHERE key = :key AND instance_id = :id;

-- name: lock_release
-- A script (one transaction): wake one waiter of every lock the instance releases (all
-- of them, or :key), release them, and count them. The waiters are found through the
-- locks, so the wake-up goes first. One waiter, the longest-waiting one whose task no
-- runner holds, not all: see PostgreSQL's statement of the same name for why.
UPDATE wf_tasks SET due_at = :now
WHERE lease_owner IS NULL
  AND instance_id IN (
      SELECT (SELECT w.instance_id FROM wf_lock_waiters w
              WHERE w.key = l.key
                AND EXISTS (SELECT 1 FROM wf_tasks t
                            WHERE t.instance_id = w.instance_id AND t.lease_owner IS NULL)
              ORDER BY w.since, w.instance_id LIMIT 1)
      FROM wf_locks l WHERE l.holder = :id AND (:key IS NULL OR l.key = :key));
DELETE FROM wf_locks WHERE holder = :id AND (:key IS NULL OR key = :key);
SELECT changes() AS released;

-- name: wake_instances
-- :ids is a JSON array. Only tasks no runner holds: a leased task's due time is its lease.
UPDATE wf_tasks SET due_at = :now
WHERE instance_id IN (SELECT value FROM json_each(:ids)) AND lease_owner IS NULL;

-- Signals and timers (005). ----------------------------------------------------------

-- name: signal_insert
INSERT INTO wf_signals (instance_id, kind, name, payload, token, due_at, created_at)
VALUES (:instance_id, 'signal', :name, :payload, :token, :now + :delay, :now)
RETURNING id;

-- name: signals_pending
SELECT * FROM wf_signals
WHERE instance_id = :instance_id AND state = 'pending' AND due_at <= :now
ORDER BY due_at, id;

-- name: signal_get
SELECT * FROM wf_signals WHERE id = :id;

-- name: signals_list
SELECT * FROM wf_signals
WHERE (:instance_id IS NULL OR instance_id = :instance_id)
ORDER BY id DESC LIMIT :limit;

-- name: signal_counts
SELECT state, count(*) AS n FROM wf_signals
WHERE (:instance_id IS NULL OR instance_id = :instance_id)
GROUP BY state;
-- name: wake_parent
UPDATE wf_tasks SET due_at = :now
WHERE lease_owner IS NULL
  AND (instance_id, slot) IN (SELECT parent_id, parent_node FROM wf_instances
                             WHERE id = :id AND parent_node IS NOT NULL);

-- name: children
SELECT * FROM wf_instances WHERE parent_id = :id ORDER BY created_at;

-- DAG instances (kind = 'dag'): one task per dispatched node, slot = node id. --------

-- name: dag_create
-- A script (one transaction), as PostgreSQL's statement of the same name: the instance
-- unless its idempotency key is known (the same id and key again inserts nothing), then -
-- only if that row went in - its events (:events, a JSON array), its run row, its first
-- node task. changes() is the previous statement's count: the events are gated on the
-- instance's insert, the run on the row being a DAG's with no run yet (only a DAG instance
-- created by this very script has none: the two go in together), the task on the run's
-- insert, the returned id on the task's. Returns the id when created.
INSERT INTO wf_instances (id, type, kind, status, input, idempotency_key, priority,
                          parent_id, created_at, updated_at, trace_context)
VALUES (:id, :type, 'dag', 'RUNNING', :input, :key, :priority, :parent_id, :now, :now, :trace)
ON CONFLICT (idempotency_key) DO NOTHING;
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT :id, value ->> '$.node', value ->> '$.event_type', value ->> '$.attempt',
       value -> '$.payload',
       CASE WHEN json_type(value, '$.error') = 'null' THEN NULL ELSE value -> '$.error' END,
       NULL, :now
FROM json_each(:events) WHERE changes() = 1 ORDER BY key;
INSERT INTO wf_dag_runs (instance_id, name, version, test)
SELECT id, :name, :version, :test FROM wf_instances
WHERE id = :id AND kind = 'dag'
  AND NOT EXISTS (SELECT 1 FROM wf_dag_runs WHERE instance_id = :id);
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                      created_at)
SELECT id, :start, :start, 'dag', type, priority, :now + :delay, 0, :now
FROM wf_instances WHERE id = :id AND changes() = 1;
SELECT :id AS id WHERE changes() = 1;

-- name: dag_claim
-- A script (one transaction), as PostgreSQL's statement of the same name: lease and intent
-- in one commit. The due node tasks of :types (a JSON array), :limit of them, are leased
-- under :token - fresh for every claim, so it names exactly the rows this claim took, and
-- a later heartbeat or hand-back by that token touches only them (the lease fencing) -
-- with the node's next try; then each one's NODE_STARTED (once: a duplicate is ignored);
-- then the leased rows, and whether another node task is due (to wake one more worker).
-- Among tasks of one priority, those of an instance no runner holds a lease on come first:
-- each commit on an instance is a CAS on its version, and a runner in another process
-- commits on a view its own commits did not update, so several processes' workers on one
-- fan-out lost about two CASes per node (a read and a commit again each). The pick ranks
-- the first :limit + 128 tasks down the index, and adds the first :limit further down (at
-- most 1,024) of instances nobody holds: ten fan-outs of a hundred branches showed a
-- window of 129 only two instances, and four processes' workers converged on those
-- (bench/README.md, "Session 47"). The walk stops at its first idle instance; with every
-- instance held, a claim reads 1,024 index entries (about 0.5 ms). The held instances are
-- read once (an IN list off wf_tasks_leased): probed per candidate, a claim cost 1.5 ms
-- with 300 leases held (bench/README.md, "DAG claims: an idle instance first").
UPDATE wf_tasks
SET lease_owner = :worker, lease_token = :token, due_at = :now + :lease,
    attempt = attempt + 1, in_flight = 1
WHERE id IN (WITH held AS (SELECT s.instance_id
                            FROM wf_tasks AS s INDEXED BY wf_tasks_leased
                            WHERE s.lease_owner IS NOT NULL AND s.due_at > :now)
             SELECT t2.id FROM json_each(:types) AS j CROSS JOIN wf_tasks AS t2
             WHERE t2.id IN (  -- per type, as claim's pick: index walks, no sort
                 SELECT id FROM (SELECT w.id FROM wf_tasks AS w INDEXED BY wf_tasks_type_pick
                                 WHERE w.type = j.value AND w.due_at <= :now
                                   AND w.kind = 'dag'
                                 ORDER BY w.priority, w.due_at LIMIT :limit + 128)
                 UNION ALL  -- further down: the first of instances nobody holds
                 SELECT id FROM (SELECT f.id
                                 FROM (SELECT v.id, v.instance_id
                                       FROM wf_tasks AS v INDEXED BY wf_tasks_type_pick
                                       WHERE v.type = j.value AND v.due_at <= :now
                                         AND v.kind = 'dag'
                                       ORDER BY v.priority, v.due_at LIMIT 1024) AS f
                                 WHERE f.instance_id NOT IN held LIMIT :limit))
             ORDER BY t2.priority, t2.instance_id IN held, t2.due_at
             LIMIT :limit);
INSERT OR IGNORE INTO wf_events (instance_id, node, event_type, attempt, payload, worker,
                                 created_at)
SELECT instance_id, slot, 'NODE_STARTED', attempt, json_object('failures', failures), :worker,
       :now
FROM wf_tasks
-- The leased rows found through (type, due_at): their due time is the lease just set (one
-- expression, one value). By the token alone it was a walk of all of wf_tasks.
WHERE type IN (SELECT value FROM json_each(:types)) AND due_at = :now + :lease
  AND lease_token = :token
ORDER BY priority, id;
SELECT t.*, 1 AS leased,
       EXISTS (SELECT 1 FROM wf_tasks m
               WHERE m.due_at <= :now AND m.kind = 'dag'
                 AND m.type IN (SELECT value FROM json_each(:types))
                 AND m.lease_token IS NOT :token) AS more
FROM wf_tasks t
WHERE t.type IN (SELECT value FROM json_each(:types)) AND t.due_at = :now + :lease
  AND t.lease_token = :token
ORDER BY t.priority, t.id;

-- name: dag_record
INSERT OR IGNORE INTO wf_events (instance_id, node, event_type, attempt, payload, error,
                                 worker, created_at)
SELECT id, :node, :event_type, :attempt, :payload, :error, :worker, :now
FROM wf_instances
WHERE id = :id AND status <> 'COMPLETED' AND status <> 'FAILED' AND status <> 'CANCELLED';

-- name: dag_slots
SELECT slot FROM wf_tasks WHERE instance_id = :id ORDER BY slot;

-- name: dag_head
-- The CAS of a DAG commit (SqlStore.dag_apply names its pieces: dag_head, append_events,
-- apply_dead_letter when the decision has one, dag_tail): the version-checked instance
-- row, the first statement, so when it changes no row nothing after it runs.
UPDATE wf_instances
SET progress = coalesce(:progress, progress), error = coalesce(:error, error),
    version = version + 1, updated_at = :now
WHERE id = :id AND version = :version;
-- The status apart, only when the decision sets a new one (as apply_head).
-- only when :status
UPDATE wf_instances SET status = :status
WHERE :status IS NOT NULL AND id = :id AND status <> :status;

-- name: dag_head_relaxed
-- dag_head for a decision its blockers vouch for (DagCommit.blockers): on the decided
-- version, or on any later one of a running instance while the node's own task is still
-- there (nobody settled this run meanwhile) and one of the blockers' too
-- (dag_vouch.blockers says why that is enough). Under the writer lock these reads
-- are the file's latest state. Such a decision sets no status.
UPDATE wf_instances
SET version = version + 1, updated_at = :now
WHERE id = :id
  AND (version = :version
       OR (status = 'RUNNING'
           AND EXISTS (SELECT 1 FROM wf_tasks WHERE instance_id = :id AND slot = :done)
           AND EXISTS (SELECT 1 FROM wf_tasks
                       WHERE instance_id = :id
                         AND slot IN (SELECT value FROM json_each(:blockers)))));

-- name: dag_tail
-- The node tasks: every task (:finish) and the finished node's, apart so that the latter
-- goes down the slot key (an OR of the two scanned the instance's tasks), the retried node's
-- task - only while this worker still holds it (the lease fencing) - and the dispatched
-- node tasks (:dispatch, a JSON array). A node task already open hits the unique index:
-- a lost race.
-- only when :finish
DELETE FROM wf_tasks WHERE instance_id = :id AND :finish;
-- only when :done
DELETE FROM wf_tasks WHERE instance_id = :id AND slot = :done;
-- A group's (runtime/dag_group.py) other completed nodes, :also_done (a JSON array).
-- only when :also_n
DELETE FROM wf_tasks
WHERE :also_n > 0 AND instance_id = :id AND slot IN (SELECT value FROM json_each(:also_done));
-- The decision's events are the instance's newest (under the writer lock): the newest
-- seq before the siblings' NODE_STARTED, for the seqs the SELECT below returns. Its
-- lookup goes down an index, whatever the log's length (a search of the log for them was
-- linear in it, and a fan-out's branch commits quadratic in its width).
-- only when :sib_token
-- sets :ev_top
SELECT max(seq) FROM wf_events WHERE instance_id = :id;
-- only when :retry
UPDATE wf_tasks
SET due_at = :now + :retry_delay, failures = :retry_failures, in_flight = 0, lease_owner = NULL
WHERE instance_id = :id AND slot = :retry AND lease_owner = :worker;
-- With :sib_token (dag_apply_sibling): up to :sib_n other node tasks of this instance, due
-- now, taken as dag_claim takes them (before the dispatched tasks are added: not one of
-- those, as on PostgreSQL), each under its own token of :sib_tokens (the first is
-- :sib_token): one for each worker of a group, or a run of branches for one worker.
-- only when :sib_token
UPDATE wf_tasks
SET lease_owner = :worker, lease_token = json_extract(:sib_tokens, '$[' || (s.rn - 1) || ']'),
    due_at = :now + :lease, attempt = attempt + 1, in_flight = 1
FROM (SELECT id, row_number() OVER (ORDER BY priority, due_at, id) AS rn FROM wf_tasks
      WHERE :sib_token IS NOT NULL AND instance_id = :id AND kind = 'dag' AND due_at <= :now
      ORDER BY priority, due_at, id LIMIT :sib_n) AS s
WHERE wf_tasks.id = s.id;
-- only when :sib_token
INSERT OR IGNORE INTO wf_events (instance_id, node, event_type, attempt, payload, worker,
                                 created_at)
SELECT instance_id, slot, 'NODE_STARTED', attempt, json_object('failures', failures), :worker,
       :now
FROM wf_tasks
WHERE :sib_token IS NOT NULL AND instance_id = :id
  AND lease_token IN (SELECT value FROM json_each(:sib_tokens))
ORDER BY due_at, id;
-- With :token (dag_apply_take: one task, due now), the task is leased to the committing
-- worker as dag_claim leases it, its try counted; the decision's last event is its
-- NODE_STARTED.
-- only when :n_dispatch
INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                      created_at, lease_owner, lease_token, in_flight)
SELECT i.id, d.value ->> '$.node', d.value ->> '$.node', 'dag', i.type, i.priority,
       :now + CASE WHEN :token IS NULL THEN d.value ->> '$.delay' ELSE :lease END,
       (d.value ->> '$.attempt') + (:token IS NOT NULL), :now,
       CASE WHEN :token IS NOT NULL THEN :worker END, :token, :token IS NOT NULL
FROM wf_instances i, json_each(:dispatch) d WHERE i.id = :id ORDER BY d.key;
SELECT (SELECT version FROM wf_instances WHERE id = :id) AS version,
       (SELECT json_object('id', t.id, 'instance_id', t.instance_id, 'slot', t.slot,
                           'node', t.node, 'kind', t.kind, 'type', t.type,
                           'priority', t.priority, 'due_at', t.due_at, 'attempt', t.attempt,
                           'in_flight', t.in_flight, 'failures', t.failures,
                           'lease_owner', t.lease_owner, 'lease_token', t.lease_token)
        FROM wf_tasks t WHERE coalesce(:token, :sib_token) IS NOT NULL AND t.instance_id = :id
                              AND t.lease_token = coalesce(:token, :sib_token)) AS taken,
       (SELECT json_group_array(json_object(
                   'id', t.id, 'instance_id', t.instance_id, 'slot', t.slot,
                   'node', t.node, 'kind', t.kind, 'type', t.type,
                   'priority', t.priority, 'due_at', t.due_at, 'attempt', t.attempt,
                   'in_flight', t.in_flight, 'failures', t.failures,
                   'lease_owner', t.lease_owner, 'lease_token', t.lease_token))
        FROM wf_tasks t WHERE :sib_n > 1 AND t.instance_id = :id
                              AND t.lease_token IN (SELECT value FROM json_each(:sib_tokens))
                              AND t.lease_token <> :sib_token) AS more_taken,
       -- The seqs of the decision's :n_events events, for the committer to fold them into
       -- its cached view (SqlStore.dag_commit): under the writer lock they are the
       -- instance's newest, but for the siblings' NODE_STARTED, written after them
       -- (:ev_top, probed before those).
       (SELECT json_group_array(seq) FROM (
            SELECT seq FROM wf_events
            WHERE instance_id = :id AND (:ev_top IS NULL OR seq <= :ev_top)
            ORDER BY seq DESC LIMIT :n_events)) AS seqs;

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

-- The inbox: type registry, dead-letter redrive, soft delete, retention. -------------

-- name: register_type
INSERT INTO wf_types (type, registered_by, updated_at) VALUES (:type, :by, :now)
ON CONFLICT (type) DO UPDATE SET registered_by = excluded.registered_by,
                                 updated_at = excluded.updated_at;

-- name: registered_types
SELECT type FROM wf_types ORDER BY type;

-- name: register_dag_type
INSERT INTO wf_dag_types (type, registered_by, updated_at) VALUES (:type, :by, :now)
ON CONFLICT (type) DO UPDATE SET registered_by = excluded.registered_by,
                                 updated_at = excluded.updated_at;

-- name: registered_dag_types
SELECT type FROM wf_dag_types ORDER BY type;

-- name: dead_letter_get
SELECT * FROM wf_dead_letters WHERE id = :id;

-- name: mark_redriven
UPDATE wf_dead_letters
SET redriven_at = :now, redriven_by = :by, redrive_instance_id = :instance_id
WHERE id = :id AND redriven_at IS NULL;

-- name: soft_delete
-- A script (one transaction): the mark, and its event only if this UPDATE made it
-- (changes() is the row count of the statement before). Returns the id when deleted.
UPDATE wf_instances SET deleted_at = :now
WHERE id = :id AND deleted_at IS NULL
  AND (status = 'COMPLETED' OR status = 'FAILED' OR status = 'CANCELLED');
INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker, created_at)
SELECT :id, NULL, 'WORKFLOW_DELETED', NULL, '{}', NULL, NULL, :now WHERE changes() = 1
RETURNING instance_id AS id;

-- name: purge_batch
-- One writer at a time (BEGIN IMMEDIATE): the status checked here is the one deleted.
-- Events, tasks and DAG runs go by cascade.
DELETE FROM wf_instances
WHERE id IN (SELECT id FROM wf_instances
             WHERE (status = 'COMPLETED' OR status = 'FAILED' OR status = 'CANCELLED')
               AND created_at < :now - :age AND updated_at < :now - :age
             ORDER BY created_at LIMIT :batch)
RETURNING id;

-- name: soft_purge_batch
UPDATE wf_instances SET deleted_at = :now
WHERE id IN (SELECT id FROM wf_instances
             WHERE (status = 'COMPLETED' OR status = 'FAILED' OR status = 'CANCELLED')
               AND deleted_at IS NULL
               AND created_at < :now - :age AND updated_at < :now - :age
             ORDER BY created_at LIMIT :batch)
RETURNING id;

-- name: migrations_create_table
-- The migrations' own bookkeeping (SqlBase._migrate_on): one row per applied migration.
CREATE TABLE IF NOT EXISTS wf_schema_migrations
(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);

-- name: migrations_applied
SELECT version FROM wf_schema_migrations;

-- name: migration_record
INSERT INTO wf_schema_migrations VALUES (:version, :now);

-- name: set_setting
INSERT INTO wf_settings (name, value, updated_at) VALUES (:name, :value, :now)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
WHERE wf_settings.value IS NOT excluded.value;

-- name: get_setting
SELECT value FROM wf_settings WHERE name = :name;

-- name: purge_dead_letters_batch
-- Every letter older than the age goes, redriven or not (docs/architecture.md).
DELETE FROM wf_dead_letters
WHERE id IN (SELECT id FROM wf_dead_letters WHERE created_at < :now - :age
             ORDER BY created_at LIMIT :batch)
RETURNING id;

-- name: page_instances
-- The dashboard's keyset page, newest first: rows strictly older than the row :after (by
-- created_at, then id; the first page when :after is NULL), one range of
-- wf_instances_recent. :status a JSON array (ignored when :any_status); :pattern a LIKE
-- prefix; :since/:until created_at bounds (NULL: open).
SELECT * FROM wf_instances
WHERE (created_at, id) < (coalesce((SELECT created_at FROM wf_instances WHERE id = :after),
                                   CASE WHEN :after IS NULL THEN 1e300 END),
                          coalesce(:after, ''))
  AND created_at >= coalesce(:since, -1e300)
  AND created_at < coalesce(:until, 1e300)
  AND (:any_status OR status IN (SELECT value FROM json_each(:status)))
  AND (:pattern IS NULL OR type LIKE :pattern ESCAPE '\')
  AND (:deleted OR deleted_at IS NULL)
ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: find_instances
-- The instance with the id :ident or the idempotency key :ident (the primary key and the
-- key's unique index; at most two rows).
SELECT * FROM wf_instances WHERE id = :ident AND (:deleted OR deleted_at IS NULL)
UNION
SELECT * FROM wf_instances WHERE idempotency_key = :ident AND (:deleted OR deleted_at IS NULL)
ORDER BY created_at DESC, id DESC;

-- name: status_counts
SELECT status, count(*) AS n FROM wf_instances WHERE deleted_at IS NULL GROUP BY status;

-- name: queue_depth
-- Per task type and kind: tasks due (ready to claim), leased, and due later.
SELECT type, kind,
       sum(CASE WHEN due_at <= :now THEN 1 ELSE 0 END) AS ready,
       sum(CASE WHEN lease_owner IS NOT NULL AND due_at > :now THEN 1 ELSE 0 END) AS leased,
       sum(CASE WHEN lease_owner IS NULL AND due_at > :now THEN 1 ELSE 0 END) AS later
FROM wf_tasks GROUP BY type, kind ORDER BY type, kind;

-- name: workers
-- Every worker that holds a lease that has not run out: how many, the latest moment its
-- leases run to, and the last heartbeat logged (heartbeat_at; NULL until one is).
SELECT lease_owner AS worker, count(*) AS leases, max(due_at) AS lease_until,
       max(heartbeat_at) AS heartbeat_at
FROM wf_tasks WHERE lease_owner IS NOT NULL AND due_at > :now
GROUP BY lease_owner ORDER BY lease_owner;

-- name: throughput
-- Instances created since :since, per :bucket seconds of their creation (a range of
-- wf_instances_recent), and of those how many have finished, per bucket of their finish.
SELECT CAST(created_at / :bucket AS INTEGER) * :bucket AS at, 'started' AS what, count(*) AS n
FROM wf_instances WHERE created_at >= :since GROUP BY 1
UNION ALL
SELECT CAST(updated_at / :bucket AS INTEGER) * :bucket AS at, 'finished' AS what, count(*) AS n
FROM wf_instances
WHERE created_at >= :since
  AND (status = 'COMPLETED' OR status = 'FAILED' OR status = 'CANCELLED')
GROUP BY 1 ORDER BY 1;

-- name: dead_letter_counts
SELECT count(*) AS total, count(*) - count(redriven_at) AS waiting FROM wf_dead_letters;
