-- Named queries for the PostgreSQL store. One statement per decision: the CTEs below
-- write the instance (version-checked), the events and the task in one round trip.
-- Parameters are %(name)s; nothing is formatted into SQL.
--
-- The store's connections run with enable_seqscan = off: a statement's plan is made once
-- per connection and kept, and one made while a table was small (a fresh schema, a quiet
-- hour) read the whole table on every call once it had grown, until autovacuum's next
-- ANALYZE. A query marked "-- plan: scans" (the operator's counts and listings,
-- retention) runs with sequential scans allowed, in a transaction of its own.
--
-- With scans priced out, such a plan could still walk a whole index: a task joined to the
-- statement's own `inst` (`... FROM inst WHERE t.instance_id = inst.id AND t.slot = ''`)
-- was planned on a small table as the (instance_id, slot) index read end to end, outer to
-- `inst`'s one row. So each of those also names its rows by `t.instance_id =
-- ANY(ARRAY(SELECT id FROM inst))`, which only the key lookup can use (an array made once
-- a statement; the join is unchanged).

-- name: create
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority,
                              parent_id, parent_node, trace_context)
    VALUES (%(id)s, %(type)s, %(kind)s, 'PENDING', nullif(%(step)s, ''), %(input)s, %(key)s,
            %(priority)s, %(parent_id)s, %(parent_node)s, %(trace)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, type
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, payload)
    SELECT id, 'WORKFLOW_CREATED', %(created)s FROM ins
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
    SELECT id, '', %(step)s, %(kind)s, type, %(priority)s,
           coalesce(to_timestamp(%(run_at)s::float8), now() + %(delay)s * interval '1 second')
    FROM ins
)
-- Not told when a worker of the starting process takes it (stores/_decisions.py, _start).
SELECT id, CASE WHEN %(notify)s THEN pg_notify(%(channel)s, type) END FROM ins;

-- name: create_leased
-- `create` for a start kept in its process for a worker asleep that claims its type
-- (stores/_decisions.py, _start): the task is leased to that worker and its first step
-- started in this commit, as `claim` would: the instance RUNNING at its first attempt,
-- STEP_STARTED after WORKFLOW_CREATED, the task in flight under a fresh token, due when
-- the lease runs out. The row is the task's, with the instance (as `claim`'s), which the
-- worker runs without a claim. Nobody is notified.
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, step_attempts, attempts, input,
                              idempotency_key, priority, parent_id, parent_node,
                              trace_context)
    VALUES (%(id)s, %(type)s, %(kind)s, 'RUNNING', %(step)s, 1,
            jsonb_build_object(%(step)s::text, 1), %(input)s, %(key)s, %(priority)s,
            %(parent_id)s, %(parent_node)s, %(trace)s)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT ins.id, e.node, e.event_type, e.attempt, e.payload, e.worker
    FROM ins CROSS JOIN (VALUES (0, NULL::text, 'WORKFLOW_CREATED', NULL::integer,
                                 %(created)s::jsonb, NULL::text),
                                (1, %(step)s::text, 'STEP_STARTED', 1, '{}'::jsonb,
                                 %(worker)s::text))
                        AS e(ord, node, event_type, attempt, payload, worker)
    ORDER BY e.ord  -- the log's order: created, then started
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, lease_owner,
                          lease_token, attempt, in_flight)
    SELECT id, '', %(step)s, %(kind)s, type, %(priority)s,
           now() + %(lease)s * interval '1 second', %(worker)s, %(token)s, 1, true
    FROM ins
    RETURNING *
)
SELECT task.*, true AS leased, to_jsonb(ins) AS instance FROM ins CROSS JOIN task;

-- name: create_offered
-- `create` for a start due now that no worker of this process takes (stores/_decisions.py,
-- _start): leased, as create_leased leases it, to a runner of another process with a
-- worker asleep (wf_idle_runners, migration 023), whose process alone is told (its
-- `channel`, the instance's id; stores/_pgoffer.py); with no such runner, `create` as
-- it is, told to every process. The runner taken has the most workers asleep; one whose
-- row another start holds is passed over (SKIP LOCKED: starts never queue on it), and so
-- is one whose process is gone (its advisory lock free). `lessee` is read three times
-- and made once: one token.
WITH host AS (
    SELECT r.incarnation, r.worker, r.lease, r.channel
    FROM wf_idle_runners r
    WHERE r.sleeping > 0 AND %(type)s::text = ANY(r.types) AND %(step)s::text <> ''
      AND NOT pg_try_advisory_xact_lock_shared(r.lock_key)
    ORDER BY r.sleeping DESC
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
), lessee AS (
    -- `/o`: a token no heartbeat extends until the runner's process has heard the start
    -- (`offered` gives the task a token of the runner's own then): a notification lost
    -- with a LISTEN connection leaves a lease that runs out, as a dead runner's does.
    SELECT h.*, h.incarnation || '/o' || replace(gen_random_uuid()::text, '-', '') AS token
    FROM host h
), ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, step_attempts, attempts, input,
                              idempotency_key, priority, parent_id, parent_node,
                              trace_context)
    SELECT %(id)s::uuid, %(type)s::text, %(kind)s::text,
           CASE WHEN l.worker IS NULL THEN 'PENDING' ELSE 'RUNNING' END,
           nullif(%(step)s::text, ''), CASE WHEN l.worker IS NULL THEN 0 ELSE 1 END,
           CASE WHEN l.worker IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object(%(step)s::text, 1) END,
           %(input)s::jsonb, %(key)s::text, %(priority)s::integer, %(parent_id)s::uuid,
           %(parent_node)s::text, %(trace)s::text
    FROM (SELECT 1) AS one LEFT JOIN lessee l ON true
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, type
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT ins.id, e.node, e.event_type, e.attempt, e.payload, e.worker
    FROM ins CROSS JOIN (
        SELECT 0 AS ord, NULL::text AS node, 'WORKFLOW_CREATED' AS event_type,
               NULL::integer AS attempt, %(created)s::jsonb AS payload, NULL::text AS worker
        UNION ALL
        SELECT 1, %(step)s::text, 'STEP_STARTED', 1, '{}'::jsonb, l.worker FROM lessee l
    ) AS e
    ORDER BY e.ord  -- the log's order: created, then started
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, lease_owner,
                          lease_token, attempt, in_flight)
    SELECT ins.id, '', %(step)s::text, %(kind)s::text, ins.type, %(priority)s::integer,
           CASE WHEN l.worker IS NULL
                THEN coalesce(to_timestamp(%(run_at)s::float8),
                              now() + %(delay)s::float8 * interval '1 second')
                ELSE now() + l.lease * interval '1 second' END,
           l.worker, l.token, CASE WHEN l.worker IS NULL THEN 0 ELSE 1 END,
           l.worker IS NOT NULL
    FROM ins LEFT JOIN lessee l ON true
), counted AS (
    -- One worker asleep fewer, until the runner's process writes its own count again.
    UPDATE wf_idle_runners r SET sleeping = r.sleeping - 1, updated_at = now()
    FROM lessee l WHERE r.incarnation = l.incarnation AND EXISTS (SELECT 1 FROM ins)
)
SELECT ins.id,
       CASE WHEN l.worker IS NOT NULL THEN pg_notify(l.channel, ins.id::text)
            WHEN %(notify)s THEN pg_notify(%(channel)s, ins.type) END AS notified,
       l.incarnation AS offered
FROM ins LEFT JOIN lessee l ON true;

-- name: idle_sync
-- This process's runners and how many workers of each sleep now (stores/_pgoffer.py):
-- each row written whole, a start's count taken off it overwritten. Committed without
-- waiting for the flush (a hint: after a crash of the server the process writes it
-- again), and the rows of runners whose process is gone (their lock free) deleted
-- when `sweep` (the process's first write, and after its LISTEN connection came back).
WITH quick AS (
    SELECT set_config('synchronous_commit', 'off', true) AS was
), gone AS (
    -- `sleeping >= 0` (every row): a walk of wf_idle_runners_sleeping, not a scan.
    DELETE FROM wf_idle_runners r
    WHERE %(sweep)s AND r.sleeping >= 0 AND r.lock_key <> %(lock_key)s
      AND pg_try_advisory_xact_lock_shared(r.lock_key)
), up AS (
    INSERT INTO wf_idle_runners (incarnation, worker, lease, types, channel, lock_key,
                                 sleeping)
    SELECT b.incarnation, b.worker, b.lease, ARRAY(SELECT jsonb_array_elements_text(b.types)),
           %(channel)s, %(lock_key)s, b.sleeping
    FROM quick, jsonb_to_recordset(%(batch)s::jsonb)
         AS b (incarnation text, worker text, lease float8, types jsonb, sleeping integer)
    ON CONFLICT (incarnation) DO UPDATE
    SET worker = excluded.worker, lease = excluded.lease, types = excluded.types,
        channel = excluded.channel, lock_key = excluded.lock_key,
        sleeping = excluded.sleeping, updated_at = now()
    RETURNING incarnation
)
SELECT count(*) AS written FROM up;

-- name: idle_retire
-- A runner that stops, or the whole process's (%(incarnation)s NULL): no start leases to
-- them from this commit on. A start that took the row before waits for it: its
-- notification goes out first, and the marker after it tells the process it has heard
-- every start leased to them (stores/_pgoffer.py, retire).
WITH gone AS (
    DELETE FROM wf_idle_runners
    WHERE lock_key = %(lock_key)s
      AND (%(incarnation)s::text IS NULL OR incarnation = %(incarnation)s::text)
)
SELECT pg_notify(%(channel)s, %(marker)s::text);

-- name: offered
-- The task a start leased to a runner of this process (create_offered), heard: from now
-- on its runner's heartbeat extends the lease, so its `/o` token (which no heartbeat
-- extends) becomes one of the runner's own. With its instance, as a claim returns it;
-- no row when the lease ran out meanwhile and somebody took the task over. Committed
-- without waiting for the flush: the token is lost only with the server, and with it
-- every lease a heartbeat could not extend meanwhile.
WITH quick AS (
    SELECT set_config('synchronous_commit', 'off', true) AS was
), heard AS (
    UPDATE wf_tasks t
    SET lease_token = split_part(t.lease_token, '/', 1) || '/'
                      || replace(gen_random_uuid()::text, '-', '')
    FROM quick
    WHERE t.instance_id = %(id)s::uuid AND t.slot = '' AND t.lease_owner IS NOT NULL
      AND t.due_at > now() AND strpos(t.lease_token, '/o') > 0
    RETURNING t.*
)
SELECT heard.*, true AS leased, to_jsonb(i) AS instance
FROM heard JOIN wf_instances i ON i.id = heard.instance_id;

-- name: create_many
-- A batch of `create` in one statement: one row per position of the arrays. A known
-- idempotency key (or one repeated in the batch) yields the existing (or first) id and
-- inserts nothing; a key that already started another type refuses the whole batch
-- (`clash`, nothing inserted). The snapshot does not see rows this statement inserts,
-- so a repeated key is matched to its first occurrence through `ins`.
WITH rows AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(types)s::text[], %(kinds)s::text[], %(steps)s::text[],
                %(inputs)s::jsonb[], %(keys)s::text[], %(priorities)s::integer[],
                %(parent_ids)s::uuid[], %(parent_nodes)s::text[], %(delays)s::float8[],
                %(run_ats)s::float8[], %(traces)s::text[])
         WITH ORDINALITY
         AS r(id, type, kind, step, input, key, priority, parent_id, parent_node, delay,
              run_at, trace, pos)
), existing AS (
    SELECT r.pos, i.id, i.type, i.type <> r.type AS clash
    FROM rows r JOIN wf_instances i ON i.idempotency_key = r.key
), ins AS (
    INSERT INTO wf_instances (id, type, kind, status, step, input, idempotency_key, priority,
                              parent_id, parent_node, trace_context)
    SELECT id, type, kind, 'PENDING', nullif(step, ''), input, key, priority, parent_id,
           parent_node, trace
    FROM rows
    WHERE NOT EXISTS (SELECT 1 FROM existing WHERE clash)
    ORDER BY key, pos  -- one key order for every producer: overlapping batches can't deadlock
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id, type, idempotency_key AS key
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, payload)
    SELECT r.id, 'WORKFLOW_CREATED',
           jsonb_build_object('input', r.input, 'initial', nullif(r.step, ''))
    FROM rows r JOIN ins ON ins.id = r.id
), task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at)
    SELECT r.id, '', r.step, r.kind, r.type, r.priority,
           coalesce(to_timestamp(r.run_at), now() + r.delay * interval '1 second')
    FROM rows r JOIN ins ON ins.id = r.id
)
SELECT r.pos,
       coalesce(mine.id, e.id, first.id) AS id,
       mine.id IS NOT NULL AS created,
       e.type AS existing_type,
       coalesce(e.clash, false) AS clash,
       CASE WHEN mine.id IS NOT NULL THEN pg_notify(%(channel)s, r.type) END AS notified
FROM rows r
LEFT JOIN ins mine ON mine.id = r.id
LEFT JOIN existing e ON e.pos = r.pos
LEFT JOIN ins first ON first.key = r.key AND mine.id IS NULL
ORDER BY r.pos;

-- name: instance_by_key
SELECT id FROM wf_instances WHERE idempotency_key = %(key)s;

-- name: get_instance
SELECT * FROM wf_instances WHERE id = %(id)s;

-- name: get_task
SELECT *, (lease_owner IS NOT NULL AND due_at > now()) AS leased
FROM wf_tasks WHERE instance_id = %(id)s AND slot = %(slot)s;

-- name: events
SELECT * FROM wf_events WHERE instance_id = %(id)s AND seq > %(after)s ORDER BY seq;

-- name: apply_head
WITH inst AS (
    UPDATE wf_instances
    SET status = %(status)s, step = %(step)s, step_attempts = %(step_attempts)s,
        attempts = %(attempts)s, progress = %(progress)s, error = %(error)s,
        cancel_requested = %(cancel_requested)s, waits = %(waits)s,
        waiting_key = %(waiting_key)s, waiting_kind = %(waiting_kind)s,
        waiting_token = %(waiting_token)s,
        waiting_until = to_timestamp(%(waiting_until)s::float8),
        version = version + 1, updated_at = now()
    WHERE id = %(id)s AND version = %(version)s
    -- watched: read from the row as this statement updates it, which is the latest one
    -- (a watcher's registration updates the row too, so the two are ordered by its lock).
    RETURNING id, version, type, kind, priority, parent_id, parent_node, watched
)

-- name: append_events
-- The events (a JSON array), in order. A duplicate once-per-attempt event hits the unique
-- index: somebody else already wrote this decision (a lost race, as a lost CAS).
, ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker)
    SELECT inst.id, e.node, e.event_type, e.attempt, coalesce(e.payload, '{}'), e.error,
           %(worker)s
    FROM inst,
         ROWS FROM (jsonb_to_recordset(%(events)s::jsonb)
                    AS (node text, event_type text, attempt int, payload jsonb, error jsonb))
         WITH ORDINALITY AS e (node, event_type, attempt, payload, error, ord)
    ORDER BY e.ord
    RETURNING seq  -- taken row by row in that order: a DAG commit returns them (dag_tail)
), live AS (
    -- Live updates (migration 021): a statement that grows the log of an instance somebody
    -- watches sends one pg_notify on the schema's live channel, '<instance id> <highest
    -- seq>' (what migration 008's trigger sent, for every statement). `watched` is
    -- the instance row's flag, which live_watch sets; nothing is sent for an instance
    -- nobody watches (a NOTIFY serialises commits). The statement's last SELECT reads
    -- this CTE, or it would not run; dag_tail reads dag_live instead, which also counts
    -- the sibling it takes.
    SELECT pg_notify(%(live)s, inst.id::text || ' ' || (SELECT max(seq) FROM ev)::text)
               AS sent
    FROM inst
    WHERE inst.watched AND EXISTS (SELECT 1 FROM ev)
)

-- name: apply_dead_letter
-- Spliced between apply_head and its tail when the decision dead-letters the instance:
-- the envelope is what started it (read from the row as it was before this statement).
, dead AS (
    INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
    SELECT i.id,
           jsonb_build_object('instance_id', i.id, 'type', i.type, 'kind', i.kind,
                              'input', i.input, 'idempotency_key', i.idempotency_key,
                              'priority', i.priority, 'step', %(step)s::text, 'status', %(status)s::text,
                              'error', %(error)s::jsonb),
           %(dead_letter)s, %(worker)s
    FROM wf_instances i JOIN inst ON inst.id = i.id
)

-- name: apply_continue
-- The lease is renewed only once half of it is used (the heartbeat renews it too, every
-- third of it). A lease moved on every step changed due_at, which two of wf_tasks' five
-- indexes hold, so every step's task update wrote an entry into all five; with due_at
-- and the other indexed columns unchanged, PostgreSQL updates the row in place (HOT).
, task AS (
    UPDATE wf_tasks t
    SET node = %(node)s, attempt = %(attempt)s, in_flight = true, failures = %(failures)s,
        lease_owner = %(worker)s,
        due_at = CASE WHEN t.due_at < now() + %(lease)s * interval '0.5 second'
                      THEN now() + %(lease)s * interval '1 second' ELSE t.due_at END
    FROM inst WHERE t.instance_id = inst.id AND t.slot = ''
      AND t.instance_id = ANY(ARRAY(SELECT id FROM inst))
)
SELECT version, (SELECT count(*) FROM live) AS live FROM inst;

-- name: group_head
-- Several decisions in one statement: the group commit of a runner's worker threads
-- (stores/_group.py, stores/_pggroup.py; docs/architecture.md, "Group commit on
-- PostgreSQL"). Each decision is what apply_head writes for it alone, and each keeps its
-- own CAS: a decision whose version moved matches no row in `inst`, so nothing of it is
-- written, and the others commit. The batch never holds one instance twice (the group
-- takes one decision an instance). Followed by group_events and group_live, then
-- group_continue, or apply_finish and the claim.
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS b (
        id uuid, version integer, status text, step text, step_attempts integer,
        attempts jsonb, progress jsonb, error jsonb, cancel_requested boolean, waits jsonb,
        waiting_key text, waiting_kind text, waiting_token text, waiting_until float8,
        node text, attempt integer, failures integer, events jsonb, worker text,
        lease float8)
), inst AS (
    UPDATE wf_instances i
    SET status = b.status, step = b.step, step_attempts = b.step_attempts,
        attempts = b.attempts, progress = b.progress, error = b.error,
        cancel_requested = b.cancel_requested, waits = b.waits,
        waiting_key = b.waiting_key, waiting_kind = b.waiting_kind,
        waiting_token = b.waiting_token, waiting_until = to_timestamp(b.waiting_until),
        version = i.version + 1, updated_at = now()
    FROM b
    -- `ids` (the batch's ids again, as an array) reaches the rows down the primary key:
    -- jsonb_to_recordset is estimated at 100 rows, and joined to the table alone, the
    -- plan made on a table of a few thousand rows hashed all of them (800 buffers a call).
    WHERE i.id = ANY(%(ids)s::uuid[]) AND i.id = b.id AND i.version = b.version
    -- watched: read from the row as this statement updates it (see apply_head).
    RETURNING i.id, i.version, i.parent_id, i.parent_node, i.watched, b.events, b.worker,
              b.node, b.attempt, b.failures, b.lease
)

-- name: group_events
-- Each decision's events in its order (append_events), for the rows of `inst`; a duplicate
-- once-per-attempt event fails the whole statement, and the store then commits each
-- decision alone. group_live, which notifies the watchers, follows.
, ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker)
    SELECT inst.id, e.node, e.event_type, e.attempt, coalesce(e.payload, '{}'), e.error,
           inst.worker
    FROM inst,
         ROWS FROM (jsonb_to_recordset(inst.events)
                    AS (node text, event_type text, attempt int, payload jsonb, error jsonb))
         WITH ORDINALITY AS e (node, event_type, attempt, payload, error, ord)
    ORDER BY inst.id, e.ord
    RETURNING instance_id, seq
)

-- name: group_live
-- One notification a watched instance, its highest seq (append_events' `live`).
, live AS (
    SELECT pg_notify(%(live)s, inst.id::text || ' ' || max(ev.seq)::text) AS sent
    FROM inst JOIN ev ON ev.instance_id = inst.id
    WHERE inst.watched
    GROUP BY inst.id
)

-- name: group_continue
-- apply_continue's lease rule, each Continue with its own worker and lease; a decision
-- that keeps its task as it is (a progress save: apply_keep) has no node, and its task is
-- not touched.
, task AS (
    UPDATE wf_tasks t
    SET node = inst.node, attempt = inst.attempt, in_flight = true,
        failures = inst.failures, lease_owner = inst.worker,
        due_at = CASE WHEN t.due_at < now() + inst.lease * interval '0.5 second'
                      THEN now() + inst.lease * interval '1 second' ELSE t.due_at END
    FROM inst WHERE t.instance_id = inst.id AND t.slot = ''
      AND t.instance_id = ANY(ARRAY(SELECT id FROM inst)) AND inst.node IS NOT NULL
)
SELECT id, version, (SELECT count(*) FROM live) AS live FROM inst;

-- name: apply_reschedule
, task AS (
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                          failures, in_flight)
    SELECT inst.id, '', %(node)s, inst.kind, inst.type, inst.priority,
           now() + %(delay)s * interval '1 second', %(attempt)s, %(failures)s, %(in_doubt)s
    FROM inst
    ON CONFLICT (instance_id, slot) DO UPDATE
    -- in_flight stays set for a step still in doubt (decide.Reschedule.in_doubt)
    SET node = excluded.node, due_at = excluded.due_at, in_flight = excluded.in_flight,
        failures = excluded.failures, lease_owner = NULL
)
-- Told to every process, unless the committing worker claims next itself (%(tell)s false:
-- a streak's end, decide.Reschedule.tell).
SELECT version, CASE WHEN %(tell)s THEN pg_notify(%(channel)s, type) END,
       (SELECT count(*) FROM live) AS live
FROM inst;

-- name: apply_finish
-- Also the tail of a group of finishes (stores/_pggroup.py: after group_head, with no
-- signals settled and the group's one worker): every CTE here reads `inst` as a set.
, task AS (
    DELETE FROM wf_tasks t USING inst WHERE t.instance_id = inst.id AND t.slot = ''
      AND t.instance_id = ANY(ARRAY(SELECT id FROM inst))
), ends AS (
    -- What the instances that end here leave to others (pending signals, locks and lock
    -- queues, a parent's waiting node) is swf_finish_rest's (migration 025), called only
    -- when one of them has some. Here, its sixty-odd plan nodes were set up on every
    -- finish, as a generic plan sets up every node it holds, run or not (bench/README.md,
    -- "Session 58"). The probes read the statement's snapshot, as the CTEs did: a signal
    -- or a lock queued by a commit that this statement does not see is the next one's.
    SELECT swf_finish_rest(ARRAY(SELECT id FROM inst), %(settled)s::jsonb, %(worker)s)
               AS made_due
    WHERE EXISTS (SELECT 1 FROM inst WHERE inst.parent_id IS NOT NULL)
       OR EXISTS (SELECT 1 FROM inst JOIN wf_signals s
                  ON s.instance_id = inst.id AND s.state = 'pending')
       OR EXISTS (SELECT 1 FROM inst JOIN wf_locks l ON l.holder = inst.id)
       OR EXISTS (SELECT 1 FROM inst JOIN wf_lock_waiters w ON w.instance_id = inst.id)
), done AS (
    -- Notify only when this commit made another task due: NOTIFY takes a database-wide
    -- lock held until the commit is flushed, so a notify on every finish serialises the
    -- commits of every runner (docs/architecture.md, "Waking up").
    --
    -- `done` is also what a claim made in this statement reads (_then_claim in
    -- _pgconn.py), a row an instance that ended here, each worth one claim (`slots`;
    -- `made_due` is the statement's): the instance that ended is never taken, nothing is on a lost CAS (no
    -- row), and nothing is when this commit made a task due (`made_due`): the statement's
    -- snapshot does not hold that task's new due time, and the claim that follows a
    -- finish takes the lock waiter the finish woke. The store then claims on its own.
    SELECT d.id, d.version, d.made_due, 1::bigint AS slots,
           CASE WHEN d.made_due THEN pg_notify(%(channel)s, 'finish') END AS notified
    FROM (SELECT inst.id, inst.version,
                 coalesce((SELECT bool_or(made_due) FROM ends), false) AS made_due
          FROM inst) AS d
)
SELECT version, notified, (SELECT count(*) FROM live) AS live FROM done;

-- name: apply_keep
SELECT version, (SELECT count(*) FROM live) AS live FROM inst;

-- name: apply_signals
-- The wf_signals side of a decision: settle the rows it read, dead-letter the rejected
-- ones, insert the wait's timer (a signal of kind 'timer' due at the deadline).
, sig AS (
    UPDATE wf_signals s SET state = o.state, settled_at = now()
    FROM inst, jsonb_to_recordset(%(settled)s::jsonb) AS o (id bigint, state text)
    WHERE s.id = o.id AND s.instance_id = inst.id AND s.state = 'pending'
), sig_dead AS (
    INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
    SELECT inst.id, d.envelope, d.reason, %(worker)s
    FROM inst, jsonb_to_recordset(%(dead)s::jsonb) AS d (envelope jsonb, reason text)
), timer AS (
    INSERT INTO wf_signals (instance_id, kind, name, token, due_at)
    SELECT inst.id, 'timer', 'timer', %(timer_token)s, to_timestamp(%(timer_due)s::float8)
    FROM inst WHERE %(timer_token)s::text IS NOT NULL
)

-- name: apply_park
-- The step waits: parked until its deadline (none: 100 years), or until a pending signal
-- that may concern the wait is due - one with a token, or an untokened one of its name -
-- other than those this commit settles.
, task AS (
    UPDATE wf_tasks t
    SET node = %(node)s, in_flight = false, failures = %(failures)s, lease_owner = NULL,
        due_at = least(
            coalesce(to_timestamp(%(until)s::float8), now() + interval '100 years'),
            (SELECT min(s.due_at) FROM wf_signals s
             WHERE s.instance_id = inst.id AND s.state = 'pending' AND s.kind = 'signal'
               AND (s.token IS NOT NULL OR s.name = %(wait_name)s)
               AND s.id NOT IN (SELECT (x ->> 'id')::bigint
                                FROM jsonb_array_elements(%(settled)s::jsonb) AS x)))
    FROM inst WHERE t.instance_id = inst.id AND t.slot = ''
      AND t.instance_id = ANY(ARRAY(SELECT id FROM inst))
)
SELECT version, pg_notify(%(channel)s, type), (SELECT count(*) FROM live) AS live FROM inst;

-- name: signal_insert
INSERT INTO wf_signals (instance_id, name, payload, token, due_at)
VALUES (%(instance_id)s, %(name)s, %(payload)s, %(token)s,
        now() + %(delay)s * interval '1 second')
RETURNING id;

-- name: signals_pending
SELECT * FROM wf_signals
WHERE instance_id = %(instance_id)s AND state = 'pending' AND due_at <= now()
ORDER BY due_at, id;

-- name: signals_list
-- plan: scans
SELECT * FROM wf_signals
WHERE (%(instance_id)s::uuid IS NULL OR instance_id = %(instance_id)s::uuid)
ORDER BY id DESC LIMIT %(limit)s;

-- name: signal_counts
-- plan: scans
SELECT state, count(*) AS n FROM wf_signals
WHERE (%(instance_id)s::uuid IS NULL OR instance_id = %(instance_id)s::uuid)
GROUP BY state;

-- name: claim
-- The due tasks of instances that hold a lock (a signer's slot) come first, then the rest
-- by priority and due time: a holder's recheck never queues behind the work its lock
-- keeps waiting (docs/architecture.md, "Locks"). `held` reads the small wf_locks table;
-- `rest` walks each type's due tasks down wf_tasks_type_pick in the claim's order and
-- stops a few rows past the limit (swf_pick, migration 015: the plan never falls back to
-- sorting every due task); a task in both counts once, and `picked` locks what is taken in that
-- order, skipping rows a racing claim holds and re-checking under the lock that each is
-- still due. The `+ 16` is the slack for those races: a claim whose candidates were all
-- taken by others comes back empty, and its runner, finding work due, claims again.
WITH done AS (
    -- What the finishes earlier in the same statement did (apply_finish's `done`, a row
    -- an instance that ended, each worth one claim): alone, the claim has one row that
    -- excludes nothing and is worth :limit claims.
    SELECT NULL::uuid AS id, NULL::integer AS version, false AS made_due,
           %(limit)s::bigint AS slots, NULL::text AS notified
), live AS (
    -- Likewise the finish's live notification (append_events): alone, none.
    SELECT NULL::void AS sent WHERE false
), held AS (
    -- From each holder to its task (LATERAL: never a walk of the due index probing
    -- wf_locks per task, which reads the whole due backlog; the EXPLAIN test holds it).
    -- By the whole unique key (a state machine's task is slot ''), so it is the one
    -- plan with or without statistics. Not locked here: `picked` locks what it takes.
    SELECT t.id, t.priority, t.due_at
    FROM (SELECT DISTINCT holder FROM wf_locks) AS l
    CROSS JOIN LATERAL (
        SELECT id, priority, due_at FROM wf_tasks
        WHERE instance_id = l.holder AND slot = ''
          AND due_at <= now() AND type = ANY(%(types)s) AND kind = 'machine'
        OFFSET 0  -- a fence: kept a per-holder lookup, never flattened into a join
    ) AS t
    ORDER BY t.priority, t.due_at
    LIMIT %(limit)s
), rest AS (
    -- State-machine tasks only: a DAG instance named after a hosted type is not ours.
    SELECT id, priority, due_at FROM swf_pick(%(types)s, 'machine', %(limit)s + 16)
    ORDER BY priority, due_at
    LIMIT %(limit)s + 16
), cand AS (
    SELECT id, min(rank) AS rank, min(priority) AS priority, min(due_at) AS due_at
    FROM (SELECT id, 0 AS rank, priority, due_at FROM held
          UNION ALL
          SELECT id, 1 AS rank, priority, due_at FROM rest) AS both_picks
    GROUP BY id
), ended AS (
    SELECT coalesce(array_agg(id) FILTER (WHERE id IS NOT NULL), '{}') AS ids,
           coalesce(bool_or(made_due), false) AS made_due,
           coalesce(sum(slots), 0) AS slots
    FROM done
), picked AS (
    -- The candidates in the claim's order, each fetched by its key and locked as it is
    -- reached, until :limit are taken: the LATERAL keeps it a key lookup per candidate
    -- (a join let the planner scan every task of a small table: 0.9 -> 0.5 ms a claim
    -- with 2,000 due), and the sorted, fenced subquery keeps the rows it locks to the
    -- ones it takes (sorted after the join, it locked all the candidates, starving the
    -- racing claims). The lock re-checks that each is still due.
    --
    -- The instance's row is locked before the task's, and a busy one is passed over: a
    -- commit locks its instance row first and its task row second, so a claim that held
    -- the task and waited for the instance (to bump its version, below) was the other half
    -- of a deadlock with the finish of a lease that ran out (PostgreSQL broke it after
    -- deadlock_timeout, with an error on one side). Passed over, the task stays due for
    -- the next claim (`more` says so). The DAG claim does the same (migration 018).
    --
    -- After finishes (`done`): never an instance that ended here, nothing at all when one
    -- of them made a task due, and one claim a finish whose CAS held (none after a lost
    -- CAS: no row in `done`, `slots` sums to 0).
    SELECT t.id
    FROM (SELECT * FROM cand ORDER BY rank, priority, due_at OFFSET 0) AS c
    CROSS JOIN ended
    CROSS JOIN LATERAL (
        SELECT w.id FROM wf_tasks w JOIN wf_instances i ON i.id = w.instance_id
        WHERE w.id = c.id AND w.due_at <= now()
          AND w.instance_id <> ALL (ended.ids) AND NOT ended.made_due
        FOR NO KEY UPDATE OF i SKIP LOCKED
        FOR UPDATE OF w SKIP LOCKED
    ) AS t
    ORDER BY c.rank, c.priority, c.due_at
    LIMIT (SELECT slots FROM ended)
), prev AS (
    -- `fast`: the step starts in this commit (decide.start's rule) unless the task is
    -- a DAG's, a run started from SQL (node '': the runner resolves its first step), in
    -- doubt (in_flight: the reconcile hook comes first), the instance has a cancel
    -- pending, has ended, or waits - except for a wait whose one due pending row is its
    -- own timer (`timer_id`): that is waits.deliver's simplest case, the timer fires and
    -- the step starts again, and this commit makes it (TIMER_FIRED, STEP_STARTED). Any
    -- other wait is resumed by the deliver commit of its signals, never started here.
    SELECT t.id AS task_id, t.node, i.id AS instance_id, i.version,
           coalesce((i.attempts ->> t.node)::int, 0) + 1 AS next_attempt,
           w.timer_id, i.waiting_key AS wait_key,
           CASE WHEN i.waiting_kind = 'signal' THEN 'timeout' ELSE 'slept' END AS outcome,
           (i.kind = 'machine' AND NOT t.in_flight AND NOT i.cancel_requested
            AND t.node <> '' AND i.status IN ('PENDING', 'RUNNING', 'STALLED')
            AND (i.waiting_key IS NULL OR w.timer_id IS NOT NULL)) AS fast
    FROM picked p
    JOIN wf_tasks t ON t.id = p.id
    JOIN wf_instances i ON i.id = t.instance_id
    CROSS JOIN LATERAL (
        SELECT CASE WHEN i.waiting_key IS NOT NULL AND t.node = i.step THEN
                   (SELECT CASE WHEN count(*) = 1
                                 AND bool_and(s.kind = 'timer' AND s.token = i.waiting_token)
                                THEN min(s.id) END
                    FROM wf_signals s
                    WHERE s.instance_id = i.id AND s.state = 'pending' AND s.due_at <= now())
               END AS timer_id
    ) AS w
), bumped AS (
    -- Claim and intent in one commit: the version bump fences out any earlier holder.
    -- `i.version = p.version`: a commit that moved the version after `prev` read it (an
    -- operator's cancel, a signal) wins. Nothing is started on the stale read: the row
    -- is not returned, the task is leased all the same (`claimed` joins `bumped` LEFT),
    -- and the store bumps and reads the instance afresh (SqlStore._claim_afresh).
    UPDATE wf_instances i
    SET version = i.version + 1,
        status = CASE WHEN p.fast THEN 'RUNNING' ELSE i.status END,
        step = CASE WHEN p.fast THEN p.node ELSE i.step END,
        step_attempts = CASE WHEN p.fast THEN p.next_attempt ELSE i.step_attempts END,
        attempts = CASE WHEN p.fast
                        THEN jsonb_set(i.attempts, ARRAY[p.node], to_jsonb(p.next_attempt))
                        ELSE i.attempts END,
        -- A fired timer: TIMER_FIRED's fold (the wait's outcome; no wait in progress).
        waits = CASE WHEN p.fast AND p.timer_id IS NOT NULL
                     THEN jsonb_set(i.waits, ARRAY[p.wait_key],
                                    coalesce(i.waits -> p.wait_key, '{}')
                                    || jsonb_build_object('outcome', p.outcome))
                     ELSE i.waits END,
        waiting_key = CASE WHEN p.fast THEN NULL ELSE i.waiting_key END,
        waiting_kind = CASE WHEN p.fast THEN NULL ELSE i.waiting_kind END,
        waiting_token = CASE WHEN p.fast THEN NULL ELSE i.waiting_token END,
        waiting_until = CASE WHEN p.fast THEN NULL ELSE i.waiting_until END,
        updated_at = now()
    FROM prev p
    WHERE i.id = p.instance_id AND i.version = p.version
    RETURNING i.*, p.fast, CASE WHEN p.fast THEN p.timer_id END AS fired, p.wait_key, p.outcome
), started AS (
    -- In the log's order: a fired timer's TIMER_FIRED (at the waiting attempt), then the
    -- step's STEP_STARTED - the events of waits.deliver and decide.start.
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT e.id, e.step, e.event_type, e.attempt, e.payload, %(worker)s
    FROM (SELECT b.id, b.step, 'TIMER_FIRED' AS event_type, b.step_attempts - 1 AS attempt,
                 jsonb_build_object('wait', b.wait_key, 'outcome', b.outcome,
                                    'signal', b.fired) AS payload, 0 AS ord
          FROM bumped b WHERE b.fired IS NOT NULL
          UNION ALL
          SELECT b.id, b.step, 'STEP_STARTED', b.step_attempts, '{}'::jsonb, 1
          FROM bumped b WHERE b.fast) AS e
    ORDER BY e.id, e.ord
    RETURNING instance_id, seq
), started_live AS (
    -- The claimed instances' live notifications (see append_events' `live`): `bumped`
    -- returns each instance row as this statement updated it.
    SELECT pg_notify(%(live)s, s.instance_id::text || ' ' || max(s.seq)::text) AS sent
    FROM started s JOIN bumped b ON b.id = s.instance_id
    WHERE b.watched
    GROUP BY s.instance_id
), claimed AS (
    UPDATE wf_tasks t
    SET lease_owner = %(worker)s,
        lease_token = %(token)s,
        due_at = now() + %(lease)s * interval '1 second',
        attempt = CASE WHEN b.fast THEN b.step_attempts ELSE t.attempt END,
        in_flight = t.in_flight OR coalesce(b.fast, false),
        -- As decide.moved_on's Continue after a delivered wait: no failures carried on.
        failures = CASE WHEN b.fired IS NOT NULL THEN 0 ELSE t.failures END
    FROM prev p LEFT JOIN bumped b ON b.id = p.instance_id
    WHERE t.id = p.task_id
    RETURNING t.*, coalesce(b.fast, false) AS started
)
-- A waiting instance comes with its due pending rows (signals_pending), so a resume is
-- two round trips: this claim and the deliver commit; a timer this claim fired comes as
-- the row it applied (the runner's timer-lateness metric).
SELECT c.*, true AS leased, to_jsonb(b) AS instance,
       CASE WHEN b.fired IS NOT NULL THEN
           swf_fire_timer(b.fired, c.instance_id)  -- the row applied (migration 026)
            WHEN b.waiting_key IS NOT NULL AND NOT b.fast THEN
           (SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.due_at, s.id), '[]'::jsonb)
            FROM wf_signals s
            WHERE s.instance_id = c.instance_id AND s.state = 'pending' AND s.due_at <= now())
       END AS signals,
       -- Another candidate was due (not one of these): whether the runner wakes one more
       -- worker. Without it every claim woke one, which mostly claimed nothing and asked
       -- next_due. One that a racing claim takes counts too: a wake-up too many is harmless.
       EXISTS (SELECT 1 FROM cand WHERE cand.id NOT IN (SELECT id FROM picked)) AS more,
       -- After finishes, each one's row even when nothing was claimed (then the rest is
       -- NULL): paired with the claims by their order, at most one claim a finish.
       d.id AS done_id, d.version AS done_version, d.made_due, d.notified,
       (SELECT count(*) FROM live) + (SELECT count(*) FROM started_live) AS live
FROM (SELECT done.*, row_number() OVER () AS n FROM done) AS d
FULL JOIN (SELECT claimed.*, row_number() OVER () AS n FROM claimed) AS c ON c.n = d.n
LEFT JOIN bumped b ON b.id = c.instance_id;

-- name: claim_instance_lock
-- The start-up claim of one instance, in the claim's transaction (which then bumps the
-- instance's version). The instance's row is locked first and waited for, the task's
-- then taken unless a claim holds it: a commit locks in the same order (instance, then
-- task), so this claim never holds the task while it waits for the instance, which was a
-- deadlock with the finish of a lease that ran out (see `claim`'s `picked`).
SELECT t.*, i.status AS instance_status
FROM wf_tasks t JOIN wf_instances i ON i.id = t.instance_id
WHERE t.instance_id = %(id)s AND t.slot = ''
  AND (t.lease_owner IS NULL OR t.due_at <= now())
  AND (t.due_at <= now()
       OR ((i.error->>'code') IS DISTINCT FROM 'quarantined'
           AND (t.in_flight OR i.status = 'STALLED')))
FOR NO KEY UPDATE OF i
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
-- %(mine)s: the lease-token prefix of the beating runner's incarnation (NULL: any), so a
-- live runner never keeps a dead twin's leases (same worker id) alive.
-- SKIP LOCKED: a heartbeat never waits for a row lock. It locks many of the runner's task
-- rows, in the order of the index it walks; a group commit (group_continue, apply_finish
-- after group_head) locks several of them too, in the order of its batch. Two such
-- statements that waited for each other's rows deadlocked: after deadlock_timeout (1 s)
-- the server aborted one of them, and an aborted group handed every step it carried back
-- to be run again (seen in CI: 11 reruns where at most 8 steps were in flight). A row
-- skipped here is locked by a commit of its own step, which renews or ends the lease
-- (apply_continue's rule), or by another runner's claim, which takes the lease over
-- anyway; either way the next beat, a third of a lease later, finds it free.
WITH held AS (
    SELECT id FROM wf_tasks
    WHERE lease_owner = %(worker)s AND due_at > now()
      AND (%(mine)s::text IS NULL OR left(lease_token, length(%(mine)s::text)) = %(mine)s::text)
      AND strpos(lease_token, '/o') = 0  -- a start's lease not yet heard (see `offered`)
    FOR UPDATE SKIP LOCKED
)
UPDATE wf_tasks t SET due_at = now() + %(lease)s * interval '1 second'
FROM held WHERE t.id = held.id;

-- name: heartbeat_logged
-- The same extension, and a HEARTBEAT event for every claim already seen held at an
-- earlier heartbeat whose last logged one is %(every)s seconds old (locked first, so the
-- decision to log and the extension see the same claim; SKIP LOCKED, as heartbeat says).
WITH held AS (
    SELECT id,
           (heartbeat_at IS NOT NULL AND heartbeat_token IS NOT DISTINCT FROM lease_token
            AND heartbeat_at <= now() - %(every)s * interval '1 second') AS log,
           (heartbeat_at IS NULL OR heartbeat_token IS DISTINCT FROM lease_token) AS first
    FROM wf_tasks
    WHERE lease_owner = %(worker)s AND due_at > now()
    AND (%(mine)s::text IS NULL OR left(lease_token, length(%(mine)s::text)) = %(mine)s::text)
    AND strpos(lease_token, '/o') = 0  -- a start's lease not yet heard (see `offered`)
    FOR UPDATE SKIP LOCKED
), ext AS (
    UPDATE wf_tasks t
    SET due_at = now() + %(lease)s * interval '1 second',
        heartbeat_token = t.lease_token,
        heartbeat_at = CASE WHEN h.log OR h.first THEN now() ELSE t.heartbeat_at END
    FROM held h WHERE t.id = h.id
    RETURNING t.instance_id, t.node, t.attempt, h.log
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT instance_id, node, 'HEARTBEAT', attempt,
           jsonb_build_object('lease_seconds', %(lease)s::float8), %(worker)s
    FROM ext WHERE log
    RETURNING instance_id, seq
), live AS (
    -- Live notifications (see append_events' `live`). This statement does not update the
    -- instance rows, so `watched` is read as its snapshot has them.
    SELECT pg_notify(%(live)s, e.instance_id::text || ' ' || max(e.seq)::text) AS sent
    FROM ev e JOIN wf_instances i ON i.id = e.instance_id
    WHERE i.watched
    GROUP BY e.instance_id
)
SELECT count(*) AS n, (SELECT count(*) FROM live) AS live FROM ext;

-- name: release
-- Only this worker's leases, and of those only the claim %(token)s (when given) of this
-- incarnation (%(mine)s, when given): a hand-back never frees a lease a later claim took.
-- %(unrun)s, with a token: that claim started its step and no worker ran it (a runner
-- stopping, a start leased to a busy runner handed back), so a state-machine attempt gets
-- a STEP_RELEASED and loses its in-flight mark: the next claim starts the next attempt
-- instead of asking a reconcile hook about one that never ran. The NOTIFY goes out
-- whatever was released (a hand-back is work for somebody else).
WITH released AS (
    UPDATE wf_tasks
    SET lease_owner = NULL, due_at = now(),
        in_flight = in_flight AND NOT (%(unrun)s AND kind = 'machine')
    WHERE lease_owner = %(worker)s AND instance_id = ANY(%(ids)s)
      AND (%(token)s::text IS NULL OR lease_token = %(token)s::text)
      AND (%(mine)s::text IS NULL
           OR left(lease_token, length(%(mine)s::text)) = %(mine)s::text)
    RETURNING instance_id, node, attempt, kind
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT instance_id, node, 'STEP_RELEASED', attempt,
           jsonb_build_object('reason', 'handed back before it ran'), %(worker)s
    FROM released WHERE %(unrun)s AND kind = 'machine'
    RETURNING instance_id, seq
), live AS (
    -- Live notifications (see append_events' `live`), as heartbeat_logged's.
    SELECT pg_notify(%(live)s, e.instance_id::text || ' ' || max(e.seq)::text) AS sent
    FROM ev e JOIN wf_instances i ON i.id = e.instance_id
    WHERE i.watched
    GROUP BY e.instance_id
)
SELECT pg_notify(%(channel)s, 'release'), (SELECT count(*) FROM live) AS live;

-- name: lease_incarnations
SELECT DISTINCT split_part(lease_token, '/', 1) AS inc FROM wf_tasks
WHERE lease_owner = %(worker)s AND due_at > now() AND strpos(lease_token, '/') > 0;

-- name: release_all
WITH released AS (
    UPDATE wf_tasks SET lease_owner = NULL, due_at = now() WHERE lease_owner = %(worker)s
      AND (%(mine)s::text IS NULL
           OR left(lease_token, length(%(mine)s::text)) = %(mine)s::text)
)
SELECT pg_notify(%(channel)s, 'release');

-- name: active
-- plan: scans
SELECT * FROM wf_instances WHERE status IN ('RUNNING', 'STALLED') ORDER BY created_at;

-- name: list_instances
-- plan: scans
-- %(status)s is ignored when %(any_status)s; %(pattern)s a LIKE prefix (store.like_prefix).
SELECT * FROM wf_instances
WHERE (%(any_status)s OR status = ANY(%(status)s))
  AND (%(pattern)s::text IS NULL OR type LIKE %(pattern)s)
  AND (%(deleted)s OR deleted_at IS NULL)
ORDER BY created_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s;

-- name: count_instances
-- plan: scans
SELECT count(*) AS n FROM wf_instances
WHERE (%(any_status)s OR status = ANY(%(status)s))
  AND (%(pattern)s::text IS NULL OR type LIKE %(pattern)s)
  AND (%(deleted)s OR deleted_at IS NULL);

-- name: announce
-- Work of these types is due that no other process was told of: a start made while a
-- claim of its type was under way in its process, which no worker there took at once
-- (stores/_wakeup.py, Wakeup.starting).
SELECT pg_notify(%(channel)s, t) FROM unnest(%(types)s::text[]) AS t;

-- name: next_due
-- Per type, the first due time off the (type, due_at) index (swf_first_due, migration
-- 015): a min over `type = ANY(...)` was a scan of every task (13.7 ms at 100,000 tasks,
-- each idle loop), and planned on statistics a sort of every task of the type.
SELECT extract(epoch FROM (swf_first_due(%(types)s::text[], NULL) - now()))::float8 AS wait;

-- name: next_due_kinds
-- A kind with no types is not asked (a runner of state machines only, or of DAGs only):
-- a call of swf_first_due costs about as much as the rest of the statement. least()
-- passes over the NULL. A DAG task sticky to another runner (migration 024) is due for
-- %(worker)s when its stickiness ends.
SELECT extract(epoch FROM (least(
           CASE WHEN cardinality(%(types)s::text[]) > 0
                THEN swf_first_due(%(types)s::text[], 'machine') END,
           CASE WHEN cardinality(%(dag)s::text[]) > 0
                THEN swf_first_due_dag(%(dag)s::text[], %(worker)s) END) - now()))::float8
       AS wait;

-- name: dead_letter
INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
VALUES (%(instance_id)s, %(envelope)s, %(reason)s, %(worker)s);

-- name: dead_letters
-- plan: scans
SELECT * FROM wf_dead_letters ORDER BY id DESC LIMIT %(limit)s;

-- name: quarantine
WITH inst AS (
    UPDATE wf_instances SET status = 'STALLED', error = %(error)s, version = version + 1,
                            updated_at = now()
    WHERE id = %(id)s
    RETURNING id, type, status, step, input::text AS input, progress::text AS progress,
              watched  -- see apply_head; not part of the envelope below
), task AS (
    -- in_flight stays: a step quarantined mid-attempt is still in doubt, so whoever takes
    -- it next (its parked task falls due, or a redrive) asks the reconcile hook first.
    UPDATE wf_tasks SET lease_owner = NULL, due_at = now() + interval '1 day'
    WHERE instance_id = %(id)s
), ev AS (
    INSERT INTO wf_events (instance_id, event_type, error, worker)
    SELECT id, 'QUARANTINED', %(error)s, %(worker)s FROM inst
    RETURNING instance_id, seq
), live AS (
    -- The live notification (see append_events' `live`).
    SELECT pg_notify(%(live)s, e.instance_id::text || ' ' || e.seq::text) AS sent
    FROM ev e, inst
    WHERE inst.watched
), dead AS (
    INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
    SELECT id, to_jsonb(inst) - 'watched', %(reason)s, %(worker)s FROM inst
)
SELECT (SELECT count(*) FROM live) AS live;

-- name: rebuild
UPDATE wf_instances
SET status = %(status)s, step = %(step)s, step_attempts = %(step_attempts)s,
    attempts = %(attempts)s, progress = %(progress)s, error = %(error)s,
    cancel_requested = %(cancel_requested)s, waits = %(waits)s,
    waiting_key = %(waiting_key)s, waiting_kind = %(waiting_kind)s,
    waiting_token = %(waiting_token)s, waiting_until = to_timestamp(%(waiting_until)s::float8),
    version = version + 1, updated_at = now()
WHERE id = %(id)s;

-- name: lock_acquire
-- Returns the holder, ours or another's. Not "ON CONFLICT DO NOTHING, then SELECT": under
-- READ COMMITTED the statement's snapshot is taken before it runs, so when another
-- instance's insert of the key commits while ours waits on it, DO NOTHING skips and the
-- SELECT (same snapshot) sees no row at all. DO UPDATE instead waits for the other
-- transaction and then locks and returns the latest committed row, visible to our
-- snapshot or not (and inserts after all if that row went away): one row, always. The
-- update changes nothing (same holder, same since); only the row lock is taken.
WITH waiting AS (
    INSERT INTO wf_lock_waiters (key, instance_id) VALUES (%(key)s, %(id)s)
    ON CONFLICT DO NOTHING
)
INSERT INTO wf_locks (key, holder) VALUES (%(key)s, %(id)s)
ON CONFLICT (key) DO UPDATE SET holder = wf_locks.holder
RETURNING holder;

-- name: lock_unwait
DELETE FROM wf_lock_waiters WHERE key = %(key)s AND instance_id = %(id)s;

-- name: lock_release
-- Wakes one waiter per released key, not all of them: the longest-waiting one whose task
-- no runner holds (a leased waiter is inside its step and asks for the lock itself, or
-- wakes itself on seeing it free: MachineDriver). Waking every waiter made a herd: each
-- one claimed, ran its step up to hold() and parked again, for one of them to win; a
-- per-signer queue of N waiters paid N claims per transaction. A woken waiter that ends
-- without taking the lock passes the wake-up on (apply_finish); one that moves on to a
-- step that never asks for it leaves the others to their recheck, the safety net.
WITH rel AS (
    DELETE FROM wf_locks WHERE holder = %(id)s AND (%(key)s::text IS NULL OR key = %(key)s)
    RETURNING key
), woke AS (
    -- The keys' next waiters, their task rows locked in id order (swf_wake_next, migration
    -- 025, which an ending instance's swf_finish_rest calls too).
    SELECT swf_wake_next(ARRAY(SELECT key FROM rel), '{}') AS n
)
SELECT (SELECT count(*) FROM rel) AS released, (SELECT n FROM woke) AS woken,
       CASE WHEN (SELECT n FROM woke) > 0 THEN pg_notify(%(channel)s, 'lock') END;

-- name: lock_holder
SELECT holder FROM wf_locks WHERE key = %(key)s;

-- name: locks_held
-- plan: scans
-- %(pattern)s a LIKE prefix (store.like_prefix) or NULL.
SELECT key, holder, extract(epoch FROM since)::float8 AS since FROM wf_locks
WHERE %(pattern)s::text IS NULL OR key LIKE %(pattern)s ORDER BY key;

-- name: lock_waiters
-- plan: scans
-- Only waiters that can still take the lock: an ended instance's row stays until deleted.
SELECT w.key, w.instance_id, extract(epoch FROM w.since)::float8 AS since
FROM wf_lock_waiters w JOIN wf_instances i ON i.id = w.instance_id
WHERE (%(pattern)s::text IS NULL OR w.key LIKE %(pattern)s)
  AND i.status IN ('PENDING', 'RUNNING', 'STALLED')
ORDER BY w.key, w.since, w.instance_id;

-- name: wake_instances
-- Task rows locked in id order, as apply_finish's `woke` does, and for its reason.
WITH woke AS (
    UPDATE wf_tasks SET due_at = now()
    WHERE lease_owner IS NULL
      AND id IN (SELECT id FROM wf_tasks
                 WHERE instance_id = ANY(%(ids)s) AND lease_owner IS NULL
                 ORDER BY id FOR UPDATE)
    RETURNING instance_id
)
SELECT count(*), CASE WHEN count(*) > 0 THEN pg_notify(%(channel)s, 'wake') END FROM woke;

-- name: wake_parent
WITH woke AS (
    UPDATE wf_tasks t SET due_at = now()
    FROM wf_instances c
    WHERE c.id = %(id)s AND t.instance_id = c.parent_id AND t.slot = c.parent_node
      AND t.lease_owner IS NULL
    RETURNING t.id
)
SELECT count(*), CASE WHEN count(*) > 0 THEN pg_notify(%(channel)s, 'wake') END FROM woke;

-- name: children
SELECT * FROM wf_instances WHERE parent_id = %(id)s ORDER BY created_at;

-- DAG instances (kind = 'dag'): one task per dispatched node, slot = node id. --------

-- name: dag_create
WITH ins AS (
    INSERT INTO wf_instances (id, type, kind, status, input, idempotency_key, priority,
                              parent_id, trace_context)
    VALUES (%(id)s, %(type)s, 'dag', 'RUNNING', %(input)s, %(key)s, %(priority)s,
            %(parent_id)s, %(trace)s)
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
-- Not told when a worker of the starting process takes it (stores/_decisions.py, _start).
SELECT id, CASE WHEN %(notify)s THEN pg_notify(%(channel)s, type) END FROM ins;

-- name: dag_claim
-- Lease and intent in one commit: the node's next try and its NODE_STARTED.
-- The instance row is locked too (skipped if busy, so a claim never waits while holding
-- task rows): every event of an instance takes its seq under that lock, so its log
-- commits in seq order and a reader at seq s has seen everything below s (live.py).
WITH picked AS (
    -- Per type down wf_tasks_type_pick, each row and its instance's locked as they are
    -- read (swf_dag_pick, migration 015: a plan that holds without statistics), another
    -- runner's task passed over while it is sticky (migration 024).
    SELECT id FROM swf_dag_pick(%(types)s, %(limit)s, %(worker)s)
), claimed AS (
    UPDATE wf_tasks t
    SET lease_owner = %(worker)s, lease_token = %(token)s,
        due_at = now() + %(lease)s * interval '1 second',
        attempt = t.attempt + 1, in_flight = true
    FROM picked p WHERE t.id = p.id
    RETURNING t.*
), started AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT c.instance_id, c.slot, 'NODE_STARTED', c.attempt,
           jsonb_build_object('failures', c.failures), %(worker)s
    FROM claimed c
    ON CONFLICT DO NOTHING
    RETURNING instance_id, seq
), live AS (
    -- Live notifications (see append_events' `live`). This statement does not update the
    -- instance rows (swf_dag_pick locks them), so `watched` is read as its snapshot has them.
    SELECT pg_notify(%(live)s, s.instance_id::text || ' ' || max(s.seq)::text) AS sent
    FROM started s JOIN wf_instances i ON i.id = s.instance_id
    WHERE i.watched
    GROUP BY s.instance_id
)
SELECT c.*, true AS leased, to_jsonb(i) AS instance, (SELECT count(*) FROM live) AS live,
       -- Another due node task (not one of these): whether to wake one more worker.
       -- Rows locked by a concurrent claim count too; a wake too many is harmless.
       EXISTS (SELECT 1 FROM swf_pick(%(types)s, 'dag', %(limit)s + 1) AS m
               WHERE m.id NOT IN (SELECT id FROM picked)) AS more
FROM claimed c JOIN wf_instances i ON i.id = c.instance_id;

-- name: dag_record
-- A node's result, once: a duplicate delivery hits the unique index and writes nothing.
-- Under the instance's row lock, like every event (see dag_claim).
WITH inst AS (
    -- Locked, so the latest row: its `watched` too (see apply_head).
    SELECT id, watched FROM wf_instances
    WHERE id = %(id)s AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
    FOR NO KEY UPDATE
), ev AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, error, worker)
    SELECT id, %(node)s, %(event_type)s, %(attempt)s, %(payload)s, %(error)s, %(worker)s
    FROM inst
    ON CONFLICT DO NOTHING
    RETURNING instance_id, seq
), live AS (
    -- The live notification (see append_events' `live`).
    SELECT pg_notify(%(live)s, e.instance_id::text || ' ' || e.seq::text) AS sent
    FROM ev e, inst
    WHERE inst.watched
)
SELECT seq, (SELECT count(*) FROM live) AS live FROM ev;

-- name: dag_slots
SELECT slot FROM wf_tasks WHERE instance_id = %(id)s ORDER BY slot;

-- name: dag_snapshot
-- One statement, so one MVCC snapshot: the instance row (its version), its events after
-- %(after)s (a cached view's tail) and its open node tasks.
SELECT to_jsonb(i) AS instance,
       ARRAY(SELECT t.slot FROM wf_tasks t WHERE t.instance_id = i.id ORDER BY t.slot)
           AS slots,
       coalesce((SELECT jsonb_agg(to_jsonb(e) ORDER BY e.seq) FROM wf_events e
                 WHERE e.instance_id = i.id AND e.seq > %(after)s), '[]'::jsonb) AS events
FROM wf_instances i WHERE i.id = %(id)s;

-- name: dag_head
-- The CAS of a DAG commit (SqlStore.dag_apply names its pieces: dag_head, append_events,
-- apply_dead_letter when the decision has one, dag_tail): the version-checked instance row.
WITH inst AS (
    UPDATE wf_instances
    SET status = coalesce(%(status)s::text, status),
        progress = coalesce(%(progress)s::jsonb, progress),
        error = coalesce(%(error)s::jsonb, error),
        version = version + 1, updated_at = now()
    WHERE id = %(id)s AND version = %(version)s
    RETURNING id, version, type, priority, watched  -- watched: see apply_head
)

-- name: dag_head_relaxed
-- dag_head for a decision its blockers vouch for (DagCommit.blockers): on the decided
-- version, or on any later one of a running instance while the node's own task is still
-- there (nobody settled this run meanwhile) and one of the blockers' too (one of them
-- still open: dag_vouch.blockers says why that is enough). Checked once the row is
-- locked, by locking the tasks: the statement's snapshot predates the commit it may have
-- waited for at the instance's row, and a lock reads a row's latest version, so a task
-- that commit deleted is not found. SKIP LOCKED: a task a claim holds this moment is no
-- evidence (and nothing waits). When nothing vouches, swf_lost_race (migration 022) ends
-- the statement with nothing written, a lost CAS. Every later piece reads `inst`, which
-- reads `vouch` first.
WITH locked AS (
    UPDATE wf_instances SET version = version + 1, updated_at = now()  -- sets no status
    WHERE id = %(id)s AND status = 'RUNNING'
    RETURNING id, version, type, priority, watched
), vouch AS (
    SELECT CASE
               WHEN l.version = %(version)s + 1 THEN true
               WHEN EXISTS (SELECT 1 FROM wf_tasks t
                            WHERE t.instance_id = l.id AND t.slot = %(done)s
                            FOR KEY SHARE SKIP LOCKED)
                    AND EXISTS (SELECT 1 FROM wf_tasks t
                                WHERE t.instance_id = l.id AND t.slot = ANY(%(blockers)s)
                                LIMIT 1 FOR KEY SHARE SKIP LOCKED)
               THEN true
               ELSE swf_lost_race()
           END AS ok
    FROM locked l
), inst AS (
    SELECT l.* FROM locked l, vouch WHERE vouch.ok
)

-- name: dag_tasks
-- A DAG commit's tail, in three pieces (SqlStore.dag_apply names them): the node tasks
-- (this one: the finished node's task or every task, and the dispatched node tasks), then
-- dag_takes or dag_takes_none, then dag_end. dag_takes retries a node and takes the next
-- sibling; a commit that does neither (a chain's, a join's, a start's) sends
-- dag_takes_none instead, empty CTEs of the same names: the generic plan of a statement
-- still sets up every CTE it names at each call, and those four cost a plain commit 8-16%
-- of its server CPU (bench/README.md, "Session 47").
, gone AS (
    -- The settled node's task goes whoever holds it now (unlike `retried`): its run's
    -- result is in the log once, and a later holder of that run finds the task gone
    -- and writes nothing. A group's (runtime/dag_group.py) other completed nodes are
    -- %(also_done)s, a JSON array: text, which the driver sends as it is (an array
    -- parameter cost every commit about 10% of its runner CPU to adapt).
    DELETE FROM wf_tasks t USING inst
    WHERE t.instance_id = inst.id
      AND (%(finish)s OR t.slot = %(done)s OR %(also_done)s::jsonb ? t.slot)
), added AS (
    -- No ON CONFLICT: a dispatched node whose task is still open fails the statement on
    -- the (instance_id, slot) key, which the store reports as a lost CAS, so the decision
    -- is made again on a fresh read.
    -- With %(token)s (dag_apply_take: one task, due now), the task is leased to the
    -- committing worker as dag_claim leases it, its try counted; the decision's last
    -- event is its NODE_STARTED. Otherwise, with %(sticky)s seconds (dag_sticky), the
    -- first %(keep)s tasks (NULL: all) are this runner's alone until then (migration 024;
    -- runtime/dag_keep.py: as many as its workers will start meanwhile).
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                          lease_owner, lease_token, in_flight, sticky_to, sticky_until)
    SELECT inst.id, d.node, d.node, 'dag', inst.type, inst.priority,
           now() + CASE WHEN %(token)s::text IS NULL THEN d.delay ELSE %(lease)s END
                   * interval '1 second',
           d.attempt + (%(token)s::text IS NOT NULL)::int,
           CASE WHEN %(token)s::text IS NOT NULL THEN %(worker)s END, %(token)s,
           %(token)s::text IS NOT NULL,
           CASE WHEN d.kept THEN %(worker)s END,
           CASE WHEN d.kept THEN now() + (d.delay + %(sticky)s) * interval '1 second' END
    FROM inst, (
        SELECT r.*, %(token)s::text IS NULL AND %(sticky)s > 0
                    AND (%(keep)s::int IS NULL OR r.i <= %(keep)s::int) AS kept
        FROM ROWS FROM (jsonb_to_recordset(%(dispatch)s::jsonb)
                        AS (node text, delay float8, attempt int))
             WITH ORDINALITY AS r (node, delay, attempt, i)
    ) AS d
    RETURNING *
)

-- name: dag_takes
-- The retried node's task (only while this worker still holds it: the lease fencing),
-- and the sibling taken for the committing worker.
, retried AS (
    UPDATE wf_tasks t
    SET due_at = now() + %(retry_delay)s * interval '1 second', failures = %(retry_failures)s,
        in_flight = false, lease_owner = NULL
    FROM inst
    WHERE t.instance_id = inst.id AND t.slot = %(retry)s AND t.lease_owner = %(worker)s
    RETURNING t.id
), sib AS (
    -- With %(sib_token)s (dag_apply_sibling): another node task of this instance, due
    -- now, taken for the committing worker as dag_claim takes it (leased, its try
    -- counted, its NODE_STARTED), so a fan-out's branches run on the workers already in
    -- it with no claim each. Not one this commit adds (not in the snapshot), and locked as
    -- it is read, skipping one a claim holds (dag_claim skips the instance meanwhile: its
    -- row is this statement's, `inst`). A group's commit (runtime/dag_group.py) takes
    -- up to %(sib_n)s, one for each of its workers, each under its own token (the
    -- first is %(sib_token)s, `taken`; the others come back as `more_taken`):
    -- %(sib_tokens)s, a JSON array of them all.
    SELECT t.id FROM wf_tasks t, inst
    WHERE %(sib_token)s::text IS NOT NULL AND t.instance_id = inst.id AND t.kind = 'dag'
      AND t.due_at <= now() AND t.slot IS DISTINCT FROM %(done)s
      AND NOT %(also_done)s::jsonb ? t.slot
    ORDER BY t.priority, t.due_at
    LIMIT %(sib_n)s
    FOR UPDATE OF t SKIP LOCKED
), sib_n AS (
    SELECT id, row_number() OVER (ORDER BY id) AS rn FROM sib
), sib_taken AS (
    UPDATE wf_tasks t
    SET lease_owner = %(worker)s,
        lease_token = %(sib_tokens)s::jsonb ->> (n.rn - 1)::int,
        due_at = now() + %(lease)s * interval '1 second',
        attempt = t.attempt + 1, in_flight = true
    FROM sib_n n WHERE t.id = n.id
    RETURNING t.*
), sib_started AS (
    INSERT INTO wf_events (instance_id, node, event_type, attempt, payload, worker)
    SELECT s.instance_id, s.slot, 'NODE_STARTED', s.attempt,
           jsonb_build_object('failures', s.failures), %(worker)s
    FROM sib_taken s
    ON CONFLICT DO NOTHING
    RETURNING seq
)

-- name: dag_takes_none
-- dag_takes for a commit that neither retries a node nor takes a sibling: nothing.
, retried AS (SELECT NULL::bigint AS id WHERE false
), sib_taken AS (SELECT t.* FROM wf_tasks t WHERE false
), sib_started AS (SELECT NULL::bigint AS seq WHERE false)

-- name: dag_end
-- The live notification and what the committer reads back.
, dag_live AS (
    -- The live notification (see append_events' `live`), over the decision's events and
    -- the taken sibling's NODE_STARTED: one for the statement.
    SELECT pg_notify(%(live)s, inst.id::text || ' ' || max(e.seq)::text) AS sent
    FROM inst, (SELECT seq FROM ev UNION ALL SELECT seq FROM sib_started) AS e
    WHERE inst.watched
    GROUP BY inst.id
)
-- Notify only when somebody else has work (see apply_finish): more than one node task
-- added, a delayed one or a rescheduled one (timer holders must learn the due time). A
-- single task due now is left to the committing worker, which claims next anyway (or
-- was handed it: `taken`).
SELECT version,
       CASE WHEN (SELECT count(*) FROM added) > 1
                 OR EXISTS (SELECT 1 FROM added WHERE due_at > now() AND lease_token IS NULL)
                 OR EXISTS (SELECT 1 FROM retried)
            THEN pg_notify(%(channel)s, type) END AS notified,
       coalesce((SELECT to_jsonb(a) FROM added a WHERE a.lease_token IS NOT NULL),
                (SELECT to_jsonb(s) FROM sib_taken s WHERE s.lease_token = %(sib_token)s)) AS taken,
       (SELECT jsonb_agg(to_jsonb(s)) FROM sib_taken s
        WHERE s.lease_token IS DISTINCT FROM %(sib_token)s) AS more_taken,
       -- The seqs of the decision's events: the committer folds them into its cached
       -- view of the log without reading them back (SqlStore.dag_commit).
       (SELECT coalesce(jsonb_agg(seq ORDER BY seq), '[]') FROM ev) AS seqs,
       (SELECT count(*) FROM dag_live) AS live
FROM inst;

-- name: dag_group_head
-- Several DAG node commits of this runner's workers, on several instances, in one
-- statement (stores/_pggroup.py; docs/architecture.md, "Group commit on PostgreSQL"): the
-- plain ones only, each what dag_head, append_events, dag_tasks, dag_takes_none and
-- dag_end write for it alone (no vouched head, no dead letter, no retry, no sibling, no
-- group of its own instance's completions). Each keeps its own CAS: a commit whose version
-- moved matches no row in `inst`, and nothing of it is written. Followed by group_events,
-- group_live and dag_group_tail.
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS b (
        id uuid, version integer, status text, progress jsonb, error jsonb, events jsonb,
        worker text, finish boolean, done text, dispatch jsonb, token text, lease float8,
        keep integer)
), inst AS (
    UPDATE wf_instances i
    SET status = coalesce(b.status, i.status), progress = coalesce(b.progress, i.progress),
        error = coalesce(b.error, i.error), version = i.version + 1, updated_at = now()
    FROM b
    -- `ids`: down the primary key (see group_head).
    WHERE i.id = ANY(%(ids)s::uuid[]) AND i.id = b.id AND i.version = b.version
    RETURNING i.id, i.version, i.type, i.priority, i.watched, b.events, b.worker, b.finish,
              b.done, b.dispatch, b.token, b.lease, b.keep
)

-- name: dag_group_tail
-- dag_tasks and dag_end for each row of `inst`, with its own parameters (dag_sticky is
-- the store's: %(sticky)s).
, gone AS (
    DELETE FROM wf_tasks t USING inst
    WHERE t.instance_id = inst.id AND (inst.finish OR t.slot = inst.done)
      AND t.instance_id = ANY(ARRAY(SELECT id FROM inst))
), added AS (
    -- No ON CONFLICT (see dag_tasks): a dispatched node whose task is still open fails
    -- the statement, and the store then sends each commit alone.
    INSERT INTO wf_tasks (instance_id, slot, node, kind, type, priority, due_at, attempt,
                          lease_owner, lease_token, in_flight, sticky_to, sticky_until)
    SELECT inst.id, d.node, d.node, 'dag', inst.type, inst.priority,
           now() + CASE WHEN inst.token IS NULL THEN d.delay ELSE inst.lease END
                   * interval '1 second',
           d.attempt + (inst.token IS NOT NULL)::int,
           CASE WHEN inst.token IS NOT NULL THEN inst.worker END, inst.token,
           inst.token IS NOT NULL,
           CASE WHEN d.kept THEN inst.worker END,
           CASE WHEN d.kept THEN now() + (d.delay + %(sticky)s) * interval '1 second' END
    FROM inst, LATERAL (
        SELECT r.*, inst.token IS NULL AND %(sticky)s > 0
                    AND (inst.keep IS NULL OR r.i <= inst.keep) AS kept
        FROM ROWS FROM (jsonb_to_recordset(inst.dispatch)
                        AS (node text, delay float8, attempt int))
             WITH ORDINALITY AS r (node, delay, attempt, i)
    ) AS d
    RETURNING *
)
-- dag_end's notification rule and read-back, a row a commit whose CAS held.
SELECT inst.id, inst.version,
       CASE WHEN (SELECT count(*) FROM added a WHERE a.instance_id = inst.id) > 1
                 OR EXISTS (SELECT 1 FROM added a WHERE a.instance_id = inst.id
                            AND a.due_at > now() AND a.lease_token IS NULL)
            THEN pg_notify(%(channel)s, inst.type) END AS notified,
       (SELECT to_jsonb(a) FROM added a
        WHERE a.instance_id = inst.id AND a.lease_token IS NOT NULL) AS taken,
       (SELECT coalesce(jsonb_agg(ev.seq ORDER BY ev.seq), '[]') FROM ev
        WHERE ev.instance_id = inst.id) AS seqs,
       (SELECT count(*) FROM live) AS live
FROM inst;

-- name: dag_unkeep
-- The tasks of an instance that %(worker)s's commits keep to it (dag_sticky) and nobody
-- holds, past the first %(keep)s by dispatch: any runner's at once, and the runners
-- told (runtime/dag_keep.py: the runner measured their work and cannot start them in
-- time).
WITH kept AS (
    SELECT id FROM wf_tasks
    WHERE instance_id = %(id)s AND sticky_to = %(worker)s AND sticky_until > now()
      AND lease_owner IS NULL
    ORDER BY id
    OFFSET %(keep)s
), freed AS (
    UPDATE wf_tasks t SET sticky_to = NULL, sticky_until = NULL
    FROM kept WHERE t.id = kept.id
    RETURNING t.type
)
SELECT count(*) AS freed,
       CASE WHEN count(*) > 0 THEN pg_notify(%(channel)s, min(type)) END AS notified
FROM freed;

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
-- plan: scans
SELECT name, max(version) AS version FROM wf_dag_definitions GROUP BY name ORDER BY name;

-- name: dag_instances_of
-- plan: scans
SELECT count(*) AS n FROM wf_dag_runs WHERE name = %(name)s AND NOT test;

-- name: dag_delete_instances_of
-- plan: scans
DELETE FROM wf_instances
WHERE id IN (SELECT instance_id FROM wf_dag_runs WHERE name = %(name)s AND NOT test);

-- name: dag_delete_definition
-- plan: scans
DELETE FROM wf_dag_definitions WHERE name = %(name)s;

-- name: dag_delete_test_run
-- plan: scans
DELETE FROM wf_instances
WHERE id = %(id)s AND id IN (SELECT instance_id FROM wf_dag_runs WHERE test)
RETURNING id;

-- The inbox: type registry, dead-letter redrive, soft delete, retention. -------------

-- name: register_type
INSERT INTO wf_types (type, registered_by) VALUES (%(type)s, %(by)s)
ON CONFLICT (type) DO UPDATE SET registered_by = excluded.registered_by, updated_at = now();

-- name: registered_types
-- plan: scans
SELECT type FROM wf_types ORDER BY type;

-- name: register_dag_type
INSERT INTO wf_dag_types (type, registered_by) VALUES (%(type)s, %(by)s)
ON CONFLICT (type) DO UPDATE SET registered_by = excluded.registered_by, updated_at = now();

-- name: registered_dag_types
-- plan: scans
SELECT type FROM wf_dag_types ORDER BY type;

-- name: dead_letter_get
SELECT * FROM wf_dead_letters WHERE id = %(id)s;

-- name: mark_redriven
UPDATE wf_dead_letters
SET redriven_at = now(), redriven_by = %(by)s, redrive_instance_id = %(instance_id)s
WHERE id = %(id)s AND redriven_at IS NULL;

-- name: soft_delete
WITH gone AS (
    UPDATE wf_instances SET deleted_at = now()
    WHERE id = %(id)s AND deleted_at IS NULL
      AND status IN ('COMPLETED', 'FAILED', 'CANCELLED')
    RETURNING id, watched  -- watched: see apply_head
), ev AS (
    INSERT INTO wf_events (instance_id, event_type) SELECT id, 'WORKFLOW_DELETED' FROM gone
    RETURNING instance_id, seq
), live AS (
    -- The live notification (see append_events' `live`).
    SELECT pg_notify(%(live)s, e.instance_id::text || ' ' || e.seq::text) AS sent
    FROM ev e, gone
    WHERE gone.watched
)
SELECT id, (SELECT count(*) FROM live) AS live FROM gone;

-- name: purge_batch
-- plan: scans
-- Locked, then deleted: a row that an operator made active again (retry) in between is
-- re-checked under the lock and skipped. Events, tasks and DAG runs go by cascade.
WITH doomed AS (
    SELECT id FROM wf_instances
    WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED')
      AND created_at < now() - %(age)s * interval '1 second'
      AND updated_at < now() - %(age)s * interval '1 second'
    ORDER BY created_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM wf_instances i USING doomed d WHERE i.id = d.id
RETURNING i.id;

-- name: soft_purge_batch
-- plan: scans
WITH doomed AS (
    SELECT id FROM wf_instances
    WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND deleted_at IS NULL
      AND created_at < now() - %(age)s * interval '1 second'
      AND updated_at < now() - %(age)s * interval '1 second'
    ORDER BY created_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE wf_instances i SET deleted_at = now() FROM doomed d WHERE i.id = d.id
RETURNING i.id;

-- Live updates (statemachine_wf.client.live, migration 008). -----------------------------

-- name: live_watch
-- Register a watcher and set the row's `watched` flag, which the statements that grow the
-- log read from the row they update (append_events' `live`). Updating the row orders the
-- two by its lock: a writer that updates the row after this commit finds the flag set
-- (its UPDATE reads the latest row), and one in flight holds the lock until it commits,
-- so this statement waits for it and the watcher's first read sees its events.
WITH inst AS (
    UPDATE wf_instances SET watched = true WHERE id = %(id)s RETURNING id
)
INSERT INTO wf_live_watches (token, instance_id)
SELECT %(token)s, id FROM inst
RETURNING token;

-- name: live_unwatch
DELETE FROM wf_live_watches WHERE token = %(token)s RETURNING instance_id;

-- name: live_unflag
-- After live_unwatch, in its transaction: the flag cleared when nobody else watches. The
-- row is locked by a statement of its own first (live_unflag_lock), so this one's snapshot
-- is taken after any registration that held the lock had committed, and sees it.
UPDATE wf_instances i SET watched = false
WHERE i.id = %(id)s AND i.watched
  AND NOT EXISTS (SELECT 1 FROM wf_live_watches w WHERE w.instance_id = i.id);

-- name: live_unflag_lock
SELECT 1 FROM wf_instances WHERE id = %(id)s FOR NO KEY UPDATE;

-- name: live_sweep
-- plan: scans
-- Registrations left by a watcher that died: kept until their instance ends, then gone.
DELETE FROM wf_live_watches w USING wf_instances i
WHERE i.id = w.instance_id AND i.status IN ('COMPLETED', 'FAILED', 'CANCELLED');

-- name: migrations_create_table
-- The migrations' own bookkeeping (SqlBase._migrate_on): one row per applied migration.
CREATE TABLE IF NOT EXISTS wf_schema_migrations
(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());

-- name: migrations_applied
SELECT version FROM wf_schema_migrations;

-- name: migration_record
INSERT INTO wf_schema_migrations (version) VALUES (%(version)s);

-- name: set_setting
INSERT INTO wf_settings (name, value) VALUES (%(name)s, %(value)s)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = now()
WHERE wf_settings.value IS DISTINCT FROM excluded.value;

-- name: purge_dead_letters_batch
-- plan: scans
-- Every letter older than the age goes, redriven or not (docs/architecture.md).
WITH doomed AS (
    SELECT id FROM wf_dead_letters
    WHERE created_at < now() - %(age)s * interval '1 second'
    ORDER BY created_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM wf_dead_letters d USING doomed WHERE d.id = doomed.id
RETURNING d.id;

-- name: page_instances
-- plan: scans
-- The dashboard's keyset page, newest first: rows strictly older than the row %(after)s
-- (by created_at, then id; the first page when it is NULL), one range of
-- wf_instances_recent. %(status)s is ignored when %(any_status)s; %(pattern)s a LIKE
-- prefix; %(since)s/%(until)s created_at bounds in epoch seconds (NULL: open).
SELECT * FROM wf_instances
WHERE (created_at, id) < (coalesce((SELECT created_at FROM wf_instances
                                    WHERE id = %(after)s::uuid),
                                   CASE WHEN %(after)s::uuid IS NULL THEN 'infinity'::timestamptz END),
                          coalesce(%(after)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))
  AND created_at >= coalesce(to_timestamp(%(since)s::float8), '-infinity'::timestamptz)
  AND created_at < coalesce(to_timestamp(%(until)s::float8), 'infinity'::timestamptz)
  AND (%(any_status)s OR status = ANY(%(status)s))
  AND (%(pattern)s::text IS NULL OR type LIKE %(pattern)s)
  AND (%(deleted)s OR deleted_at IS NULL)
ORDER BY created_at DESC, id DESC LIMIT %(limit)s;

-- name: find_instances
-- The instance with the id %(ident_id)s (NULL when the text is no uuid) or the idempotency
-- key %(ident)s (the primary key and the key's unique index; at most two rows).
SELECT * FROM wf_instances WHERE id = %(ident_id)s::uuid AND (%(deleted)s OR deleted_at IS NULL)
UNION
SELECT * FROM wf_instances WHERE idempotency_key = %(ident)s AND (%(deleted)s OR deleted_at IS NULL)
ORDER BY created_at DESC, id DESC;

-- name: status_counts
-- plan: scans
SELECT status, count(*) AS n FROM wf_instances WHERE deleted_at IS NULL GROUP BY status;

-- name: queue_depth
-- plan: scans
-- Per task type and kind: tasks due (ready to claim), leased, and due later.
SELECT type, kind,
       count(*) FILTER (WHERE due_at <= now()) AS ready,
       count(*) FILTER (WHERE lease_owner IS NOT NULL AND due_at > now()) AS leased,
       count(*) FILTER (WHERE lease_owner IS NULL AND due_at > now()) AS later
FROM wf_tasks GROUP BY type, kind ORDER BY type, kind;

-- name: workers
-- plan: scans
-- Every worker that holds a lease that has not run out: how many, the latest moment its
-- leases run to, and the last heartbeat logged (heartbeat_at; NULL until one is).
SELECT lease_owner AS worker, count(*) AS leases,
       extract(epoch FROM max(due_at))::float8 AS lease_until,
       extract(epoch FROM max(heartbeat_at))::float8 AS heartbeat_at
FROM wf_tasks WHERE lease_owner IS NOT NULL AND due_at > now()
GROUP BY lease_owner ORDER BY lease_owner;

-- name: throughput
-- plan: scans
-- Instances created since %(since)s, per %(bucket)s seconds of their creation (a range of
-- wf_instances_recent), and of those how many have finished, per bucket of their finish.
SELECT floor(extract(epoch FROM created_at)::float8 / %(bucket)s::float8) * %(bucket)s::float8 AS at,
       'started' AS what, count(*) AS n
FROM wf_instances WHERE created_at >= to_timestamp(%(since)s::float8) GROUP BY 1
UNION ALL
SELECT floor(extract(epoch FROM updated_at)::float8 / %(bucket)s::float8) * %(bucket)s::float8 AS at,
       'finished' AS what, count(*) AS n
FROM wf_instances WHERE created_at >= to_timestamp(%(since)s::float8)
  AND status IN ('COMPLETED', 'FAILED', 'CANCELLED')
GROUP BY 1 ORDER BY 1;

-- name: dead_letter_counts
-- plan: scans
SELECT count(*) AS total, count(*) - count(redriven_at) AS waiting FROM wf_dead_letters;
