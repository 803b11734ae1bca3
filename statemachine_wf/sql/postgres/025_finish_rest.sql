-- What the instances that end in a finish leave to others: their pending signals (a
-- timer voided, a signal dead-lettered), their locks and their places in lock queues (the
-- next waiter woken), and a parent's waiting node (made due). apply_finish calls this
-- only when one of them has any of these, which most finishes do not.
--
-- Why functions: a prepared statement's generic plan sets up every node it holds on each
-- call, run or not. These were sixty-odd of the hundred and fifty nodes of a finish and
-- its claim, set up on every finish: ExecutorStart was a fifth of a runner's server CPU
-- (bench/README.md, "Session 58"). In plpgsql their plans are cached per connection and
-- set up only when called. VOLATILE: each statement here sees what the finish's own
-- statement wrote before the call, and every row it writes is another instance's, or the
-- ending instances' signals and locks, which the finish's statement does not write (its
-- settled signals are passed in and left alone).

-- The next waiter of each freed key woken: the longest-waiting one whose task no runner
-- holds (a leased waiter is inside its step and asks for the lock itself), `passed` never
-- (the instances that end in the same commit). Shared by lock_release and swf_finish_rest;
-- returns how many tasks it made due.
CREATE FUNCTION swf_wake_next(freed text[], passed uuid[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    woken integer;
BEGIN
    -- The waiters' task rows are locked in id order (the sub-select's FOR UPDATE, above
    -- its sort), not in the order the plan meets them: two statements that wake the same
    -- two instances (queued on two keys at once) then never hold one row each while
    -- waiting for the other's (tests/integration/core/test_wake_lock_order.py).
    WITH woke AS (
        UPDATE wf_tasks SET due_at = now()
        WHERE lease_owner IS NULL
          AND id IN (
              SELECT t.id FROM wf_tasks t
              WHERE t.lease_owner IS NULL
                AND t.instance_id IN (
                    SELECT DISTINCT ON (w.key) w.instance_id
                    FROM wf_lock_waiters w
                    WHERE w.key = ANY(freed) AND w.instance_id <> ALL (passed)
                      AND EXISTS (SELECT 1 FROM wf_tasks o
                                  WHERE o.instance_id = w.instance_id
                                    AND o.lease_owner IS NULL)
                    ORDER BY w.key, w.since, w.instance_id)
              ORDER BY t.id FOR UPDATE)
        RETURNING id
    )
    SELECT count(*) INTO woken FROM woke;
    RETURN woken;
END
$$;

-- Each statement is the CTE it replaces, over `ended` (the ids of the instances whose CAS
-- held) where the CTE read the finish's `inst`. Returns whether a task was made due (a
-- lock waiter's, or a parent's not held by a runner): the finish then notifies, and a
-- claim in the same statement takes nothing (queries.sql, apply_finish's `done`).
CREATE FUNCTION swf_finish_rest(ended uuid[], settled jsonb, by_worker text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    woken boolean;
    parent_due boolean;
BEGIN
    -- An instance that ends dead-letters the signals it never applied and voids its
    -- timers (rows the finish settles itself excepted).
    WITH sig_end AS (
        UPDATE wf_signals s
        SET state = CASE WHEN s.kind = 'timer' THEN 'void' ELSE 'dead' END,
            settled_at = now()
        WHERE s.instance_id = ANY(ended) AND s.state = 'pending'
          AND s.id NOT IN (SELECT (x ->> 'id')::bigint FROM jsonb_array_elements(settled) AS x)
        RETURNING s.*
    )
    INSERT INTO wf_dead_letters (instance_id, envelope, reason, worker)
    SELECT e.instance_id,
           jsonb_build_object('signal', e.id, 'instance_id', e.instance_id, 'kind', e.kind,
                              'name', e.name, 'payload', e.payload,
                              'tokened', e.token IS NOT NULL),
           'the instance ended before the signal was applied', by_worker
    FROM sig_end e WHERE e.kind = 'signal';

    -- An instance that ends releases its locks and wakes their next waiters, in the same
    -- commit. The keys left free with somebody still queued: the ones released, and the
    -- ones queued for and never taken (a woken waiter that ends without taking the lock
    -- passes the wake-up on; see lock_release).
    WITH rel AS (
        DELETE FROM wf_locks l WHERE l.holder = ANY(ended) RETURNING l.key
    )
    SELECT swf_wake_next(ARRAY(
               SELECT key FROM rel
               UNION
               SELECT w.key FROM wf_lock_waiters w
               WHERE w.instance_id = ANY(ended)
                 AND NOT EXISTS (SELECT 1 FROM wf_locks l WHERE l.key = w.key)), ended) > 0
    INTO woken;

    -- A sub-workflow that ends makes its parent's waiting node task due. The row is
    -- matched whatever its lease (so a parent parking it right now is waited for, then
    -- woken) and left as it is while a runner holds it: that runner re-reads the child
    -- after parking (docs/architecture.md, "Sub-workflows"). The parents' rows are locked
    -- in id order, as `woke` locks its rows.
    WITH parent AS (
        UPDATE wf_tasks t
        SET due_at = CASE WHEN t.lease_owner IS NULL THEN now() ELSE t.due_at END
        WHERE t.id IN (SELECT p.id FROM wf_instances i
                       JOIN wf_tasks p ON p.instance_id = i.parent_id AND p.slot = i.parent_node
                       WHERE i.id = ANY(ended)
                       ORDER BY p.id FOR UPDATE OF p)
        RETURNING t.lease_owner IS NULL AS due
    )
    SELECT EXISTS (SELECT 1 FROM parent WHERE due) INTO parent_due;

    RETURN woken OR parent_due;
END
$$;
